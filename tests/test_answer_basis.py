"""Every figure's basis on record (issue 59 item 4): for each engine a `--target all` run
answers for, best.json, the engine's export header (launch.md or README.txt), the summary
table and the report say whether its answer was measured in the engine itself or
predicted by autotune's decoder, and why: not installed here, skipped by the budget (the
seconds it needed and had), failed (the reason), a GPU engine. An answer faster than its
τ allows is flagged (`implausible`) and marked suspect. Hand-built records, no model."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from test_report_validation import validated

import autotune.exports as exports
import autotune.search.engine_races as engine_races
from autotune.frozen.checks import load_frozen_config, problems
from autotune.frozen.document import frozen_config
from autotune.frozen.record import FrozenConfig, FrozenContext, upgrade, write_frozen
from autotune.report import panels as P
from autotune.runs.engine_exports import answers_table, write_engine_exports
from autotune.runs.folder import engine_config
from autotune.search.finalists import SPECULATE, VALIDATION_ATTR, current_record
from autotune.records.validation import ValidationRecord

optuna.logging.set_verbosity(optuna.logging.WARNING)

MODEL = {"id": "tiny", "spec": "org/tiny", "path": "/models/t", "sha256": "a" * 64,
         "hash_of": "weights", "dtype": "float32", "n_layers": 4}
# Each engine's one finalist: a config its export writes exactly.
PARAMS = {"hf": {"method": "ngram", "k": 4}, "llama_server": {"method": "llama_ngram", "k": 4},
          "vllm": {"method": "ngram", "k": 4}, "sglang": {"method": "sglang_ngram", "k": 4},
          "trtllm": {"method": "ngram", "k": 4}}
HF_LABEL = "HF transformers 5.24.0 generate()"
NOT_INSTALLED = "SGLang is not installed (pip install sglang)"
FAILED = "vLLM's CPU attention refuses head size 72"


def _entry(engine: str, speedup: float = 1.3, tau: float = 2.0) -> dict[str, Any]:
    return {"trial": 7, "label": f"{engine} k=4", "role": f"{engine} #1", "preset": None,
            "params": {**PARAMS[engine], "engine": engine}, "search": {}, "engine": engine,
            "speedup": speedup, "ci90": [1.2, 1.4], "latency_ms_per_token": 30.0 / speedup,
            "baseline_latency_ms_per_token": 30.0, "mean_accepted_tokens": tau,
            "acceptance_rate": 0.5, "lossless": True, "mismatched_prompts": [],
            "by_category": {}}


def _race_in_hf(record: ValidationRecord) -> ValidationRecord:
    """hf's race in itself, as `race_in_engine` files it (single-engine shape, its
    finalists autotune's own): measured in HF."""
    part = record.predicted_for("hf")
    assert part is not None
    own = [entry.model_copy(update={"engine": None}) for entry in part.finalists]
    return part.model_copy(update={"finalists": own, "measured_by": "hf",
                                   "measured_by_label": HF_LABEL})


def _record(monkeypatch: pytest.MonkeyPatch) -> ValidationRecord:
    """autotune's own answer and five engines', each with its basis recorded as
    `pipeline.run` records it: hf raced in itself; llama_server's race skipped by the
    budget; vllm's failed; sglang not installed (no race planned); trtllm a GPU engine."""
    doc = copy.deepcopy(validated().user_attrs[VALIDATION_ATTR])
    doc["engine_finalists"] = {name: [_entry(name)] for name in PARAMS}
    doc["engines"] = {name: {"decision": SPECULATE, "winner": 7, "reason": "above 1"}
                      for name in PARAMS}
    record = ValidationRecord.from_json(doc)
    # No race planned for sglang and trtllm: why, as the machine says.
    monkeypatch.setattr(engine_races, "unavailable",
                        lambda e, m, d: NOT_INSTALLED if e == "sglang" else None)
    monkeypatch.setattr(engine_races, "input_error", lambda e, m, d: None)
    record = engine_races.unraced(record, ("hf", "llama_server", "vllm"), "org/tiny",
                                  None, "cuda")
    record = engine_races.predicted_because(record, "llama_server", "budget",
                                            "its start-up does not fit its share", 95.04, 40.2)
    record = engine_races.predicted_because(record, "vllm", "failed", FAILED)
    return engine_races.race_filed(record, "hf", _race_in_hf(record))


