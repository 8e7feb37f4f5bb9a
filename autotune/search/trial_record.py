"""A config queued in a study before it runs, and where the search reads its trials.

`QueuedTrial` is the writer's side of a trial's user attributes (the screen's queue);
their reader, `TrialRecord`, and the attributes' keys are declared in
`autotune.records.trial` (the run folder and the report read trials there, without the
search) and stay importable from here for the search's modules and the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.records.trial import (
    BASELINE,
    BASELINE_ATTR,
    CONFIG_ATTR,
    METRICS_ATTR,
    REPEAT_ATTR,
    SCREEN_ATTR,
    SCREEN_FINALIST_ATTR,
    UNPRUNED_ATTR,
    ScreenNote,
    TrialRecord,
)
from autotune.space.entries import ParamValue

__all__ = ["BASELINE", "BASELINE_ATTR", "CONFIG_ATTR", "METRICS_ATTR", "REPEAT_ATTR",
           "SCREEN_ATTR", "SCREEN_FINALIST_ATTR", "UNPRUNED_ATTR", "QueuedTrial", "ScreenNote",
           "TrialRecord"]


@dataclass(frozen=True)
class QueuedTrial:
    """A config queued in a study before it runs (a screened config carried into the
    measured study): its params and what it carries in, written as the trial's user
    attributes when it is enqueued (`user_attrs`) and read back by `TrialRecord`."""

    params: dict[str, ParamValue]
    screen: ScreenNote | None = None
    preset: str | None = None          # the documented default it is, if one
    unpruned: bool = False             # measured on every prompt (a method's only one)

    def user_attrs(self) -> dict[str, Any]:
        """Its attributes as the storage keeps them (Optuna's `enqueue_trial`)."""
        attrs: dict[str, Any] = {}
        if self.screen is not None:
            attrs[SCREEN_ATTR] = self.screen.to_json()
        if self.preset:
            attrs[BASELINE_ATTR] = self.preset
        if self.unpruned:
            attrs[UNPRUNED_ATTR] = True
        return attrs
