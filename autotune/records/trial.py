"""A trial's user attributes as a typed record: `TrialRecord.of(frozen_trial)`.

    record = TrialRecord.of(trial)
    record.config            # DecodeConfig (parsed once), or None: never ran
    record.config_json       # the config as stored (`DecodeConfig.to_dict()`)
    record.metrics           # MeasurementSummary of what the trial stored, or None
    record.fidelity          # "measure" or "replay"; None without metrics
    record.preset, record.screen, record.error, record.infeasible, record.retry_of ...

Optuna hands every reader a `FrozenTrial` whose `user_attrs` is a plain JSON mapping;
this is the one place that reads it (and names its keys), so the search, the run folder
and the report read attributes. Writers (`StudyRunner._trial`, the screen's queue
`search.trial_record.QueuedTrial`, the interrupt handler) keep writing the same keys: the
storage format does not change.
Optuna's own fields (state, values, params, duration) are read from `trial`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from optuna.trial import FrozenTrial
from pydantic import JsonValue, ValidationError

from autotune.common.records import JsonRecord, Number
from autotune.records.summary import MeasurementSummary
from autotune.schema.config import DecodeConfig, config_from_mapping

__all__ = ["BASELINE", "BASELINE_ATTR", "CONFIG_ATTR", "METRICS_ATTR", "REPEAT_ATTR",
           "SCREEN_ATTR", "SCREEN_FINALIST_ATTR", "UNPRUNED_ATTR", "ScreenNote", "TrialRecord"]

# The user attributes a trial carries (their keys in the storage).
CONFIG_ATTR = "config"             # the resolved config (`DecodeConfig.to_dict()`)
METRICS_ATTR = "metrics"           # `MeasurementSummary.stored_json()`
BASELINE_ATTR = "preset"           # an enqueued default's name; BASELINE = the AR baseline
BASELINE = "baseline"
SCREEN_ATTR = "screen"             # a measured trial's screen rank and replay prediction
UNPRUNED_ATTR = "unpruned"         # measure on every prompt, never prune (a method's only)
REPEAT_ATTR = "repeat_of"          # a `distinct` study's refused repeat: the trial it repeats
RETRY_ATTR = "retry_of"            # queued again after an interrupted trial
WORKER_ATTR = "worker"             # the process that ran it (host:pid)
ERROR_ATTR = "error"               # a failed trial's one-line reason
INFEASIBLE_ATTR = "infeasible"     # why the sampler's point is not a config
INTERRUPTED_ATTR = "interrupted"   # stopped by Ctrl-C or a dead worker: not counted
# A config the replay screen chose, copied into the measured study as a finalist where
# its trials could not run enough (`search.screen_finalists`): its figures are replay's.
SCREEN_FINALIST_ATTR = "screen_finalist"


class ScreenNote(JsonRecord):
    """What a screened config carries into the measured study (`screen`): its rank in
    the screen, the screen's trial, and what replay predicted for it."""

    rank: int
    trial: int | None = None
    predicted: dict[str, Number | bool | None] | None = None


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the search, the run folder and the report read it."""

    trial: FrozenTrial
    config_json: dict[str, JsonValue] | None
    metrics: MeasurementSummary | None
    preset: str | None
    screen: ScreenNote | None
    worker: str | None
    error: str | None
    infeasible: str | None
    interrupted: bool
    retry_of: int | None
    repeat_of: int | None
    unpruned: bool
    # Copied from the replay screen as a finalist, never measured in the search.
    from_screen: bool = False

    @classmethod
    def of(cls, trial: FrozenTrial) -> TrialRecord:
        """The record of `trial`; attributes it lacks (a trial never run, an older
        study's) are None, and a malformed one (a hand-edited storage) is ignored."""
        attrs = trial.user_attrs
        config = attrs.get(CONFIG_ATTR)
        metrics = attrs.get(METRICS_ATTR)
        screen = attrs.get(SCREEN_ATTR)
        return cls(
            trial=trial,
            config_json=config if isinstance(config, dict) else None,
            metrics=_summary(metrics),
            preset=_text(attrs.get(BASELINE_ATTR)),
            screen=(ScreenNote.model_validate(screen)
                    if isinstance(screen, dict) and isinstance(screen.get("rank"), int) else None),
            worker=_text(attrs.get(WORKER_ATTR)),
            error=_text(attrs.get(ERROR_ATTR)),
            infeasible=_text(attrs.get(INFEASIBLE_ATTR)),
            interrupted=bool(attrs.get(INTERRUPTED_ATTR)),
            retry_of=_number(attrs.get(RETRY_ATTR)),
            repeat_of=_number(attrs.get(REPEAT_ATTR)),
            unpruned=bool(attrs.get(UNPRUNED_ATTR)),
            from_screen=bool(attrs.get(SCREEN_FINALIST_ATTR)))

    @property
    def number(self) -> int:
        return self.trial.number

    @cached_property
    def config(self) -> DecodeConfig | None:
        """The config the trial ran, parsed (an AutotuneError for one this autotune
        cannot read: a plug-in's method not loaded); None for a trial never run."""
        return config_from_mapping(self.config_json) if self.config_json is not None else None

    @property
    def method(self) -> str:
        """Its method: from its config, else its `method` param, else the AR baseline."""
        stored = (self.config_json or {}).get("method") or self.trial.params.get("method")
        return str(stored or "none")

    @property
    def speculates(self) -> bool:
        """A config was run and its method is not the AR baseline's."""
        return self.config_json is not None and self.method != "none"

    @property
    def is_baseline(self) -> bool:
        """The enqueued AR baseline (no sampled parameters)."""
        return self.preset == BASELINE and not self.trial.params

    @property
    def fidelity(self) -> str | None:
        """Which tier its figures came from: "measure" (older runs were all measured) or
        "replay"; None for a trial without figures."""
        if self.metrics is None:
            return None
        return self.metrics.fidelity or "measure"


def _summary(metrics: Any) -> MeasurementSummary | None:
    """A trial's stored figures, or None where there are none or they do not read (a
    hand-edited storage): one bad trial must not stop the run folder or the report."""
    if not isinstance(metrics, dict):
        return None
    try:
        return MeasurementSummary.from_json(metrics)
    except ValidationError:
        return None


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