def _best(record: ValidationRecord, tmp_path: Path) -> Path:
    """best.json as `runs.folder.best_config` writes it for this record."""
    context = FrozenContext.model_validate({"model": MODEL})
    own = frozen_config({"method": "ngram", "k": 5}, context=context)
    best = own.model_copy(update={
        "validation": record.frozen_view(4),
        "engines": {name: engine_config(record, name, context) for name in PARAMS}})
    path = tmp_path / "best.json"
    write_frozen(path, best)
    return path


@pytest.fixture
def written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The record, best.json as read back (JSON), each engine's export header text, and
    the summary's table."""
    record = _record(monkeypatch)
    path = _best(record, tmp_path)
    write_engine_exports(path, tmp_path / "exports")
    headers = {}
    for name in PARAMS:
        folder = tmp_path / "exports" / name
        launch = folder / "launch.md"
        headers[name] = (launch if launch.is_file() else folder / "README.txt").read_text()
    return {"record": record, "best": json.loads(path.read_text()), "headers": headers,
            "table": answers_table(load_frozen_config(path)), "path": path}


def _basis(written: dict[str, Any], engine: str) -> dict[str, Any]:
    return written["best"]["engines"][engine]["validation"]["basis"]


def _row(written: dict[str, Any], engine: str) -> str:
    return next(line for line in written["table"].splitlines() if line.startswith(engine + " "))


def test_best_json_is_the_current_version_and_its_schema_holds(written: dict[str, Any]):
    assert written["best"]["schema"] == "autotune.frozen/v6"
    assert problems(written["best"]) == []
    # autotune's own answer: measured in its own decoder.
    assert written["best"]["validation"]["basis"] == {"kind": "measured",
                                                      "measured_in": "autotune"}
    own = _row(written, "autotune")
    assert "autotune's decoder" in own and "predicted" not in own


def test_measured_in_the_engine_itself(written: dict[str, Any]):
    assert _basis(written, "hf") == {"kind": "measured", "measured_in": "hf",
                                     "label": HF_LABEL}
    assert f"Figure: measured in {HF_LABEL} itself" in written["headers"]["hf"]
    assert "hf itself" in _row(written, "hf")


def test_predicted_because_not_installed(written: dict[str, Any]):
    assert _basis(written, "sglang") == {"kind": "predicted", "measured_in": "autotune",
                                         "why": "not_installed", "detail": NOT_INSTALLED}
    assert (f"Figure: predicted by autotune's decoder: not installed here ({NOT_INSTALLED})"
            in written["headers"]["sglang"])
    assert "autotune's decoder, predicted: not installed here" in _row(written, "sglang")


def test_predicted_because_the_budget_skipped_its_race(written: dict[str, Any]):
    basis = _basis(written, "llama_server")
    assert (basis["why"], basis["needed_s"], basis["had_s"]) == ("budget", 95.0, 40.2)
    assert ("Figure: predicted by autotune's decoder: its race in itself was skipped by the "
            "time budget (needed 95 s; had 40 s;" in written["headers"]["llama_server"])
    assert "skipped by the budget (needed 95 s, had 40 s)" in _row(written, "llama_server")


def test_predicted_because_its_race_failed(written: dict[str, Any]):
    assert _basis(written, "vllm") == {"kind": "predicted", "measured_in": "autotune",
                                       "why": "failed", "detail": FAILED}
    assert (f"Figure: predicted by autotune's decoder: its race in itself failed ({FAILED})"
            in written["headers"]["vllm"])
    assert "autotune's decoder, predicted: its race in itself failed" in _row(written, "vllm")


def test_predicted_because_a_gpu_engine_cannot_run_here(written: dict[str, Any]):
    basis = _basis(written, "trtllm")
    assert (basis["kind"], basis["why"]) == ("predicted", "gpu_engine")
    assert basis["detail"].startswith("TensorRT-LLM serves on a GPU")
    assert ("Figure: predicted by autotune's decoder: a GPU engine that cannot run here"
            in written["headers"]["trtllm"])
    assert "autotune's decoder, predicted: a GPU engine" in _row(written, "trtllm")


