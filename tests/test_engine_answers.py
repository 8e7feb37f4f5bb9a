"""v5's per-engine answers (`engines`, from `search --target all`): the reader's checks,
and `export --format X` / `measure --in X` acting on engine X's own answer. No model
loads: measure is stopped at its last check before loading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import autotune.cli.measure as measure_cli
from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.frozen.checks import problems
from autotune.frozen.document import frozen_document
from autotune.frozen.engines import engine_answer

pytest.importorskip("jsonschema")

DRAFT = {"id": "tiny-draft", "spec": "org/tiny-draft", "path": "/models/d",
         "sha256": "c" * 64, "hash_of": "weights", "dtype": "float32", "n_layers": 2}
MODEL = {"id": "tiny", "spec": "org/tiny", "path": "/models/t", "sha256": "a" * 64,
         "hash_of": "weights", "dtype": "float32", "n_layers": 4}


def _validation(decision: str, speedup: float, ci: list[float], reason: str) -> dict[str, Any]:
    return {"decision": decision, "speedup": speedup, "ci90": ci, "prompts": 6, "repeats": 1,
            "reason": reason, "finalists": [{"trial": 3, "speedup": speedup, "ci90": ci}]}


def _answer(params: dict[str, Any], validation: dict[str, Any]) -> dict[str, Any]:
    doc = frozen_document(params, metrics={"speedup": validation["speedup"]},
                          context={"model": MODEL, "draft": DRAFT})
    doc["validation"] = validation
    return doc


def _doc() -> dict[str, Any]:
    """Autotune's own answer k=6 on top; vllm's own k=2; sglang's: do not speculate."""
    doc = _answer({"method": "draft_model", "k": 6},
                  _validation("speculate", 1.4, [1.3, 1.5], "trial 3 is faster"))
    doc["engines"] = {
        "vllm": _answer({"method": "draft_model", "k": 2, "engine": "vllm"},
                        _validation("speculate", 1.15, [1.05, 1.25], "trial 7 is faster")),
        "sglang": _answer({"method": "none", "engine": "sglang"},
                          _validation("do_not_speculate", 1.0, [0.98, 1.02],
                                      "no sglang finalist reaches 1.05")),
        "hf": _answer({"method": "none", "engine": "hf"},
                      _validation("undecided", 1.0, [0.99, 1.08],
                                  "likely trial 9, measure more prompts")),
    }
    return doc


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "best.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_v5_document_with_engines_validates() -> None:
    doc = _doc()
    assert doc["schema"] == "autotune.frozen/v6" and problems(doc) == []
    # The same document written as v5 (before `validation.basis`) still reads.
    v5 = {**doc, "schema": "autotune.frozen/v5",
          "engines": {name: {**answer, "schema": "autotune.frozen/v5"}
                      for name, answer in doc["engines"].items()}}
    assert problems(v5) == []
    assert engine_answer(doc, "vllm")["params"]["k"] == 2
    assert engine_answer(doc, "trtllm") is None


def test_a_nested_answers_bad_knob_is_named_under_its_engine() -> None:
    doc = _doc()
    doc["engines"]["vllm"]["params"]["kk"] = 3
    found = problems(doc)
    assert found and all(p.startswith("engines.vllm.") for p in found)
    assert "'kk'" in found[0]
    # A knob the schema knows but whose meaning is wrong: the knob check's line, prefixed.
    doc = _doc()
    doc["engines"]["vllm"]["params"]["method"] = "sorted_exit"
    doc["engines"]["vllm"]["draft"] = None
    assert problems(doc)[0].startswith("engines.vllm.")


def test_a_nested_answer_holding_engines_is_refused_readably() -> None:
    doc = _doc()
    doc["engines"]["vllm"]["engines"] = {"sglang": doc["engines"]["sglang"]}
    assert problems(doc) == ["engines.vllm: an engine's answer holds no `engines` of its own"]


