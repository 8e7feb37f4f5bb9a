"""The command line: every bad input is one `autotune: error:` line and exit code 2.

The input errors are caught before any model is loaded: `load_model` is replaced by a
spy that fails the test if it is reached, so none of these loads the default model.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from tiny import gpt2_model, llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)

import autotune.models.loading as loading
from autotune.cli.main import main
from autotune.cli.measure import format_summary


@pytest.fixture
def no_loading(monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"load_model reached with {args}")

    monkeypatch.setattr(loading, "load_model", spy)
    monkeypatch.setattr("autotune.cli.main.load_model", spy, raising=False)   # if imported at top
    return calls


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("autotune: error: "), lines[0]
    return lines[0]


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("t1 t2 t3 t4 t1 t2\nt5 t6 t7 t5 t6\n")
    return str(path)


CASES = {
    "unknown_set_key": (["--set", "atn_skip=1"], "did you mean 'attn_skip'"),
    "set_without_equals": (["--set", "k"], "key=value"),
    "bad_set_value": (["--set", "k=many"], "bad value for k"),
    "invalid_config": (["--set", "method=medusae"], "method='medusae'"),
    "head_without_drafter": (["--set", "method=medusa"],
                             "needs a trained medusa drafter: pass --draft DIR"),
    "missing_config": (["--config", "/nonexistent/autotune.yaml"], "config file not found"),
    "missing_workload": (["--workload", "/nonexistent/prompts.jsonl"], "workload file not found"),
    "unknown_category": (["--categories", "poetry"], "unknown category 'poetry'"),
    "prompts_0": (["--prompts", "0"], "at least 1"),
    "prompts_not_int": (["--prompts", "two"], "--prompts"),
    "max_new_tokens_0": (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    "unknown_argument": (["--bogus"], "unrecognized arguments: --bogus"),
    "bad_device": (["--device", "tpu"], "invalid choice: 'tpu'"),
    "bad_dtype": (["--dtype", "int8"], "invalid choice: 'int8'"),
    "draft_model_without_draft": (["--set", "method=draft_model"], "needs a draft model"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_input_errors_fail_fast_without_loading(name, capsys, no_loading):
    args, expected = CASES[name]
    assert main(["measure", *args]) == 2
    line = _one_error_line(capsys)
    assert expected in line
    assert no_loading == []


def test_search_help_lists_every_sampler():
    # cli.py restates the names so that `--help` does not load optuna.
    from autotune.cli import main as cli
    from autotune.search import samplers
    assert cli._SAMPLERS == samplers.SAMPLERS


def test_cli_lists_the_same_targets_and_backends_as_the_registries():
    # cli.py restates them so that `--help` loads nothing.
    from autotune import backends, exports
    from autotune.cli import main as cli
    from autotune.search import targets
    assert cli._TARGETS == targets.TARGETS
    assert targets.TARGETS[0] == targets.ALL_TARGETS == "all"
    assert cli._BACKENDS == ("autotune", *backends.ENGINE_BACKENDS)
    assert cli._FORMATS == exports.FORMATS


RETIRED_LINE = ("autotune: error: argument {flag}: llama_cpp (llama-cpp-python) was "
                "retired: use llama_server (llama.cpp's llama-server; install it with "
                "python -m autotune.backends.llama_server_install)")


@pytest.mark.parametrize("argv,flag", [
    (["search", "--target", "llama_cpp"], "--target"),
    (["measure", "--in", "llama_cpp", "--set", "method=ngram"], "--in"),
    # Refused before the file is read: the format is wrong whatever the file holds.
    (["export", "/nonexistent/best.json", "--format", "llama_cpp"], "--format"),
])
def test_the_retired_llama_cpp_engine_is_one_line_naming_its_replacement(
        argv, flag, capsys, no_loading):
    assert main(argv) == 2
    assert _one_error_line(capsys) == RETIRED_LINE.format(flag=flag)
    assert no_loading == []


def test_measure_in_an_engine_that_cannot_run_here_fails_before_loading(capsys, no_loading):
    assert main(["measure", "--in", "sglang", "--set", "method=ngram"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("autotune: error: --in sglang: it cannot measure here")
    assert no_loading == []
    assert main(["measure", "--in", "hf", "--replay", "--set", "method=ngram"]) == 2
    assert "--replay and --trace read autotune's decoder only" in _one_error_line(capsys)


def test_no_subcommand(capsys):
    assert main([]) == 2
    assert "command" in _one_error_line(capsys)


def test_unknown_subcommand(capsys):
    assert main(["tune-everything"]) == 2
    assert "invalid choice" in _one_error_line(capsys)


@pytest.mark.parametrize("spec,expected", [
    ("/nonexistent/dir", "model path not found: /nonexistent/dir"),
    ("./no/such/model", "model path not found"),
    ("/nonexistent/model.gguf", "GGUF file not found"),
])
def test_missing_model_path(spec, expected, capsys):
    assert main(["measure", "--model", spec, "--device", "cpu"]) == 2
    assert expected in _one_error_line(capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda(capsys):
    assert main(["measure", "--device", "cuda"]) == 2
    assert "no CUDA device" in _one_error_line(capsys)


def test_folder_without_config(tmp_path, capsys):
    assert main(["measure", "--model", str(tmp_path), "--device", "cpu"]) == 2
    assert "without config.json" in _one_error_line(capsys)


def test_hub_id_not_in_local_cache(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)             # no folder of that name next to us
    assert main(["measure", "--model", "someone/not-cached-model", "--device", "cpu"]) == 2
    line = _one_error_line(capsys)
    assert "someone/not-cached-model" in line and "local HF cache" in line


def test_draft_path_missing(tmp_path, workload, capsys):
    model = save_tiny(llama_model(seed=1), tmp_path / "target")
    assert main(["measure", "--model", str(model), "--draft", "/nonexistent/draft",
                 "--device", "cpu", "--workload", workload, "--set", "method=draft_model"]) == 2
    assert "model path not found: /nonexistent/draft" in _one_error_line(capsys)


def test_layer_method_on_non_llama_model(tmp_path, workload, capsys):
    model = save_tiny(gpt2_model(seed=1), tmp_path / "gpt2")
    assert main(["measure", "--model", str(model), "--device", "cpu", "--workload", workload,
                 "--set", "method=layer_skip", "--set", "attn_skip=1"]) == 2
    assert "needs layer access" in _one_error_line(capsys)


def test_skip_layer_outside_model(tmp_path, workload, capsys):
    model = save_tiny(llama_model(seed=1), tmp_path / "llama")
    assert main(["measure", "--model", str(model), "--device", "cpu", "--workload", workload,
                 "--set", "method=layer_skip", "--set", "attn_skip=4"]) == 2
    assert "outside 0..3" in _one_error_line(capsys)


def test_measure_runs_on_a_tiny_model(tmp_path, workload, capsys):
    """The happy path end to end: JSON summary on stdout, progress on stderr, a trace."""
    model = save_tiny(llama_model(seed=1), tmp_path / "llama")
    trace = tmp_path / "out" / "trace.json"
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload", workload,
                 "--max-new-tokens", "6", "--json", "--trace", str(trace),
                 "--set", "method=layer_skip", "--set", "attn_skip=1,2", "--set", "k=3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["prompts"] == 2 and summary["lossless"] is True
    assert summary["config"]["attn_skip"] == [1, 2]
    assert summary["tokens_generated"] == 12
    assert len(captured.err.splitlines()) == 2           # one progress line per prompt
    traces = json.loads(trace.read_text())
    assert [len(t["tokens"]) for t in traces] == [6, 6]


def test_measure_with_sampling(tmp_path, workload, capsys):
    """temperature > 0: the AR baseline and speculative rounds without drafts sample too."""
    model = save_tiny(llama_model(seed=1), tmp_path / "llama")
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload", workload,
                 "--max-new-tokens", "6", "--json", "--set", "method=ngram",
                 "--set", "temperature=0.8"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["lossless"] is None and summary["tokens_generated"] == 12


@pytest.fixture
def categorised(tmp_path):
    """Three prompts in two categories (JSONL), for the per-category figures."""
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in [
        {"id": "a", "category": "code", "prompt": "t1 t2 t3 t4 t1 t2"},
        {"id": "b", "category": "code", "prompt": "t5 t6 t7 t5 t6"},
        {"id": "c", "category": "chat", "prompt": "t9 t8 t9 t8"}]) + "\n")
    return str(path)


@pytest.fixture
def categorised_five(tmp_path):
    """Five prompts, four of one category: an interval needs four prompts
    (`paired.MIN_INTERVAL_PROMPTS`, issue 59), overall and in the category."""
    path = tmp_path / "five.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in [
        {"id": "a", "category": "code", "prompt": "t1 t2 t3 t4 t1 t2"},
        {"id": "b", "category": "code", "prompt": "t5 t6 t7 t5 t6"},
        {"id": "d", "category": "code", "prompt": "t3 t4 t3 t4 t3"},
        {"id": "e", "category": "code", "prompt": "t6 t7 t1 t6 t7"},
        {"id": "c", "category": "chat", "prompt": "t9 t8 t9 t8"}]) + "\n")
    return str(path)


def test_measure_json_has_the_interval_and_the_categories(tmp_path, categorised_five,
                                                          capsys):
    model = save_tiny(llama_model(seed=1), tmp_path / "llama")
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload",
                 categorised_five, "--max-new-tokens", "6", "--json", "--set", "method=ngram"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    low, high = summary["speedup_ci90"]
    assert low <= summary["speedup"] <= high
    assert summary["prompts"] == 5 and summary["runs"] == 5
    assert list(summary["by_category"]) == ["code", "chat"]
    code_row, chat_row = summary["by_category"]["code"], summary["by_category"]["chat"]
    assert set(code_row) == {"speedup", "ci90", "mean_accepted_tokens", "prompts"}
    assert code_row["prompts"] == 4 and len(code_row["ci90"]) == 2
    assert chat_row["prompts"] == 1 and chat_row["ci90"] is None   # one prompt: no spread
    assert chat_row["speedup"] > 0 and chat_row["mean_accepted_tokens"] >= 1


def test_measure_text_shows_the_interval_and_a_table_per_category(tmp_path, categorised_five,
                                                                   capsys):
    model = save_tiny(llama_model(seed=1), tmp_path / "llama")
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload",
                 categorised_five, "--max-new-tokens", "6", "--set", "method=ngram"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    speedup = next(line for line in lines if line.startswith("speedup [90% CI]"))
    assert re.fullmatch(r"speedup \[90% CI\] +\d+\.\d{3}x \[\d+\.\d{3}, \d+\.\d{3}\]", speedup)
    head = lines.index(next(line for line in lines if line.startswith("category")))
    assert lines[head].split() == ["category", "speedup", "[90%", "CI]", "tau", "prompts"]
    rows = [line.split() for line in lines[head + 1:]]
    assert [(r[0], r[-1]) for r in rows] == [("code", "4"), ("chat", "1")]
    assert re.fullmatch(r"\d+\.\d{3}x \[\d+\.\d{3}, \d+\.\d{3}\] \d+\.\d{3}",
                        " ".join(rows[0][1:-1]))
    assert re.fullmatch(r"\d+\.\d{3}x \d+\.\d{3}", " ".join(rows[1][1:-1]))   # no interval


def test_format_summary_prints_given_figures():
    """The text is the summary's own figures, formatted (a hand-made summary)."""
    summary = {"config": {"method": "ngram", "k": 3}, "speedup": 1.23456,
               "speedup_ci90": [1.1, 1.3], "lossless": False, "mismatched_prompts": ["b"],
               "by_category": {"code": {"speedup": 1.5, "ci90": [1.25, 1.75],
                                        "mean_accepted_tokens": 2.0, "prompts": 2},
                               "chat": {"speedup": 0.9, "ci90": None,
                                        "mean_accepted_tokens": 1.25, "prompts": 1}}}
    text = format_summary(summary)
    rows = text.splitlines()
    values = dict(re.split(r"\s{2,}", row, maxsplit=1) for row in rows[:rows.index("")])
    assert values["speedup [90% CI]"] == "1.235x [1.100, 1.300]"
    assert values["lossless"] == "false" and values["mismatched_prompts"] == "b"
    assert values["config"] == "method=ngram, k=3" and values["tokens_generated"] == "-"
    assert rows[-3:] == ["category  speedup [90% CI]       tau    prompts",
                         "code      1.500x [1.250, 1.750]  2.000  2",
                         "chat      0.900x                 1.250  1"]
    assert "category" not in format_summary({**summary, "by_category": {}})


