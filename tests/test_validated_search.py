"""A search whose answer is chosen on held-out prompts (tiny random-weight model): the
split never lets the search see a validation prompt, the finalists are re-measured and
recorded, a rerun re-measures nothing, and Ctrl-C while validating loses nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_search_cli import _ctrl_c, _journal_trials, _parked, _stray_temporaries
from tiny import llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)

from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.search.study import counted_trials
from autotune.workloads.prompts import load_workload
from autotune.workloads.split import PromptSplit, split_prompts

# Two categories of repetitive prompts (the n-gram drafter finds matches in them).
LINES = [{"category": "rep", "prompt": f"a{i} b{i} c{i} a{i} b{i} c{i} a{i} b{i}"} for i in range(6)]
LINES += [{"category": "mix", "prompt": f"x{i} y{i} x{i} z{i} x{i} y{i}"} for i in range(6)]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    save_tiny(llama_model(seed=5, layers=4, scale=4.0), folder / "model")
    (folder / "prompts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in LINES))
    return folder


def _args(tiny_dir: Path, run: Path, *extra: str) -> list[str]:
    return ["search", "--model", str(tiny_dir / "model"), "--workload",
            str(tiny_dir / "prompts.jsonl"), "--space", "ngram", "--trials", "4",
            "--max-new-tokens", "16", "--prompts", "4", "--validation", "0.5",
            "--validation-prompts", "4", "--validation-repeats", "2", "--finalists", "2",
            "--out", str(run), "--study", "v", "--no-prune", "--fidelity", "measure", *extra]


def _split(workload: str, validation: str, prompts: int, seed: int = 0) -> PromptSplit:
    """The split `search --validation VALIDATION --validation-prompts 4` makes."""
    return split_prompts(workload, None, validation, seed, prompts, held_out=4)


def test_the_split_keeps_validation_prompts_out_of_the_search(tiny_dir, tmp_path):
    workload = str(tiny_dir / "prompts.jsonl")
    split = _split(workload, "0.5", 100)
    search, held, source = split.search, split.held_out, split.source
    assert {p.prompt_id for p in search}.isdisjoint(p.prompt_id for p in split.pool)
    assert len(held) == 4 and {p.category for p in held} == {"rep", "mix"}
    # The measured prompts are a random sample of the pool (6: half of each category).
    assert len(split.pool) == 6 and {p.prompt_id for p in held} < {
        p.prompt_id for p in split.pool}
    assert "held out (0.5, stratified by category, seed 0)" in source
    # Seeded: the same seed, the same split; another seed, another.
    again = _split(workload, "0.5", 100)
    assert [p.prompt_id for p in again.held_out] == [p.prompt_id for p in held]
    other = _split(workload, "0.5", 100, seed=3)
    assert [p.prompt_id for p in other.pool] != [p.prompt_id for p in split.pool]
    # 0: nothing held out.
    assert _split(workload, "0", 100).held_out == [] == _split(workload, "0", 100).pool
    # A file: its prompts are held out and dropped from the search by text.
    file = tmp_path / "held.jsonl"
    file.write_text("".join(json.dumps(x) + "\n" for x in LINES[:2]))
    split = _split(workload, str(file), 100)
    search, held = split.search, split.held_out
    assert [p.text for p in held] == [x["prompt"] for x in LINES[:2]] == [
        p.text for p in split.pool]
    assert not {p.text for p in search} & {p.text for p in held} and len(search) == 10
    for bad, message in (("1.5", "a fraction lies in"), ("nofile.jsonl", "neither a fraction")):
        with pytest.raises(AutotuneError, match=message):
            _split(workload, bad, 100)


def test_a_validated_search_records_chooses_and_exports_on_held_out_prompts(
        tiny_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(_args(tiny_dir, run)) == 0
    printed = capsys.readouterr()
    assert "racing" in printed.err and "held-out prompts measured x 2 repeats" in printed.err
    assert "finalists on 4 held-out prompts x 2 pass(es)" in printed.out
    best = json.loads((run / "best.json").read_text())
    validation = best["validation"]
    held = set(validation["prompt_ids"])
    search_ids = {p.prompt_id for p in _split(
        str(tiny_dir / "prompts.jsonl"), "0.5", 4)[0]}
    assert len(held) == 4 and held.isdisjoint(search_ids)
    # A random sample balanced by category: 2 of each category's 3 pool prompts.
    assert validation["repeats"] == 2 and validation["categories"] == {"rep": 2, "mix": 2}
    # Prediction-powered over the pool of 6 held-out prompts, 4 of them measured.
    assert validation["pool_prompts"] == 6 and validation["estimator"] == "ppi++"
    assert validation["pool_categories"] == {"rep": 3, "mix": 3}
    finalists = validation["finalists"]
    # The top 2 distinct configs, plus vLLM's default when it is not among them.
    assert 1 <= len(finalists) <= 3 and all(f["lossless"] is True for f in finalists)
    roles = [f["role"] for f in finalists]
    assert roles[0] == "search #1"
    for f in finalists:
        assert set(f["by_category"]) == {"rep", "mix"}
        assert f["estimator"] == "ppi++" and f["pool_prompts"] == 6
        assert f["measured_prompts"] == 4 and 0.0 <= f["ppi_lambda"] <= 1.0
        assert f["measured_speedup"] is not None and f["predicted_speedup"] is not None
        assert f["ci90"] is None or f["ci90"][0] <= f["speedup"] <= f["ci90"][1]
    if validation["decision"] == "speculate":
        winner = next(f for f in finalists if f["trial"] == validation["winner"])
        assert best["provenance"]["trial"] == winner["trial"] and winner["ci90"][0] > 1.0
        assert validation["speedup"] == winner["speedup"]
    else:
        assert best["params"]["method"] == "none" and validation["speedup"] == 1.0
        assert not [p for p in (run / "exports").iterdir() if p.name != "README.txt"]
    assert main(["validate", str(run / "best.json")]) == 0
    # Rerunning the finished search re-measures nothing and keeps the record.
    capsys.readouterr()
    assert main(_args(tiny_dir, run)) == 0
    again = capsys.readouterr()
    assert "racing" not in again.err
    assert json.loads((run / "best.json").read_text())["validation"]["prompt_ids"] == \
        validation["prompt_ids"]
    # More repeats asked for: the finalists are measured again.
    assert main(_args(tiny_dir, run, "--validation-repeats", "1")) == 0
    assert "racing" in capsys.readouterr().err
    assert json.loads((run / "best.json").read_text())["validation"]["repeats"] == 1


def test_ctrl_c_while_validating_keeps_the_search_and_a_rerun_validates(tiny_dir, tmp_path):
    run = tmp_path / "run"
    args = _args(tiny_dir, run)
    proc = _parked("validation", 1, args, tmp_path / "m")
    out, err = _ctrl_c(proc)
    assert "interrupted while validating the finalists" in err
    assert "not validated" in out
    best = json.loads((run / "best.json").read_text())
    assert "validation" not in best                           # the search's own best
    trials = _journal_trials(run / "study.journal", "v")
    assert len(counted_trials(trials)) == 4
    assert not _stray_temporaries(run)
    readme = (run / "exports" / "README.txt").read_text()
    assert "NOT validated" in readme

    from test_search_cli import _cli
    rerun = _cli(*args)
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    assert "racing" in err
    assert len(_journal_trials(run / "study.journal", "v")) == len(trials)   # no new trial
    assert json.loads((run / "best.json").read_text())["validation"]["prompts"] == 4


def test_a_workload_too_small_to_hold_out_is_searched_unvalidated(tiny_dir, tmp_path, capsys):
    small = tmp_path / "two.txt"
    small.write_text("t1 t2 t3 t1 t2 t3\nt7 t8 t7 t8\n")
    args = ["search", "--model", str(tiny_dir / "model"), "--workload", str(small),
            "--space", "ngram", "--trials", "2", "--max-new-tokens", "8", "--out",
            str(tmp_path / "run"), "--no-prune", "--fidelity", "measure"]
    assert main(args) == 0
    printed = capsys.readouterr()
    assert "too few to hold 2 out" in printed.err and "not validated" in printed.out
    assert "validation" not in json.loads((tmp_path / "run" / "best.json").read_text())