def test_a_single_format_launch_section_says_when_its_figures_are_predicted(
        written: dict[str, Any]):
    best = load_frozen_config(written["path"])
    for engine, predicted in (("vllm", True), ("hf", False)):
        answer = best.engine_answer(engine)
        assert answer is not None
        text = exports.launch(answer, engine, exports.export(answer, engine).files)
        assert ("not measured in" in text) == predicted, engine
    vllm = best.engine_answer("vllm")
    text = exports.launch(vllm, "vllm", exports.export(vllm, "vllm").files)
    assert (f"not measured in vLLM itself: the figures were predicted by autotune's "
            f"decoder: its race in itself failed ({FAILED})") in text


def test_a_gpu_engine_with_no_build_for_this_cpu_is_told_apart_from_not_installed():
    # Real checks, nothing patched: SGLang's backend never runs on a CPU.
    assert engine_races.why_unraced("sglang", "org/tiny", None, "cpu")[0] == "gpu_engine"
    assert engine_races.why_unraced("trtllm", "org/tiny", None, "cuda")[0] == "gpu_engine"


def test_a_finished_race_replaces_an_earlier_runs_reason(monkeypatch: pytest.MonkeyPatch):
    record = _record(monkeypatch)
    again = engine_races.race_filed(record, "vllm", _race_in_hf(record).model_copy(
        update={"measured_by": "vllm", "measured_by_label": "vLLM 0.32.0 (CPU)"}))
    assert "vllm" not in again.engine_bases
    assert again.basis("vllm").kind == "measured"
    assert again.basis("vllm").label == "vLLM 0.32.0 (CPU)"
    # The record keeps the reasons through its JSON (a resumed run reads them back).
    assert ValidationRecord.from_json(record.to_json()).engine_bases == record.engine_bases


def test_the_report_shows_each_engines_basis(monkeypatch: pytest.MonkeyPatch):
    study = validated()
    study.set_user_attr(VALIDATION_ATTR, _record(monkeypatch).to_json())
    answers = {a.engine: a for a in P.engines.data(study) or []}
    assert answers["sglang"].basis is not None and answers["sglang"].basis.why == "not_installed"
    page = P.engines.render(list(answers.values()))
    assert HF_LABEL in page
    for words in ("predicted: not installed here", "predicted: skipped by the budget "
                  "(needed 95 s, had 40 s)", "predicted: its race in itself failed",
                  "predicted: a GPU engine that cannot run here"):
        assert words in page, words
    # The hover says why in full (the failure's own line).
    assert FAILED.replace("'", "&#x27;") in page or FAILED in page


def _v5_validation(**facts: Any) -> dict[str, Any]:
    return {"decision": SPECULATE, "speedup": 1.2, "prompts": 4, "repeats": 1,
            "finalists": [{"trial": 1, "speedup": 1.2}], **facts}


def test_an_older_best_json_reads_with_its_basis_filled_in():
    v5 = {"schema": "autotune.frozen/v5", "params": {"method": "ngram", "k": 4},
          "validation": _v5_validation(measured_by="autotune"),
          "engines": {
              "hf": {"schema": "autotune.frozen/v5", "params": {"method": "ngram", "k": 4,
                                                                "engine": "hf"},
                     "validation": _v5_validation(measured_by="hf",
                                                  measured_by_label=HF_LABEL)},
              "vllm": {"schema": "autotune.frozen/v5", "params": {"method": "ngram", "k": 4,
                                                                  "engine": "vllm"},
                       "validation": _v5_validation(measured_by="autotune")}}}
    assert problems(v5) == []
    record = FrozenConfig.from_json(v5)
    assert record.written_as == "autotune.frozen/v5"
    assert record.validation.figure_basis().text() == "measured in autotune's decoder"
    assert record.engine_answer("hf").validation.basis.text() == f"measured in {HF_LABEL} itself"
    vllm = record.engine_answer("vllm").validation.basis
    assert (vllm.kind, vllm.why) == ("predicted", "not_raced")
    upgraded = upgrade(v5)
    assert upgraded["engines"]["vllm"]["schema"] == "autotune.frozen/v6"
    assert problems(upgraded) == []