def test_max_new_tokens_beyond_model_positions(tmp_path, workload, capsys):
    """The tiny model has 256 positions: asking for 300 new tokens is a user error."""
    model = save_tiny(llama_model(seed=1), tmp_path / "llama")
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload", workload,
                 "--max-new-tokens", "300"])
    assert code == 2
    assert "256" in _one_error_line(capsys)


# ------------------------------------------------------------------ --batch-size
def test_measure_batch_size_reports_throughput_against_batched_ar(tmp_path, categorised, capsys):
    model = save_tiny(llama_model(seed=1), tmp_path / "llama")
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload", categorised,
                 "--max-new-tokens", "6", "--json", "--batch-size", "2",
                 "--set", "method=ngram", "--set", "k=3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    # Three prompts in batches of two: one batch, the third prompt left out.
    assert (summary["batch_size"], summary["batches"], summary["prompts"],
            summary["unused_prompts"]) == (2, 1, 2, 1)
    assert summary["lossless"] is True and summary["mismatched_prompts"] == []
    assert summary["tokens_per_s"] > 0 and summary["ar_tokens_per_s"] > 0
    assert len(summary["tau_per_row"]) == 2 and all(t >= 1 for t in summary["tau_per_row"])
    assert summary["speedup_ci90"] is None          # one batch: no spread over batches
    assert [line for line in captured.err.splitlines() if line.startswith("[batch")] == [
        "[batch 1] a+b: 10 tokens"]                 # one progress line per batch


@pytest.mark.parametrize("extra, message", [
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--batch-size", "5"], "--batch-size 5 needs at least 5 prompts"),
    (["--batch-size", "2", "--replay"], "does not combine with --replay"),
    (["--batch-size", "2", "--set", "tree_width=2", "--set", "tree_depth=2",
      "--set", "method=layer_skip", "--set", "attn_skip=1"], "drafts chains only"),
])
def test_measure_batch_size_refusals_are_one_line_before_loading(extra, message, categorised,
                                                                   capsys, no_loading):
    assert main(["measure", "--workload", categorised, "--set", "method=ngram", *extra]) == 2
    assert message in _one_error_line(capsys)
    assert no_loading == []
