"""A search run's stages as a table, and the one loop that runs them.

Every stage after the study is set up is a `Stage`: its line in "time by stage", its
work, its Ctrl-C line (`interrupts.STOP_LINES`) and the `--time-budget` stage it ends.
`run_stages` gives each the same treatment, so no stage threads the stops, the clock or
the budget by hand: a stage runs while the run goes on (or after a stop, for the run
files), its budget stage is marked done after it, and its lap is taken whether it ran
or not (a stage that took no time is left out of the summary; `StageClock.lap`).
`pipeline/run.py` holds the table, in the order the stages run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune.common.memory import StagePeaks, TreePeaks
from autotune.pipeline.budget import TimeBudget
from autotune.pipeline.interrupts import Stops

__all__ = ["Stage", "StageClock", "run_stages"]


def _always() -> bool:
    return True


@dataclass(frozen=True)
class Stage:
    """One stage of a search run."""

    # Its line in "time by stage" (run.json, the summary); None: its time is counted in
    # the next stage's.
    lap: str | None
    work: Callable[[], object]
    # Its key in `interrupts.STOP_LINES`: a Ctrl-C inside it says what is kept. None: the
    # work catches Ctrl-C itself (the study marks its trial) and tells `Stops`.
    stops: str | None
    # The `--time-budget` stage it ends (`Budget.done`), if it is one.
    budget: str | None = None
    # Whether it has anything to do in this run (asked when its turn comes).
    when: Callable[[], bool] = _always
    # It runs after a Ctrl-C in an earlier stage too (the run files: finished work kept).
    after_stop: bool = False


def run_stages(stages: Sequence[Stage], stops: Stops, budget: TimeBudget,
               clock: StageClock) -> None:
    """Run `stages` in order, each under `stops`, ending its budget stage and its lap."""
    for stage in stages:
        if (stops.going or stage.after_stop) and stage.when():
            if stage.stops is None:
                stage.work()
            else:
                stops.run(stage.stops, stage.work, after_stop=stage.after_stop)
            if stage.budget is not None:
                budget.done(stage.budget)
        if stage.lap is not None:
            clock.lap(stage.lap)


class StageClock:
    """How long each stage of a run took and its peak resident set, for the summary's
    last lines and run.json."""

    def __init__(self) -> None:
        self.stages: tuple[tuple[str, float], ...] = ()
        self.peak_rss: tuple[int, ...] = ()
        self.peak_tree: tuple[int, ...] = ()
        self._since = time.monotonic()
        self._memory = StagePeaks()
        self._tree = TreePeaks()
        self._carried = 0          # the peak of a skipped stage, counted in the next
        self._carried_tree = 0

    def lap(self, stage: str) -> None:
        """Close `stage` at now (a stage that took no time, skipped, is left out)."""
        now = time.monotonic()
        peak = max(self._memory.lap(), self._carried)
        tree = max(self._tree.lap(), self._carried_tree)
        if now - self._since >= 0.05:
            self.stages += ((stage, now - self._since),)
            self.peak_rss += (peak,)
            self.peak_tree += (tree,)
            self._carried = self._carried_tree = 0
        else:
            self._carried, self._carried_tree = peak, tree
        self._since = now

    def close(self) -> None:
        """Stop sampling the process tree's memory."""
        self._tree.close()
