"""The validation record's one upgrader: a record written before versions (the golden
runs' studies, written by the previous release) reads as the current version and writes
back the same keys with the version in front; a newer or malformed record is one
AutotuneError line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from autotune.common.errors import AutotuneError
from autotune.records.validation import VERSION, ValidationRecord, upgrade

GOLDEN = Path(__file__).parent / "golden"


def _stored_record(case: str) -> dict[str, Any]:
    """The last validation record the golden run's study journal stored."""
    record = None
    with gzip.open(GOLDEN / case / "run" / "study.journal.gz", "rt") as journal:
        for line in journal:
            attrs = json.loads(line).get("user_attr") or {}
            if "validation" in attrs:
                record = attrs["validation"]
    assert record is not None
    return record


@pytest.mark.parametrize("case", ["all-engines", "no-gain"])
def test_a_record_of_the_previous_release_reads_as_the_current_version(case: str) -> None:
    stored = _stored_record(case)
    assert "version" not in stored               # written before versions
    record = ValidationRecord.from_json(stored)
    assert record.pooled and record.race is not None and record.engine_races
    written = record.to_json()
    # The same JSON, key for key and number for number, with the version in front.
    assert json.dumps(written) == json.dumps({"version": VERSION, **stored})
    assert all("version" not in race for race in written["engine_races"].values())
    # And the current version reads back as itself.
    assert ValidationRecord.from_json(written).to_json() == written


def test_version_one_reads_as_its_reader_did() -> None:
    """Nulls as empty, entries that are no mapping dropped, a race that is no mapping as
    null, a non-numeric --min-gain as null, a baseline without its figure: what version
    1's reader made of them, and what it wrote back."""
    old = {"statistic": "s", "level": 0.9, "prompts": 2, "prompt_ids": None, "repeats": 1,
           "min_gain": "0.05", "race": "lost", "baseline": {},
           "finalists": [{"trial": 3, "label": "ngram", "search": None,
                          "mismatched_prompts": None, "speedup": 1.2, "ci90": [1, 2]},
                         "not an entry"],
           "decision": "speculate", "winner": 3, "reason": "r",
           "engines": {"vllm": {"decision": "undecided"}, "sglang": None}}
    upgraded = upgrade(old)
    assert upgraded["version"] == VERSION and upgraded["prompt_ids"] == []
    assert upgraded["min_gain"] is None and upgraded["race"] is None
    record = ValidationRecord.from_json(old)
    assert record.baseline_ms is None and record.engine_names() == ["vllm"]
    assert record.engines["vllm"].reason == "" and record.winning_entry() is not None
    entry = record.finalists[0]
    assert entry.search == {} and entry.figures.mismatched_prompts == []
    assert entry.figures.interval is not None and entry.figures.interval.high == 2.0
    # Keys the record was written without stay absent from what it writes.
    assert not entry.figures.has("near_tie_prompts") and "pool_prompts" in record.absent
    written = record.to_json()
    assert written["baseline"] == {"latency_ms_per_token": None}
    assert written["finalists"] == [{"trial": 3, "label": "ngram", "search": {},
                                     "mismatched_prompts": [], "speedup": 1.2,
                                     "ci90": [1.0, 2.0]}]
    assert "estimator" not in written and "engine_races" not in written


def test_a_newer_or_malformed_record_is_one_error_line() -> None:
    current = {"version": VERSION, "statistic": "s", "level": 0.9, "prompts": 0,
               "repeats": 1, "finalists": [], "decision": "undecided", "winner": None,
               "reason": "r"}
    assert ValidationRecord.from_json(current).to_json() == current
    with pytest.raises(AutotuneError, match=r"version 99; this autotune reads versions up to"):
        ValidationRecord.from_json({**current, "version": 99})
    with pytest.raises(AutotuneError) as error:
        ValidationRecord.from_json({**current, "finalists": [{"label": "no trial"}]})
    assert str(error.value) == ("the study's validation record: finalists.0.trial: "
                                "Field required")
    with pytest.raises(AutotuneError, match="decision: Field required"):
        ValidationRecord.from_json({k: v for k, v in current.items() if k != "decision"})
