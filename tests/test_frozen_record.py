"""The typed frozen config (`autotune.frozen.record`): the writer is byte-identical to the
documents autotune builds, older versions read through the one upgrader, and a bad
document is one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_engine_answers import _doc as engines_doc
from test_frozen import _context, _study_with_trials
from test_frozen import _doc as simple_doc

from autotune.common.errors import AutotuneError
from autotune.common.interval import Interval
from autotune.frozen.document import frozen_document
from autotune.frozen.checks import load_frozen_config
from autotune.frozen.record import (
    FrozenConfig,
    dumps,
    upgrade,
    write_frozen,
)
from autotune.frozen.schema import READABLE, SCHEMA
from autotune.runs.folder import best_document
from autotune.records.validation import ValidationRecord


def _validated_doc() -> dict[str, Any]:
    """A document with a pooled, raced validation and a schedule, as the search writes it."""
    finalist = {"trial": 3, "label": "ngram k=3", "role": "search #1", "preset": None,
                "params": {"method": "ngram", "k": 3}, "search": {"speedup": 1.3},
                "speedup": 1.21, "ci90": [1.1, 1.3], "mean_accepted_tokens": 1.8,
                "lossless": True, "estimator": "ppi++", "ppi_lambda": 0.4,
                "measured_prompts": 4, "pool_prompts": 9, "measured_speedup": 1.2,
                "measured_ci90": [1.0, 1.4], "predicted_speedup": 1.25,
                "by_category": {"code": {"speedup": 1.2, "ci90": None, "prompts": 4}},
                "dropped_after": None}
    record = ValidationRecord.from_json({
        "statistic": "s", "level": 0.9, "source": "held-out", "prompts": 4,
        "prompt_ids": ["a", "b", "c", "d"], "categories": {"code": 4},
        "workload_sha256": "x", "repeats": 1, "max_new_tokens": 8, "complete_trials": 5,
        "baseline": {"latency_ms_per_token": 30.0}, "finalists": [finalist],
        "decision": "speculate", "winner": 3, "reason": "trial 3 is faster",
        "estimator": "ppi++", "pool_prompts": 9, "planned_prompts": 6, "min_gain": 0.05,
        "race": {"stopped": "decided", "measured": 4, "alpha_spent": 0.1, "budget_s": None,
                 "spending": "obf",
                 "looks": [{"prompts": 4, "level": 0.9, "active": ["trial3"], "dropped": []}]}})
    doc = frozen_document({"method": "ngram", "k": 3}, metrics={"speedup": 1.3},
                          context=_context(), trial={"trial": 3, "label": "ngram k=3"})
    doc["validation"] = record.frozen_view(3).to_json()
    doc["schedule"] = {"method": "ngram", "batch_sizes": [1, 4], "objective": "speedup",
                       "ranges": [{"start": 1, "end": 3, "k": 3}, {"start": 4, "end": 4, "k": 0}],
                       "points": [{"batch_size": 1, "k": 3, "split": "search", "speedup": 1,
                                   "ci90": None, "chosen": True}],
                       "notes": ["batch size 4: off"]}
    return doc


def _documents() -> list[dict[str, Any]]:
    study, objective = _study_with_trials()
    return [simple_doc(), best_document(study, objective, _context()), engines_doc(),
            _validated_doc(), {"schema": SCHEMA, "params": {"method": "ngram", "k": 2}}]


@pytest.mark.parametrize("index", range(5))
def test_the_writer_writes_what_autotune_built_byte_for_byte(index: int) -> None:
    doc = _documents()[index]
    if index == 4:                   # a hand-written two-key config: params are canonical
        doc = {**doc, "params": FrozenConfig.from_json(doc).config.to_dict()}
    text = json.dumps(doc, indent=2) + "\n"
    assert dumps(FrozenConfig.from_json(json.loads(text))) == text


def test_parts_read_as_attributes() -> None:
    record = FrozenConfig.from_json(_validated_doc())
    assert record.config.k == 3 and record.model is not None and record.model.n_layers == 4
    assert record.label == "ngram k=3" and record.trial == 3
    validation = record.validation
    assert validation is not None and validation.speculates and validation.winner == 3
    assert validation.interval == Interval(1.1, 1.3)
    assert validation.race is not None and validation.race.looks[0].active == ["trial3"]
    assert validation.finalists[0].by_category["code"].prompts == 4
    assert validation.extra("ppi_lambda") == 0.4               # a pooled figure, kept
    assert record.schedule is not None and record.schedule.ranges[1].k == 0
    answers = FrozenConfig.from_json(engines_doc())
    assert answers.engine_answer("vllm").config.k == 2
    assert answers.engine_answer("trtllm") is None
    hf = answers.engine_answer("hf").validation
    assert not hf.speculates and hf.shown().speedup == 1.0


@pytest.mark.parametrize("version", [v for v in READABLE if v != SCHEMA])
def test_an_older_version_reads_as_the_current_one(version: str) -> None:
    old = {"schema": version, "params": {"method": "ngram", "k": 3},
           "metrics": {"speedup": 1.2}, "model": {"id": "tiny", "n_layers": 4}}
    record = FrozenConfig.from_json(old)
    assert record.version == SCHEMA and record.written_as == version
    # Files before v3 were all measured under autotune's own drafting rules.
    assert record.config.engine == "autotune" and record.config.k == 3
    assert upgrade(old)["schema"] == SCHEMA and old["schema"] == version   # not changed


def test_a_v2_validation_reads_without_the_keys_later_versions_added() -> None:
    validation = {"decision": "do_not_speculate", "speedup": 1.0, "prompts": 4, "repeats": 1,
                  "reason": "no finalist is faster",
                  "finalists": [{"trial": 1, "speedup": 0.97, "ci90": [0.9, 1.02]}]}
    record = FrozenConfig.from_json({"schema": "autotune.frozen/v2",
                                     "params": {"method": "none"}, "validation": validation})
    assert record.validation is not None and record.validation.min_gain is None
    shown = record.validation.shown()
    assert shown is not None and shown.speedup == 0.97


@pytest.mark.parametrize("doc, message", [
    ([1], "a frozen config must be a mapping"),
    ({"schema": "autotune.frozen/v9", "params": {}}, "is not supported by this autotune"),
    ({"params": {"kk": 1}}, "params: unknown config key 'kk'"),
    ({"params": {}, "model": {"n_layers": "four"}}, "model.n_layers: Input should be"),
    ({"params": {}, "validation": {"finalists": [{"trial": "x"}]}}, "validation.finalists.0.trial"),
])
def test_a_bad_document_is_one_line(doc: Any, message: str) -> None:
    with pytest.raises(AutotuneError, match=None) as caught:
        FrozenConfig.from_json(doc)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_load_checks_the_file_and_write_frozen_writes_it_back(tmp_path: Path) -> None:
    path = tmp_path / "best.json"
    text = json.dumps(_validated_doc(), indent=2) + "\n"
    path.write_text(text)
    record = load_frozen_config(path)
    write_frozen(tmp_path / "again.json", record)
    assert (tmp_path / "again.json").read_text() == text
    path.write_text(json.dumps({"schema": SCHEMA, "params": {"k": 0}}))
    with pytest.raises(AutotuneError, match="best.json: params.k"):
        load_frozen_config(path)
