"""What every panel module provides, and what it is given.

A panel is one module in `report/panels/`, Optuna-visualization style: `data(study,
objective, ...)` computes its tables (pandas DataFrames and a small dataclass a test can
check on a hand-built study; nothing drawn), `render(data)` draws them into one HTML
`<section>`, and `PANEL = Panel(id, collect, render)` registers both, `collect` reading
the panel's arguments from the report's `Inputs`. `panels/__init__.py` lists the panels
in page order; a new panel is one module plus one entry there. An optional panel
(`optional=True`) is drawn only when its `collect` returns data (not None): a section
that only some run folders can fill (best.json's `schedule`) leaves the others' pages
as they were.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import optuna

from autotune.frozen.record import FrozenConfig
from autotune.report.documents import RunFacts
from autotune.report.objective import ObjectiveInfo
from autotune.report.schedule import Schedule


@dataclass(frozen=True)
class Inputs:
    """What a report is made from: the study, what it optimised, and the run folder's
    documents (run.json's facts, best.json's record and its `schedule` as the report
    reads it, the parsed hardware_profile.json or None with `profile_problem` saying why
    it could not be read)."""

    study: optuna.Study
    objective: ObjectiveInfo
    run: RunFacts = field(default_factory=RunFacts)
    best: FrozenConfig = field(default_factory=FrozenConfig)
    schedule: Schedule | None = None
    profile: Any = None
    profile_problem: str | None = None


@dataclass(frozen=True)
class Panel:
    """id: the page anchor (`panel-<id>`); its data is `ReportData.<id with _ for ->`.
    collect: Inputs -> the panel's data. render: that data -> one HTML section.
    optional: the page has this panel only when `collect` returned something."""

    id: str
    collect: Callable[[Inputs], Any]
    render: Callable[[Any], str]
    optional: bool = False

    def shows(self, data: Any) -> bool:
        """Whether the page draws this panel for `data` (its collected data)."""
        return not self.optional or data is not None

    @property
    def field(self) -> str:
        return self.id.replace("-", "_")
