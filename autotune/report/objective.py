"""What the study optimised, as the report names it: metric names, directions, axis titles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from autotune.search import ranking

# Display units of metrics the report names on axes (objectives.METRICS says "x").
_UNITS = {
    "latency_ms_per_token": "ms/token", "speedup": "× AR", "peak_memory_mb": "MiB",
    "acceptance_rate": "fraction", "mean_accepted_tokens": "tokens/round",
    "prefill_ms": "ms", "draft_time_share": "fraction", "agreement": "fraction",
    "mean_verified_tokens": "tokens/pass",
}


@dataclass(frozen=True)
class ObjectiveInfo:
    """What the study optimised: metric names (one per Optuna objective) and directions."""

    name: str
    metrics: tuple[str, ...]
    directions: tuple[str, ...]          # "minimize" | "maximize"

    @property
    def multi(self) -> bool:
        return len(self.metrics) > 1

    def sign(self, index: int = 0) -> int:
        """+1 when smaller is better for metric `index`, -1 when larger is."""
        return ranking.sign(self, index)

    def axis_title(self, index: int = 0) -> str:
        return metric_title(self.metrics[index])


def metric_title(metric: str) -> str:
    """`metric (unit)` for an axis, or the bare name when the unit is unknown."""
    unit = _UNITS.get(metric)
    return f"{metric} ({unit})" if unit else metric


def objective_info(study: optuna.Study, run: dict[str, Any] | None = None,
                   best_doc: dict[str, Any] | None = None) -> ObjectiveInfo:
    """Metric names from best.json, else the objective preset named in run.json, else the
    study's metric names; directions always from the study (the storage is the truth)."""
    directions = tuple("minimize" if d == optuna.study.StudyDirection.MINIMIZE else "maximize"
                       for d in study.directions)
    run, best_doc = run or {}, best_doc or {}
    doc_objective = best_doc.get("objective") if isinstance(best_doc.get("objective"), dict) else {}
    name = str(doc_objective.get("name") or run.get("objective") or "objective")
    metrics = doc_objective.get("metrics")
    if not (isinstance(metrics, list) and len(metrics) == len(directions)):
        metrics = _preset_metrics(run.get("objective_file") or run.get("objective"))
    if not (isinstance(metrics, (list, tuple)) and len(metrics) == len(directions)):
        metrics = study.metric_names
    if not (isinstance(metrics, (list, tuple)) and len(metrics) == len(directions)):
        metrics = ["objective"] if len(directions) == 1 else [
            f"objective {i}" for i in range(len(directions))]
    return ObjectiveInfo(name, tuple(str(m) for m in metrics), directions)


def _preset_metrics(name_or_path: Any) -> list[str] | None:
    if not name_or_path:
        return None
    from autotune.search.objectives import load_objective
    try:
        return list(load_objective(str(name_or_path)).metrics)
    except Exception:   # a moved or edited file: fall back to the study's names
        return None
