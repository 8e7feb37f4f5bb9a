"""What the study optimised, as the report names it: metric names, directions, axis titles."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import optuna

from autotune.frozen.record import FrozenConfig
from autotune.report.documents import RunFacts
from autotune.records import ranking

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


def objective_info(study: optuna.Study, run: RunFacts | None = None,
                   best: FrozenConfig | None = None) -> ObjectiveInfo:
    """Metric names from best.json, else the objective preset named in run.json, else the
    study's metric names; directions always from the study (the storage is the truth)."""
    directions = tuple("minimize" if d == optuna.study.StudyDirection.MINIMIZE else "maximize"
                       for d in study.directions)
    run = run or RunFacts()
    recorded = best.objective if best is not None else None
    name = str((recorded.name if recorded is not None else None) or run.objective or "objective")
    metrics: Sequence[str] | None = recorded.metrics if recorded is not None else None
    if not (metrics is not None and len(metrics) == len(directions)):
        # The file run.json names, else the preset by name (a run made before the
        # presets moved to records/ names them under search/).
        metrics = _preset_metrics(run.objective_file) or _preset_metrics(run.objective)
    if not (isinstance(metrics, (list, tuple)) and len(metrics) == len(directions)):
        metrics = study.metric_names
    if not (isinstance(metrics, (list, tuple)) and len(metrics) == len(directions)):
        metrics = ["objective"] if len(directions) == 1 else [
            f"objective {i}" for i in range(len(directions))]
    return ObjectiveInfo(name, tuple(str(m) for m in metrics), directions)


def _preset_metrics(name_or_path: str | None) -> list[str] | None:
    if not name_or_path:
        return None
    from autotune.records.objective import load_objective
    try:
        return list(load_objective(name_or_path).metrics)
    except Exception:   # a moved or edited file: fall back to the study's names
        return None