def _implausible(monkeypatch: pytest.MonkeyPatch) -> ValidationRecord:
    """hf's race in itself measured 3.0x at τ 2.0: more than a speculative decode gains."""
    record = _record(monkeypatch)
    race = record.engine_races["hf"]
    fast = race.finalists[0].model_copy(update={"figures": race.finalists[0].figures.model_copy(
        update={"speedup": 3.0, "mean_accepted_tokens": 2.0})})
    return engine_races.race_filed(record, "hf", race.model_copy(update={"finalists": [fast]}))


def test_an_answer_faster_than_its_tau_allows_is_suspect(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    record = _implausible(monkeypatch)
    best = json.loads(_best(record, tmp_path).read_text())
    hf = best["engines"]["hf"]["validation"]
    assert (hf["implausible"], hf["suspect"]) == ([7], True)
    assert "implausible" not in best["engines"]["vllm"]["validation"]
    assert problems(best) == []
    table = answers_table(FrozenConfig.from_json(best))
    assert "speculate, suspect" in next(line for line in table.splitlines()
                                        if line.startswith("hf "))
    study = validated()
    study.set_user_attr(VALIDATION_ATTR, record.to_json())
    answers = {a.engine: a for a in P.engines.data(study) or []}
    assert answers["hf"].suspect and not answers["vllm"].suspect
    assert "speculate, suspect" in P.engines.render(list(answers.values()))
    facts = current_record(study).for_engine("hf").measured_in()   # type: ignore[union-attr]
    assert "(the answer's figure)" in facts["suspect"]


# ---- the wiring: `pipeline.races_in_engines` records why a race did not stand ----

def _raced_study(engines: tuple[str, ...]) -> optuna.Study:
    """A validated study whose record answers for `engines`, none raced in itself yet."""
    study = validated()
    doc = copy.deepcopy(study.user_attrs[VALIDATION_ATTR])
    doc["engine_finalists"] = {name: [_entry(name)] for name in engines}
    doc["engines"] = {name: {"decision": SPECULATE, "winner": 7, "reason": "above 1"}
                      for name in engines}
    study.set_user_attr(VALIDATION_ATTR, doc)
    return study


def _race(study: optuna.Study, engines: tuple[str, ...], budget: Any = None) -> ValidationRecord:
    from types import SimpleNamespace

    import autotune.pipeline.races_in_engines as run
    plan = SimpleNamespace(engine_races=engines, held_out=[], pool=[], validation_repeats=1,
                           min_gain=0.0, split=SimpleNamespace(source="test"),
                           model="org/tiny", draft=None, max_new_tokens=8,
                           validation_budget_s=None)
    runner = SimpleNamespace(study=study, context=SimpleNamespace(target=None, draft=None))
    run.run_engine_races(plan, runner, budget)   # type: ignore[arg-type]
    record = current_record(study)
    assert record is not None
    return record


def test_a_race_that_fails_to_start_or_midway_is_recorded_failed(
        monkeypatch: pytest.MonkeyPatch):
    import autotune.pipeline.races_in_engines as run
    from autotune.backends import BackendUnavailable
    from autotune.common.errors import AutotuneError

    class Started:
        label = "llama-server"

        def close(self) -> None:
            pass

    def open_backend(engine: str, *args: Any) -> Started:
        if engine == "vllm":
            raise BackendUnavailable("vLLM's engine exited during start-up")
        return Started()

    def race_in_engine(*args: Any) -> ValidationRecord:
        raise AutotuneError(FAILED)

    monkeypatch.setattr(run, "open_backend", open_backend)
    monkeypatch.setattr(run, "race_in_engine", race_in_engine)
    record = _race(_raced_study(("llama_server", "vllm")), ("llama_server", "vllm"))
    assert record.basis("vllm").why == "failed"
    assert record.basis("vllm").detail == ("did not start: vLLM's engine exited during "
                                           "start-up")
    assert (record.basis("llama_server").why, record.basis("llama_server").detail) == (
        "failed", FAILED)


def test_a_race_the_budget_cannot_start_is_recorded_with_what_it_needed_and_had(
        monkeypatch: pytest.MonkeyPatch):
    from types import SimpleNamespace

    import autotune.pipeline.races_in_engines as run
    from autotune.backends import engine_cost

    monkeypatch.setattr(run.fitting, "engine_races_stop", lambda budget: 100.0)
    monkeypatch.setattr(run.fitting, "engine_race_seconds", lambda *args: 0.0)
    dropped = ("llama_server's race in itself needs about 420 s (...), 35 s are left after "
               "autotune's own stages at their floors")
    stopped: list[str] = []
    budget = SimpleNamespace(stopped=stopped, stopped_at=stopped.append, ar_s=0.01,
                             pace=lambda: 2.0, clock=lambda: 70.0, done=lambda stage: None,
                             dropped={"llama_server": dropped},
                             # Its engines started and its first look, at the pace kept
                             # (`Budget.first_look_seconds`, test_time_budget).
                             first_look_seconds=lambda cost, arms: arms * cost.start_seconds(
                                 0.01 * 2.0) + 12.5)
    record = _race(_raced_study(("vllm", "llama_server")), ("vllm", "llama_server"), budget)
    basis = record.basis("vllm")
    # Two engines (the finalist and its baseline), each started at the pace kept, and
    # the first look.
    needed = 2 * engine_cost("vllm", "org/tiny").start_seconds(0.01 * 2.0) + 12.5
    assert (basis.why, basis.needed_s, basis.had_s) == ("budget", round(needed, 1), 30.0)
    assert budget.stopped and "vllm" in budget.stopped[0]
    # Dropped at planning: the budget's own line says what it needed and had.
    assert (record.basis("llama_server").why, record.basis("llama_server").detail) == (
        "budget", dropped)


def test_an_engine_whose_finalists_the_race_cut_answers_undecided_with_its_basis(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Issue 59: a short race that cut every finalist of an engine (sglang's here, the
    vLLM run's sglang and trtllm) still gives that engine a row: undecided, not raced
    for time, with its basis; without the cut it would vanish from the answer."""
    from autotune.pipeline.fitting import with_cut_engines
    from autotune.search.finalists import UNDECIDED, Finalist

    record = _record(monkeypatch)
    record = record.model_copy(update={
        "engines": {k: v for k, v in record.engines.items() if k != "sglang"},
        "engine_finalists": {k: v for k, v in record.engine_finalists.items()
                             if k != "sglang"},
        "engine_bases": {k: v for k, v in record.engine_bases.items() if k != "sglang"}})
    cut = Finalist(trial=9, label="sglang k=4", role="sglang #1", preset=None,
                   params=PARAMS["sglang"], search={}, engine="sglang")
    raced = [Finalist(trial=7, label="hf k=4", role="hf #1", preset=None,
                      params=PARAMS["hf"], search={}, engine="hf")]
    noted = with_cut_engines(record, [cut], raced)
    assert with_cut_engines(record, [], raced) is record
    assert noted.engines["sglang"].decision == UNDECIDED
    assert "not raced: the time left held 1 finalists" in noted.engines["sglang"].reason
    assert noted.engine_finalists["sglang"] == []
    noted = engine_races.unraced(noted, ("hf",), "org/tiny", None, "cuda")
    assert noted.basis("sglang").why == "not_installed"
    path = _best(noted, tmp_path)
    best = json.loads(path.read_text())
    assert best["engines"]["sglang"]["validation"]["decision"] == UNDECIDED
    assert "sglang" in answers_table(load_frozen_config(path))
    # An engine whose screen finished no config in its share of the budget: its row
    # says so (a run whose HF profile ate the screens' share answered no engine).
    noted = with_cut_engines(record, [], raced, ("hf", "sglang"))
    assert noted.engines["sglang"].decision == UNDECIDED
    assert "its screen finished no config" in noted.engines["sglang"].reason
    assert noted.engines["hf"] == record.engines["hf"]
