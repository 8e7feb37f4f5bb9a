"""`autotune search` as a user runs it: bad inputs, kill -9 and resume, two workers on
one PostgreSQL study, and a short search on the real default model."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState
from phase_driver import release_file
from tiny import llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)

import autotune.models.loading as loading
from autotune.cli.main import main
from autotune.search.study import counted_trials

# Repetitive prompts so n-gram drafts get accepted on a random model too.
WORKLOAD = "t1 t2 t3 t4 t5 t1 t2 t3 t4 t5 t1 t2\nt7 t8 t9 t7 t8 t9 t7 t8\n"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    save_tiny(llama_model(seed=5, layers=4, scale=4.0), folder / "model")
    (folder / "prompts.txt").write_text(WORKLOAD)
    return folder


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "autotune.cli.main", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _journal_study(path: Path, study: str) -> optuna.Study:
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(path)))
    return optuna.load_study(study_name=study, storage=storage)


def _journal_trials(path: Path, study: str) -> list:
    return _journal_study(path, study).get_trials(deepcopy=False)


@pytest.fixture
def no_loading(monkeypatch):
    def spy(*args, **kwargs):
        raise AssertionError(f"load_model reached with {args}")
    monkeypatch.setattr(loading, "load_model", spy)


@pytest.mark.parametrize("args,message", [
    (["--trials", "0"], "--trials must be at least 1"),
    (["--sampler", "tpee"], "did you mean 'tpe'"),
    (["--space", "layer_skp"], "layer_skip"),
    (["--objective", "latncy"], "latency"),
    (["--timeout", "-1"], "--timeout must be a positive"),
    (["--objective", "latency_memory", "--sampler", "cmaes"], "one objective"),
    # The engine backends: refused before any model loads where they cannot run.
    (["--fidelity", "engine"], "--fidelity engine measures in the --target engine"),
    (["--target", "trtllm", "--fidelity", "engine"], "'trtllm' has no backend"),
    (["--target", "sglang", "--fidelity", "engine"], "sglang cannot measure here"),
    # A retired target: the line names its replacement and how to install it.
    (["--target", "llama_cpp"], "llama_cpp (llama-cpp-python) was retired: use llama_server"),
    (["--target", "llama_cpp"], "python -m autotune.backends.llama_server_install"),
])
def test_bad_search_inputs_are_one_line_before_loading(capsys, no_loading, tmp_path, args, message):
    assert main(["search", "--out", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autotune: error:") and "\n" not in err
    assert message in err
    assert not (tmp_path / "r").exists()


def test_vllm_that_cannot_run_here_is_refused_before_loading(capsys, no_loading, tmp_path,
                                                            monkeypatch):
    monkeypatch.setenv("AUTOTUNE_VLLM_PYTHON", str(tmp_path / "no-python"))
    assert main(["search", "--out", str(tmp_path / "r"), "--target", "vllm", "--fidelity",
                 "engine"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autotune: error:") and "\n" not in err
    assert "vllm cannot measure here" in err and "AUTOTUNE_VLLM_PYTHON" in err


def test_bad_enqueue_file(capsys, no_loading, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {method: ngram, kk: 3}\n")
    assert main(["search", "--enqueue", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "kk" in capsys.readouterr().err


DRIVER = Path(__file__).with_name("phase_driver.py")


def _search_args(tiny_dir: Path, run: Path, study: str, trials: int) -> list[str]:
    return ["search", "--model", str(tiny_dir / "model"), "--workload",
            str(tiny_dir / "prompts.txt"), "--space", "ngram", "--trials", str(trials),
            "--max-new-tokens", "24", "--prompts", "2", "--out", str(run), "--study", study,
            "--no-prune", "--fidelity", "measure"]


def _parked(phase: str, nth: int, args: list[str], marker: Path) -> subprocess.Popen:
    """The CLI under `phase_driver`, waiting at the nth time it reaches `phase` once
    this returns: the test signals a process whose place it knows."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(DRIVER), phase, str(nth), str(marker), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # No deadline of ours: the driver gives up by itself (exit != 0) if never reached.
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"exited {proc.returncode} before reaching {phase}: {err[-2000:]}")
        time.sleep(0.05)
    return proc