def test_export_writes_the_engines_own_answer_and_says_so(tmp_path, capsys) -> None:
    path = _write(tmp_path, _doc())
    out = tmp_path / "vllm.json"
    assert main(["export", str(path), "--format", "vllm", "-o", str(out)]) == 0
    # vllm's own k (2), not autotune's top-level k (6).
    assert json.loads(out.read_text())["num_speculative_tokens"] == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("autotune: exporting vllm's own answer from best.json's engines")
    assert "validated 1.150x [1.050, 1.250]" in err[0]
    # A format with no answer of its own (trtllm here, dv always) exports the top level.
    assert main(["export", str(path), "--format", "trtllm"]) == 0
    captured = capsys.readouterr()
    assert "own answer" not in captured.err and "max_draft_len: 6" in captured.out


@pytest.mark.parametrize(("engine", "words"), [
    ("sglang", "the validated answer is not to speculate: no sglang finalist reaches 1.05"),
    ("hf", "the validation is undecided: likely trial 9"),
])
def test_export_refuses_an_engine_answer_that_does_not_speculate(tmp_path, capsys, engine,
                                                                 words) -> None:
    path = _write(tmp_path, _doc())
    assert main(["export", str(path), "--format", engine]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1
    assert f"{engine}'s own answer (engines.{engine}): {words}" in err[0]
    assert err[0].endswith("nothing exported")


def test_a_v4_document_validates_and_exports_as_before(tmp_path, capsys) -> None:
    doc = {**_doc(), "schema": "autotune.frozen/v4"}
    del doc["engines"]
    # As a v4 writer wrote it: without the keys v5 added since (the verify rule).
    doc["params"] = {k: v for k, v in doc["params"].items() if k != "verify"}
    assert problems(doc) == []
    # v4 has no `engines`: a v4 file holding one is refused.
    assert any(p.startswith("(top level)") for p in problems({**_doc(),
                                                              "schema": "autotune.frozen/v4"}))
    path = _write(tmp_path, doc)
    assert main(["export", str(path), "--format", "vllm"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["num_speculative_tokens"] == 6 and captured.err == ""


class _Stop(AutotuneError):
    pass


@pytest.fixture
def measured(monkeypatch) -> list[Any]:
    """The configs measure would run: it stops at its last check before loading models."""
    seen: list[Any] = []

    def stop(args, config, measure_in, batch_size, n_prompts) -> None:
        seen.append(config)
        raise _Stop("stopped before loading")

    monkeypatch.setattr(measure_cli, "_refuse_before_loading", stop)
    return seen


def test_measure_in_an_engine_measures_its_own_answer(tmp_path, capsys, measured) -> None:
    path = _write(tmp_path, _doc())
    assert main(["measure", "--config", str(path), "--in", "vllm", "--device", "cpu"]) == 2
    assert measured[-1].k == 2 and measured[-1].engine == "vllm"
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("autotune: measuring vllm's own answer from best.json's engines")
    # Our decoder (and an engine without an answer) measures the top level, silently.
    for where in ("autotune", "llama_server"):
        assert main(["measure", "--config", str(path), "--in", where]) == 2
        assert measured[-1].k == 6 and "own answer" not in capsys.readouterr().err


def test_measure_refuses_an_engine_answer_that_does_not_speculate(tmp_path, capsys,
                                                                  measured) -> None:
    path = _write(tmp_path, _doc())
    assert main(["measure", "--config", str(path), "--in", "sglang"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and not measured
    assert ("sglang's own answer (engines.sglang): the validated answer is not to "
            "speculate: no sglang finalist reaches 1.05") in err[0]
    # Knobs of one's own (--set) are measured on that answer's model and workload.
    assert main(["measure", "--config", str(path), "--in", "sglang",
                 "--set", "method=ngram", "--set", "k=3"]) == 2
    assert measured[-1].method == "ngram" and measured[-1].engine == "sglang"
