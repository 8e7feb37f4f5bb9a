"""What a run recommends, read off its study: the one rule behind `best.json`, the report's
headline and the exports (`answer`), and where the study keeps its validation record.

The race (`search.finalists.measure_finalists`) judges the finalists and stores its
`ValidationRecord` as the study's user attribute `VALIDATION_ATTR`; this module reads it
back (`current_record`: only while it judges the study's complete trials; a resumed
search that completed more makes it stale) and answers from it: the validated winner,
"do not speculate" (the AR baseline's trial), or, without a current record, the search's
best by `records.ranking`. Each engine's part of a `--target all` record is read in the
single-engine shape every reader knows (`engine_record`).

Here, below the search, so the run folder and the report follow the rule without the
search's code (issue 62). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from autotune.records import ranking
from autotune.records.trial import TrialRecord
from autotune.records.validation import ValidationRecord

__all__ = ["DO_NOT_SPECULATE", "OWN_ENGINE", "SPECULATE", "UNDECIDED", "VALIDATION_ATTR",
           "Answer", "answer", "current_record", "engine_names", "engine_record",
           "store_record", "stored_record"]

VALIDATION_ATTR = "validation"
# The finalists of autotune's own search (its decoder, its rules): the record's top level.
OWN_ENGINE = "autotune"
SPECULATE = "speculate"
DO_NOT_SPECULATE = "do_not_speculate"
UNDECIDED = "undecided"


def engine_names(record: ValidationRecord | None) -> list[str]:
    """The engines `record` answers for besides autotune's own (none: a single-engine
    search's record)."""
    return record.engine_names() if record is not None else []


def engine_record(record: ValidationRecord, engine: str) -> ValidationRecord | None:
    """`engine`'s part of `record` in the single-engine shape (its finalists and
    judgement at the top, the race's shared facts as they are), or None when `record`
    has no answer for it. `OWN_ENGINE`: the record's own part (without the engines')."""
    return record.for_engine(None if engine == OWN_ENGINE else engine)


def current_record(study: optuna.Study) -> ValidationRecord | None:
    """The study's validation record while it still judges the study's complete trials
    (a resumed search that completed more makes it stale: None)."""
    record = stored_record(study)
    if record is None or record.complete_trials != len(ranking.complete(study)):
        return None
    return record


def stored_record(study: optuna.Study) -> ValidationRecord | None:
    """The study's validation record, current or stale (None: it has none)."""
    record = study.user_attrs.get(VALIDATION_ATTR)
    return ValidationRecord.from_json(record) if isinstance(record, dict) else None


def store_record(study: optuna.Study, record: ValidationRecord) -> None:
    """Keep `record` in the study (`VALIDATION_ATTR`, as JSON): what `current_record`
    reads back."""
    study.set_user_attr(VALIDATION_ATTR, record.to_json())


@dataclass(frozen=True)
class Answer:
    """What a run recommends. `trial` is the config's trial (the AR baseline's trial, or
    None when there is none, for "do not speculate"); `record` the validation behind it
    (None: not validated, the search's own best by `autotune.records.ranking`)."""

    trial: FrozenTrial | None
    record: ValidationRecord | None

    @property
    def validated(self) -> bool:
        return self.record is not None

    @property
    def speculate(self) -> bool:
        return self.record is None or self.record.decision == SPECULATE


def answer(study: optuna.Study, objective: ranking.Directions) -> Answer:
    """The one rule behind `best.json`, the report's headline and the exports: the
    validated winner when the study has a current validation record, "do not speculate"
    (the AR baseline) when that record says so, else the search's best."""
    record = current_record(study)
    if record is None:
        return Answer(ranking.best_trial(study, objective), None)
    trials = {t.number: t for t in ranking.complete(study)}
    if record.decision == SPECULATE and record.winner in trials:
        return Answer(trials[record.winner], record)
    baseline = next((t for t in trials.values() if TrialRecord.of(t).is_baseline), None)
    return Answer(baseline, record)
