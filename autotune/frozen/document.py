"""Building a frozen config of the current version (a run folder's best.json).

    frozen_config(config, metrics=..., objective=ObjectiveRecord(...), context=run_context,
                  trial=ProvenanceRecord(trial=3, preset=None, label=...))   # a FrozenConfig

`frozen_document` is the same as JSON, for callers that write or edit the document.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from autotune.common.version import __version__
from autotune.frozen.environment import now
from autotune.frozen.record import (
    FrozenConfig,
    FrozenContext,
    Metrics,
    ObjectiveRecord,
    ParetoPoint,
    ProvenanceRecord,
)
from autotune.frozen.schema import SCHEMA
from autotune.schema.config import DecodeConfig, config_from_mapping

__all__ = ["frozen_config", "frozen_document"]

# The parts of a run's context each of its frozen configs carries, in best.json's order.
_CONTEXT_PARTS = ("model", "draft", "hardware", "workload")
# What a trial adds to the provenance, in order (those it was given).
_TRIAL_PARTS = ("trial", "preset", "label", "optuna_params")


def frozen_config(config: DecodeConfig | Mapping[str, Any], *,
                  metrics: Mapping[str, Any] | None = None,
                  objective: ObjectiveRecord | None = None,
                  context: FrozenContext | Mapping[str, Any] | None = None,
                  trial: ProvenanceRecord | None = None,
                  pareto_front: list[ParetoPoint] | None = None) -> FrozenConfig:
    """A frozen config of the current version: `config`'s knobs, the figures measured
    for it (`metrics`: a summary's JSON; NaN and inf are written as null), the
    objective's values, the run's `context` (`FrozenContext`, or run.json's `frozen`
    entry) and, for a trial, its part of the provenance (`trial`: its number, preset,
    label and Optuna params, those given)."""
    run = FrozenContext.of(context)
    provenance = {"autotune_version": __version__, "created": now(),
                  **(run.provenance.to_json() if run.provenance is not None else {})}
    if trial is not None:
        provenance.update(trial.to_json())
    parts = {
        "schema": SCHEMA,
        "params": config if isinstance(config, DecodeConfig) else config_from_mapping(config),
        "metrics": Metrics.model_validate(_json_safe(dict(metrics or {})))}
    if objective is not None:
        parts["objective"] = objective
    parts.update((key, getattr(run, key)) for key in _CONTEXT_PARTS
                 if key in run.model_fields_set)
    parts["provenance"] = ProvenanceRecord.model_validate(provenance)
    if pareto_front is not None:
        parts["pareto_front"] = pareto_front
    return FrozenConfig.model_validate(parts)


def frozen_document(params: Mapping[str, Any], *, metrics: Mapping[str, Any] | None = None,
                    objective: Mapping[str, Any] | None = None,
                    context: FrozenContext | Mapping[str, Any] | None = None,
                    trial: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`frozen_config` as the JSON best.json holds, from JSON parts (`objective`,
    `trial`: the keys of their records; `trial`'s other keys are left out)."""
    return frozen_config(
        params, metrics=metrics, context=context,
        objective=ObjectiveRecord.model_validate(objective) if objective is not None else None,
        trial=(ProvenanceRecord.model_validate({k: trial[k] for k in _TRIAL_PARTS if k in trial})
               if trial is not None else None)).to_json()


def _json_safe(value: Any) -> Any:
    """Plain JSON values: tuples become lists, NaN/inf become null (strict JSON has
    neither), anything else unknown its string."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)
