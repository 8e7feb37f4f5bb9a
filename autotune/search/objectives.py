"""What evaluating candidates under an objective needs (`EvalContext`), and the objective's
names where the search imports them.

An objective (a YAML file: metrics, constraints, repeats, workload) is read by
`autotune.records.objective`, below the search, so the report and `validate` read one
without the search's code (issue 62); its names stay importable from here.
`autotune.search.evaluation.evaluate` turns one DecodeConfig into a metrics dict under
an objective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.records.objective import (
    COMPARATORS,
    CONSTRAINT_METRICS,
    METRICS,
    PRESETS,
    UNPREDICTED,
    Constraint,
    Metric,
    Objective,
    WorkloadDefaults,
    available_objectives,
    is_defined,
    is_number,
    load_objective,
)
from autotune.workloads.prompts import Prompt

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel

__all__ = ["COMPARATORS", "CONSTRAINT_METRICS", "METRICS", "PRESETS", "UNPREDICTED",
           "Constraint", "EvalContext", "Metric", "Objective", "Report", "WorkloadDefaults",
           "available_objectives", "is_defined", "is_number", "load_objective"]


@dataclass
class EvalContext:
    """What evaluating candidates needs; one per search process.

    `memo` is a per-search cache keyed by string (e.g. the target's reference
    continuations for `agreement`), so work shared by every candidate is done once.
    """

    target: LoadedModel
    draft: LoadedModel | None
    prompts: list[Prompt]
    max_new_tokens: int
    seed: int = 0
    memo: dict[str, Any] = field(default_factory=dict)
    # "measure": timed metrics are measured; "replay": predicted by the replay tier
    # (autotune.replay), whose cost parts live at `replay_parts`.
    fidelity: str = "measure"
    replay_parts: Any = None
    # Measurement backends (autotune.backends): `backend` times the trials, `final_backend`
    # the finalists on the held-out prompts; None is our own decoder.
    backend: Any = None
    final_backend: Any = None


Report = Callable[[int, float], None]


# How a trial reports progress to Optuna: (step, intermediate value).
Report = Callable[[int, float], None]
