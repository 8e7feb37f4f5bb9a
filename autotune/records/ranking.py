"""Which complete trial is best, and the order of the others: the one rule behind
`best.json`, the exports' fallback configs, the top-trials table and every report panel
that names a best trial, so none of them can disagree with another.

The rule (what `best.json` has always held):
- only COMPLETE trials rank (a pruned trial's value is its last intermediate report);
- for one objective, by its value (smaller first when minimised, larger when maximised);
- for several, the Pareto front first, then by the first objective's value;
- ties go to the lower trial number, the trial that ran first (what Optuna's own
  `study.best_trial` returns on the journal storage a search uses by default).

Torch-free: the report and `autotune report` read it without loading a model library.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState


class Directions(Protocol):
    """What ranking needs of an objective: one Optuna direction per metric
    (`objectives.Objective` and the report's `ObjectiveInfo` both have it)."""

    @property
    def directions(self) -> Sequence[str]: ...      # "minimize" | "maximize"


def sign(objective: Directions, index: int = 0) -> int:
    """+1 when smaller is better for metric `index`, -1 when larger is."""
    return 1 if objective.directions[index] == "minimize" else -1


def complete(study: optuna.Study) -> list[FrozenTrial]:
    """The COMPLETE trials, by trial number."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return sorted(trials, key=lambda t: t.number)


def pareto_numbers(study: optuna.Study, objective: Directions) -> set[int]:
    """Trial numbers on the Pareto front (empty for a single objective)."""
    if len(objective.directions) < 2:
        return set()
    return {t.number for t in study.best_trials}


def ranked(study: optuna.Study, objective: Directions) -> list[FrozenTrial]:
    """Complete trials best first: the front first (several objectives), then by the
    first objective, ties to the lower trial number."""
    trials = complete(study)
    front = pareto_numbers(study, objective) if trials else set()
    first = sign(objective, 0)
    return sorted(trials, key=lambda t: (t.number not in front, first * t.values[0], t.number))


def best_trial(study: optuna.Study, objective: Directions) -> FrozenTrial | None:
    """The best complete trial (`ranked(...)[0]`); None when no trial has completed."""
    order = ranked(study, objective)
    return order[0] if order else None