def test_kill_9_loses_no_finished_trial_and_rerun_resumes(tmp_path, tiny_dir):
    run = tmp_path / "run"
    args = _search_args(tiny_dir, run, "k9", trials=6)
    proc = _parked("trial", 3, args, tmp_path / "in-trial")     # the baseline, one, the third
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    journal = run / "study.journal"
    before = {t.number: (t.state, t.values, t.params)
              for t in _journal_trials(journal, "k9") if t.state.is_finished()}
    assert len(before) == 2
    running = [t.number for t in _journal_trials(journal, "k9") if t.state == TrialState.RUNNING]
    assert running == [2]

    rerun = _cli(*args)
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    trials = _journal_trials(journal, "k9")
    after = {t.number: (t.state, t.values, t.params) for t in trials}
    for number, record in before.items():
        assert after[number] == record             # nothing finished was lost or changed
    assert len(counted_trials(trials)) == 6
    killed = next(t for t in trials if t.number == running[0])
    assert killed.state == TrialState.FAIL and killed.user_attrs["interrupted"]
    retry = [t for t in trials if t.user_attrs.get("retry_of") == killed.number]
    assert len(retry) == 1 and retry[0].params == killed.params
    frame = pd.read_csv(run / "trials.csv")
    assert len(frame) == len(trials)
    assert json.loads((run / "best.json").read_text())["params"]["method"] in ("ngram", "none")


def _stray_temporaries(folder: Path) -> list[str]:
    """write_atomically's `.NAME.*` files and write_exports' `.exports-*` folders."""
    return sorted(p.name for p in folder.rglob(".*")) if folder.exists() else []


