"""The one place where Ctrl-C becomes a clean stop of a search run's stage.

Every stage after the study is opened runs through `Stops.run(stage, work)`. A Ctrl-C
inside it ends that stage, prints the stage's line (what is saved, what a rerun does),
and marks the run interrupted. Later stages are then skipped, except the run files,
which are written after an interruption in any earlier stage (`after_stop=True`). A trial
cut by Ctrl-C is the study's own business (`StudyRunner` marks it interrupted and queues
it again); the run only learns of it (`Stops.interrupted_by`).

`pipeline/run.py`'s docstring says what each phase leaves on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from autotune.pipeline.progress import note

__all__ = ["INTERRUPTED", "STOP_LINES", "Stops"]

# StudyRunner.run's reason, and the run's, after Ctrl-C.
INTERRUPTED = "interrupted"

# What each stage's Ctrl-C leaves, as the run says it ({run_dir}, {best}: the run's).
STOP_LINES = {
    "screen": "interrupted while screening; the screened configs are saved in the study "
              "storage. Rerun the same command to resume.",
    "engines": "interrupted while screening the engines' spaces; the screened configs "
               "are saved in the study storage. Rerun the same command to resume.",
    "validation": "interrupted while validating the finalists; the search is saved and "
                  "best.json holds its own (unvalidated) best. Rerun the same command "
                  "to validate.",
    "schedule": "interrupted while tuning K per batch size; the search is saved and "
                "best.json has no schedule. Rerun the same command to tune it.",
    # The study is in the storage; each file is replaced atomically, so what was not
    # rewritten is the previous version (or absent) and can be redone.
    "files": "interrupted while writing the run folder; the study is saved. Redo the "
             "files with: autotune report {run_dir}; autotune export {best} --format ... "
             "(or rerun the same command)",
}

T = TypeVar("T")


@dataclass
class Stops:
    """Whether the run was interrupted, and the stages run under that rule."""

    run_dir: Path
    best: Path
    interrupted: bool = False

    def run(self, stage: str, work: Callable[[], T], *, after_stop: bool = False
            ) -> T | None:
        """`work()`, or None when Ctrl-C cut it (its line printed) or when the run was
        interrupted before it (skipped, unless `after_stop`)."""
        if self.interrupted and not after_stop:
            return None
        try:
            return work()
        except KeyboardInterrupt:
            self.interrupted = True
            note(STOP_LINES[stage].format(run_dir=self.run_dir, best=self.best))
            return None

    def interrupted_by(self, reason: str) -> None:
        """The study stopped for `reason`: Ctrl-C inside it interrupts the run."""
        self.interrupted = self.interrupted or reason == INTERRUPTED

    @property
    def going(self) -> bool:
        """No Ctrl-C yet: the next stage runs."""
        return not self.interrupted
