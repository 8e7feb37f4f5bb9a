"""Building a frozen config of the current version (a run folder's best.json)."""

from __future__ import annotations

import math
from typing import Any, Mapping

from autotune import __version__
from autotune.schema.config import config_from_mapping
from autotune.frozen.environment import now
from autotune.frozen.schema import SCHEMA


def frozen_document(params: Mapping[str, Any], *, metrics: Mapping[str, Any] | None = None,
                    objective: Mapping[str, Any] | None = None,
                    context: Mapping[str, Any] | None = None,
                    trial: Mapping[str, Any] | None = None,
                    pareto_front: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Assemble a document of the current version. `context` is a run's record (run.json's `frozen`
    entry: model, draft, hardware, workload, provenance); `trial` adds the trial's
    number, preset and label to the provenance."""
    context = context or {}
    doc: dict[str, Any] = {"schema": SCHEMA,
                           "params": config_from_mapping(params).to_dict(),
                           "metrics": _json_safe(dict(metrics or {}))}
    if objective is not None:
        doc["objective"] = dict(objective)
    for key in ("model", "draft", "hardware", "workload"):
        if key in context:
            doc[key] = context[key]
    provenance = {"autotune_version": __version__, "created": now(),
                  **dict(context.get("provenance", {}))}
    if trial is not None:
        provenance.update({k: trial[k] for k in ("trial", "preset", "label", "optuna_params")
                           if k in trial})
    doc["provenance"] = provenance
    if pareto_front is not None:
        doc["pareto_front"] = _json_safe(pareto_front)
    return doc


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