def _ctrl_c(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    return out, err


def test_ctrl_c_before_the_study_leaves_nothing(tmp_path, tiny_dir):
    run = tmp_path / "run"
    proc = _parked("profile", 1, _search_args(tiny_dir, run, "cc", 4), tmp_path / "m")
    _, err = _ctrl_c(proc)
    assert "autotune: interrupted" in err
    assert not run.exists()


@pytest.mark.parametrize("phase,nth", [("trial", 3), ("between", 2)])
def test_ctrl_c_in_or_between_trials_stops_cleanly_prints_the_summary_and_requeues(
        tmp_path, tiny_dir, phase, nth):
    run = tmp_path / "run"
    proc = _parked(phase, nth, _search_args(tiny_dir, run, "cc", 6), tmp_path / "m")
    out, err = _ctrl_c(proc)
    assert "interrupted (Ctrl-C)" in err and "speedup" in out
    trials = _journal_trials(run / "study.journal", "cc")
    assert not any(t.state == TrialState.RUNNING for t in trials)
    stopped = [t for t in trials if t.user_attrs.get("interrupted")]
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    if phase == "trial":
        # The third trial was stopped inside: failed, not counted, queued again.
        assert [t.number for t in stopped] == [2] and stopped[0].state == TrialState.FAIL
        assert [(t.user_attrs["retry_of"], t.system_attrs["fixed_params"]) for t in waiting] == [
            (2, stopped[0].params)]
        assert len(counted_trials(trials)) == 2
    else:
        # Stopped while the second trial's files were written: nothing to mark.
        assert stopped == [] and waiting == []
        assert len(counted_trials(trials)) == 2
    assert len(pd.read_csv(run / "trials.csv")) == len(trials)
    assert {"best.json", "report.html", "exports"} <= {p.name for p in run.iterdir()}
    assert _stray_temporaries(run) == []


@pytest.mark.parametrize("phase,missing", [("report", "report.html"), ("exports", "exports")])
def test_ctrl_c_while_writing_the_report_or_exports_leaves_no_half_file(
        tmp_path, tiny_dir, phase, missing):
    run = tmp_path / "run"
    proc = _parked(phase, 1, _search_args(tiny_dir, run, "cc", 2), tmp_path / "m")
    _, err = _ctrl_c(proc)
    assert f"autotune report {run}" in err and "the study is saved" in err
    assert "trial budget reached" not in err and "interrupted (Ctrl-C)" in err
    names = {p.name for p in run.iterdir()}
    assert missing not in names
    assert {"best.json", "trials.csv", "run.json"} <= names
    assert _stray_temporaries(run) == []
    trials = _journal_trials(run / "study.journal", "cc")
    assert len(counted_trials(trials)) == 2
    # The redo the message names writes what is missing.
    assert main(["report", str(run)]) == 0
    assert (run / "report.html").is_file()


# -- many workers on one PostgreSQL study ----------------------------------------------

def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(candidates[-1]) if candidates else None


@pytest.fixture
def postgres_url():
    """A throwaway PostgreSQL server on loopback; CI (AUTOTUNE_REQUIRE_POSTGRES=1) must
    have it, elsewhere the test skips when the server binaries are missing."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        if os.environ.get("AUTOTUNE_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found")
        pytest.skip("PostgreSQL server binaries not installed")
    pytest.importorskip("psycopg")
    # PostgreSQL refuses to run as root: run it as the `postgres` user then.
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(folder, "postgres")
    data = folder / "data"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run([*as_user, initdb, "-D", str(data), "-U", "autotune", "--auth=trust",
                    "-E", "UTF8"], check=True, capture_output=True)
    subprocess.run([*as_user, pg_ctl, "-D", str(data), "-l", str(folder / "log"), "-w",
                    "-o", f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql://autotune@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def _pid_of(worker: str | None) -> int | None:
    """The pid in a trial's `worker` attribute (host:pid:start-time)."""
    parts = (worker or "").rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def test_two_workers_share_one_postgres_study(tmp_path, tiny_dir, postgres_url):
    common = ["search", "--model", str(tiny_dir / "model"), "--workload",
              str(tiny_dir / "prompts.txt"), "--space", "ngram", "--trials", "10",
              "--max-new-tokens", "24", "--prompts", "2", "--storage", postgres_url,
              "--study", "shared", "--fidelity", "measure"]
    # The first worker is held inside its second trial until the second worker has
    # finished one of its own: both work, however fast either starts or runs.
    marker = tmp_path / "first-in-trial"
    first = _parked("trial", 2, [*common, "--out", str(tmp_path / "w0"), "--seed", "0"], marker)
    second = _cli(*common, "--out", str(tmp_path / "w1"), "--seed", "1")
    study = None
    while study is None or not any(
            t.state.is_finished() and _pid_of(t.user_attrs.get("worker")) == second.pid
            for t in study.get_trials(deepcopy=False)):
        assert second.poll() is None, second.communicate()
        time.sleep(0.2)
        try:
            study = optuna.load_study(study_name="shared", storage=postgres_url)
        except KeyError:             # not created yet
            study = None
    release_file(marker).touch()
    workers = [first, second]
    outputs = [w.communicate(timeout=600) for w in workers]
    for w, (out, err) in zip(workers, outputs):
        assert w.returncode == 0, err
    study = optuna.load_study(study_name="shared", storage=postgres_url)
    trials = study.get_trials(deepcopy=False)
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    counted = counted_trials(trials)
    assert 10 <= len(counted) <= 11         # two workers may each start the last one
    # Each finished trial was run by exactly one of the two workers, and both worked.
    owners = {t.user_attrs["worker"] for t in counted}
    assert len(owners) == 2
    reported = [line for _, err in outputs for line in err.splitlines() if "] trial " in line]
    ran = sorted(int(line.split("] trial ")[1].split()[0]) for line in reported)
    assert ran == sorted(t.number for t in trials if t.state.is_finished())
    assert sum(1 for t in trials if t.user_attrs.get("preset") == "baseline") == 1


# -- the real default model ---------------------------------------------------------

@pytest.mark.slow
def test_search_on_the_default_model_writes_the_run_folder_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    # The default workload (Spec-Bench), its held-out pool cut to 8 prompts: the replay
    # tier predicts them, 3 are measured.
    args = ["search", "--space", "ngram", "--trials", "3", "--prompts", "2",
            "--max-new-tokens", "8", "--validation-prompts", "3", "--validation-repeats", "1",
            "--validation-pool", "8", "--out", str(out), "--fidelity", "measure"]
    assert main(args) == 0
    printed = capsys.readouterr()
    assert "speedup" in printed.out and "run folder" in printed.out
    assert "finalists on 3 held-out prompts x 1 pass(es)" in printed.out
    assert "answer: " in printed.out
    assert {"study.journal", "trials.csv", "best.json", "run.json", "report.html",
            "exports"} <= {p.name for p in out.iterdir()}
    best = json.loads((out / "best.json").read_text())
    assert best["schema"] == "autotune.frozen/v6"
    assert best["objective"]["values"]["speedup"] > 0
    assert best["metrics"]["lossless"] is True
    # The answer was chosen on 3 prompts the search never measured.
    validation = best["validation"]
    assert validation["prompts"] == 3 and validation["repeats"] == 1
    assert validation["pool_prompts"] == 8 and validation["estimator"] == "ppi++"
    assert validation["race"]["stopped"] in ("decided", "sample")
    assert validation["decision"] in ("speculate", "do_not_speculate", "undecided")
    assert validation["min_gain"] == 0.05
    assert len(validation["finalists"]) >= 1
    if validation["decision"] == "speculate":
        assert best["provenance"]["trial"] == validation["winner"]
        assert validation["ci90"][0] > 1.0
    else:
        assert best["params"]["method"] == "none"
    assert best["model"]["id"] == "SmolLM2-135M-Instruct" and best["model"]["hash_of"] == "weights"
    assert best["workload"]["prompts"] == 2 and best["workload"]["max_new_tokens"] == 8
    # Measured under autotune's own rules (no --target), an n-gram best is no exact vLLM
    # config (vLLM pads its n-gram drafts to K): vllm.json is not written.
    exported = {p.name for p in (out / "exports").iterdir()}
    assert "README.txt" in exported
    if best["params"]["method"] == "ngram":
        assert "vllm.json" not in exported
        assert "vllm: not written" in (out / "exports" / "README.txt").read_text()
    if validation["decision"] != "speculate":
        assert exported == {"README.txt"}
        said = "do not speculate" if validation["decision"] == "do_not_speculate" else "undecided"
        assert said in (out / "exports" / "README.txt").read_text()
    capsys.readouterr()
    # The consumers of the format: validate, re-measure, generate.
    assert main(["validate", str(out / "best.json")]) == 0
    assert capsys.readouterr().out.startswith(f"{out / 'best.json'}: valid frozen config: ")
    assert main(["measure", "--config", str(out / "best.json"), "--json"]) == 0
    remeasured = json.loads(capsys.readouterr().out)
    # A validated config is re-measured on its held-out prompts, against its held-out figure.
    assert remeasured["now"]["prompts"] == 3 and remeasured["now"]["lossless"] is True
    assert remeasured["recorded"]["speedup"] == validation["speedup"]
    assert remeasured["now"]["config"] == best["params"]
    assert main(["generate", "--config", str(out / "best.json"), "--prompt",
                 "Name three colours.", "--max-new-tokens", "12"]) == 0
    generated = capsys.readouterr()
    assert generated.out.strip() and "ms/token" in generated.err
    run = json.loads((out / "run.json").read_text())
    assert run["space"] == "ngram" and run["objective"] == "speedup"
    # Rerunning with a bigger budget adds only the missing trials.
    assert main([*args[:4], "4", *args[5:]]) == 0
    frame = pd.read_csv(out / "trials.csv")
    assert len(frame[frame.state.isin(["COMPLETE", "PRUNED", "FAIL"])]) == 4


def test_hf_target_validates_its_finalists_in_transformers_generate(tmp_path, tiny_dir, capsys):
    """`--target hf`: trials in our decoder under transformers' rules, finalists re-measured
    in transformers' own generate(); best.json and the report say so."""
    out = tmp_path / "run"
    workload = tmp_path / "prompts.txt"
    workload.write_text(WORKLOAD * 2)          # 4 prompts: 2 searched, 2 held out
    args = ["search", "--model", str(tiny_dir / "model"), "--target", "hf",
            "--workload", str(workload), "--validation", "0.5",
            "--fidelity", "measure", "--trials", "3", "--max-new-tokens", "8",
            "--out", str(out), "--no-prune"]
    assert main(args) == 0
    assert "the finalists measured in HF transformers" in capsys.readouterr().err
    best = json.loads((out / "best.json").read_text())
    validation = best["validation"]
    assert validation["measured_by"] == "hf"
    assert "generate()" in validation["measured_by_label"]
    trials = pd.read_csv(out / "trials.csv")
    assert set(trials["metrics.measured_by"].dropna()) == {"autotune"}
    assert "HF transformers" in (out / "report.html").read_text()


def test_hf_target_screen_ranks_at_hf_own_costs_and_races_its_picks(tmp_path, tiny_dir,
                                                                     capsys, monkeypatch):
    """`--target hf` with its replay screen (issue 60): HF's cost profile is measured in
    `generate()` before the sizing and prices the screen; the race in HF takes the
    screen's picks at those prices, not the measured trials' ranking (timed in our
    decoder), and the profile is kept in the run folder."""
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    workload = tmp_path / "prompts.txt"
    workload.write_text(WORKLOAD * 2)
    args = ["search", "--model", str(tiny_dir / "model"), "--target", "hf",
            "--workload", str(workload), "--validation", "0.5", "--screen", "6",
            "--trials", "3", "--max-new-tokens", "8", "--out", str(out), "--no-prune"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "hf's own costs (measured in hf)" in err
    assert "autotune's own finalists: the screen's best at hf's own costs" in err
    assert (out / "engine_profiles.json").is_file()
    validation = json.loads((out / "best.json").read_text())["validation"]
    assert validation["measured_by"] == "hf"
    roles = [f["role"] for f in validation["finalists"]]
    assert roles and all(r.startswith(("screen #", "default ")) for r in roles), roles


def test_llama_server_target_searches_in_the_server(tmp_path, capsys):
    """`--target llama_server` on the default model, end to end: every trial and the
    finalists run in llama-server processes (its default fidelity is engine), the
    workload's `--concurrency` reaches every config, and no server is left running."""
    from autotune.backends.llama_server import installed
    if not installed() and not os.environ.get("AUTOTUNE_REQUIRE_LLAMA_SERVER"):
        pytest.skip("llama-server is not installed")
    out = tmp_path / "run"
    # The whole held-out pool is measured (2 of 2): nothing is left for the replay tier
    # to predict, so the run measures no replay cost parts of our decoder (about 60 s
    # here; prediction-powered validation is covered by the default-model search above).
    args = ["search", "--target", "llama_server", "--workload", "copy_edit",
            "--concurrency", "2", "--trials", "2", "--prompts", "2",
            "--validation-prompts", "2", "--validation-pool", "2", "--max-new-tokens", "12",
            "--out", str(out), "--no-prune"]
    assert main(args) == 0
    assert "every trial measured in llama-server" in capsys.readouterr().err
    trials = pd.read_csv(out / "trials.csv")
    assert set(trials["metrics.measured_by"].dropna()) == {"llama_server"}
    drafted = trials[trials["config.method"] == "llama_ngram"]
    assert len(drafted) >= 1 and set(drafted["config.engine"]) == {"llama_server"}
    assert set(trials["config.concurrency"].dropna()) == {2}
    best = json.loads((out / "best.json").read_text())
    assert best["validation"]["measured_by"] == "llama_server"
    # Our forward's cost profile would describe another engine than the one measured.
    assert not (out / "hardware_profile.json").exists()
    import subprocess
    left = subprocess.run(["pgrep", "-f", "llama-server.*--poll"], capture_output=True,
                          text=True).stdout.split()
    assert left == [], f"llama-server processes left running: {left}"
