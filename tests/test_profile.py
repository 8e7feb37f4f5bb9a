"""The hardware profile: the target's forward cost for n new tokens, its file in a
search's run folder (written once, reused on resume) and `autotune profile`.

Tiny random models only; no timing assertion beyond sanity (a shared machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny import gpt2_model, llama_model, one_thread, save_tiny, tiny_llama, tiny_loaded  # noqa: F401

import autotune.measure.profile as profile_module
import autotune.models.loading as loading
from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.measure.profile import (
    DEFAULT_SIZES,
    PROFILE_FILE,
    check_sizes,
    format_profile,
    forward_cost_profile,
    free_tokens,
)

KEYS = {"model", "device", "dtype", "context_tokens", "repeats", "points"}


def _check_format(doc: dict, sizes, repeats: int) -> None:
    assert set(doc) == KEYS
    assert isinstance(doc["model"], str) and doc["device"] == "cpu" and doc["dtype"] == "float32"
    assert doc["repeats"] == repeats and doc["context_tokens"] >= 1
    assert [p["tokens"] for p in doc["points"]] == sorted(sizes)
    for point in doc["points"]:
        assert set(point) == {"tokens", "ms", "ms_min"}
        assert 0 < point["ms_min"] <= point["ms"] < 60_000
    json.dumps(doc)                               # plain JSON types only


def test_profile_of_a_tiny_llama_has_the_format():
    doc = forward_cost_profile(tiny_llama(seed=1), repeats=2)
    _check_format(doc, DEFAULT_SIZES, 2)
    assert doc["model"] == "tiny-llama-1" and doc["context_tokens"] == 128
    assert doc["points"][0]["tokens"] == 1 and doc["points"][-1]["tokens"] == 128


def test_sizes_come_back_sorted_and_the_context_fits_the_positions():
    # tiny models have 256 positions: 200 new tokens leave room for 56 of context
    doc = forward_cost_profile(tiny_llama(seed=1), sizes=[8, 1, 200], context_tokens=128,
                               repeats=1)
    _check_format(doc, [1, 8, 200], 1)
    assert doc["context_tokens"] == 56


def test_hf_forward_models_are_profiled_too():
    doc = forward_cost_profile(tiny_loaded(gpt2_model(seed=2), name="gpt2"), sizes=(1, 4, 16),
                               context_tokens=32, repeats=2)
    _check_format(doc, [1, 4, 16], 2)
    assert doc["context_tokens"] == 32


@pytest.mark.parametrize("sizes, message", [
    ([], "non-empty list"),
    ([0, 1], "profile size 0 is not a token count >= 1"),
    ([1, 2.5], "2.5"),
    ([4, 4], "twice"),
    ("1,2", "non-empty list"),
    ([True], "True"),
])
def test_bad_sizes_are_one_line(sizes, message):
    with pytest.raises(AutotuneError, match=message) as info:
        check_sizes(sizes)
    assert "\n" not in str(info.value)


def test_sizes_past_the_models_positions_and_bad_numbers():
    model = tiny_llama(seed=1)
    with pytest.raises(AutotuneError, match="does not fit the model's 256 positions"):
        forward_cost_profile(model, sizes=[1, 256])
    with pytest.raises(AutotuneError, match="repeats=0"):
        forward_cost_profile(model, sizes=[1], repeats=0)
    with pytest.raises(AutotuneError, match="context_tokens=0"):
        forward_cost_profile(model, sizes=[1], context_tokens=0)


def test_table_and_free_band():
    doc = {"model": "m", "device": "cpu", "dtype": "float32", "context_tokens": 8, "repeats": 3,
           "points": [{"tokens": 1, "ms": 10.0, "ms_min": 9.0},
                      {"tokens": 4, "ms": 10.8, "ms_min": 10.5},
                      {"tokens": 16, "ms": 40.0, "ms_min": 30.0}]}
    assert free_tokens(doc) == 4
    table = format_profile(doc)
    lines = table.splitlines()
    assert lines[0].split() == ["tokens", "ms", "ms/token", "x", "1-token", "cost"]
    assert lines[3].split() == ["16", "40.00", "2.500", "4.00"]
    assert "verifying up to 4 tokens costs at most 1.1x 1 token" in table
    doc["points"][1]["ms"] = 15.0
    assert format_profile(doc).splitlines()[-1] == (
        "already 4 tokens cost 1.50x 1 token: verifying is not free here beyond 1 token")


# ------------------------------------------------------------------ the CLI

@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    save_tiny(llama_model(seed=5, layers=2, scale=4.0), folder / "model")
    (folder / "prompts.txt").write_text("t1 t2 t3 t4 t5 t1 t2 t3 t4 t5 t1 t2\n")
    return folder


def test_cli_prints_the_table_and_writes_json(tiny_dir, tmp_path, capsys):
    out = tmp_path / "sub" / "profile.json"
    assert main(["profile", "--model", str(tiny_dir / "model"), "--device", "cpu",
                 "--sizes", "4,1,2", "--repeats", "2", "--context", "16", "-o", str(out)]) == 0
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert lines[0].split()[:3] == ["tokens", "ms", "ms/token"]
    assert [line.split()[0] for line in lines[1:4]] == ["1", "2", "4"]
    assert lines[1].split()[-1] == "1.00"
    assert "after 16 context tokens, median of 2" in printed.out
    assert f"wrote {out}" in printed.err
    doc = json.loads(out.read_text())
    _check_format(doc, [1, 2, 4], 2)
    assert doc["context_tokens"] == 16 and doc["model"] == str(tiny_dir / "model")


@pytest.fixture
def no_loading(monkeypatch):
    def spy(*args, **kwargs):
        raise AssertionError(f"load_model reached with {args}")
    monkeypatch.setattr(loading, "load_model", spy)


@pytest.mark.parametrize("args, message", [
    (["--sizes", "1,x"], "not a comma-separated list of token counts"),
    (["--sizes", "0,4"], "profile size 0 is not a token count >= 1"),
    (["--sizes", "4,4"], "twice"),
    (["--sizes", ","], "non-empty list"),
    (["--repeats", "0"], "--repeats must be at least 1"),
    (["--context", "0"], "--context must be at least 1"),
    (["--draft", "x"], "unrecognized arguments: --draft"),
])
def test_cli_bad_input_is_one_line_before_loading(args, message, capsys, no_loading):
    assert main(["profile", *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: ") and captured.out == ""
    assert message in lines[0]


# ------------------------------------------------------------------ in a search's run folder

def _search(tiny_dir: Path, run: Path, trials: int) -> int:
    return main(["search", "--model", str(tiny_dir / "model"), "--workload",
                 str(tiny_dir / "prompts.txt"), "--space", "ngram", "--trials", str(trials),
                 "--max-new-tokens", "6", "--prompts", "1", "--out", str(run), "--no-prune",
                 "--device", "cpu", "--fidelity", "measure"])


def test_search_writes_the_profile_once_and_reuses_it(tiny_dir, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert _search(tiny_dir, run, 1) == 0
    captured = capsys.readouterr()
    assert captured.err.count("profiling the target's forward cost") == 1
    assert PROFILE_FILE in captured.out                  # listed with the run folder's files
    path = run / PROFILE_FILE
    doc = json.loads(path.read_text())
    _check_format(doc, DEFAULT_SIZES, doc["repeats"])
    assert doc["model"] == str(tiny_dir / "model")
    assert not [p for p in run.iterdir() if p.name.startswith(f".{PROFILE_FILE}")]  # no temp

    # Resume: same model, device and dtype: the file is reused, not measured again.
    def fail(*args, **kwargs):
        raise AssertionError("profiled again")
    monkeypatch.setattr(profile_module, "forward_cost_profile", fail)
    stamp = path.read_text()
    assert _search(tiny_dir, run, 2) == 0
    assert "profiling" not in capsys.readouterr().err and path.read_text() == stamp

    # Another dtype on file (or a damaged file): measured again and replaced.
    monkeypatch.undo()
    path.write_text(stamp.replace('"float32"', '"bfloat16"'))
    assert _search(tiny_dir, run, 3) == 0
    assert "profiling" in capsys.readouterr().err
    assert json.loads(path.read_text())["dtype"] == "float32"


def test_a_failed_profile_is_a_warning_and_the_search_goes_on(tiny_dir, tmp_path, capsys,
                                                             monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no clock today\nsecond line")
    monkeypatch.setattr(profile_module, "forward_cost_profile", broken)
    run = tmp_path / "run"
    assert _search(tiny_dir, run, 1) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "hardware profile" in line]
    assert warnings == ["autotune: warning: no hardware profile (RuntimeError: no clock today)"]
    assert not (run / PROFILE_FILE).exists() and (run / "best.json").is_file()


def test_a_refused_search_leaves_the_run_folders_profile_alone(tiny_dir, tmp_path, capsys):
    """A run the study refuses (another space in the same folder) writes nothing, not
    even a profile measured before the study was opened."""
    run = tmp_path / "run"
    assert _search(tiny_dir, run, 1) == 0
    path = run / PROFILE_FILE
    path.write_text(path.read_text().replace('"float32"', '"bfloat16"'))   # stale: remeasured
    stale = path.read_text()
    study = json.loads((run / "run.json").read_text())["study"]
    capsys.readouterr()
    refused = main(["search", "--model", str(tiny_dir / "model"), "--workload",
                    str(tiny_dir / "prompts.txt"), "--space", "layer_skip", "--trials", "2",
                    "--max-new-tokens", "6", "--prompts", "1", "--out", str(run),
                    "--study", study, "--device", "cpu", "--fidelity", "measure"])
    assert refused == 2
    assert "was made with space" in capsys.readouterr().err
    assert path.read_text() == stale
