"""The run folder of a search: `run.json`, `trials.csv`, `best.json`, the top-trials table.

Everything here is rebuilt from the study storage, so the files are always consistent
with it, and each is replaced atomically after every trial (a kill never leaves half of
one).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import pandas as pd
from optuna.trial import FrozenTrial

from autotune.decoding.config import KNOBS, DecodeConfig
from autotune.decoding.methods import find_method
from autotune.decoding.shape import DraftShape
from autotune.files import write_atomically
from autotune.frozen import frozen_document
from autotune.ranking import best_trial, pareto_numbers, ranked
from autotune.samplers import BASELINE_ATTR

if TYPE_CHECKING:      # objectives imports the measuring code (torch); the files need none
    from autotune.objectives import Objective

__all__ = ["BEST_FILE", "RUN_FILE", "TRIALS_FILE", "best_document", "best_trial", "describe",
           "ranked_documents", "top_table", "trials_frame", "write_run_files"]

RUN_FILE = "run.json"
TRIALS_FILE = "trials.csv"
BEST_FILE = "best.json"


_DEFAULTS = DecodeConfig()       # a key a config lacks reads as its default
# The exit policies that read γ (their label shows it).
_GAMMA_POLICIES = KNOBS["gamma"].policies


def describe(config: dict[str, Any]) -> str:
    """A short human label for a config (progress line, tables): `baseline (AR)`, or the
    method, its draft shape (`k=4`, `tree w4 d5 t30`), its own knobs' summary and the
    exit policy unless `fixed`, e.g. `layer_skip tree w4 d5 t30 attn=3 mlp=1`."""
    method = config.get("method", _DEFAULTS.method)
    spec = find_method(method)
    if spec is not None and not spec.drafts:
        return "baseline (AR)"
    shape = DraftShape.of_mapping(config)
    # A hand-edited config whose shape keys do not parse still gets a label.
    parts = [str(method), shape.label() if shape is not None else f"k={config.get('k')}"]
    if spec is not None and spec.summary is not None:
        parts.append(spec.summary(config))
    policy = config.get("exit_policy", _DEFAULTS.exit_policy)     # a tree always runs `fixed`
    if policy in _GAMMA_POLICIES:
        parts.append(f"{policy} γ={config.get('gamma'):.2f}")
    elif policy != _DEFAULTS.exit_policy:
        parts.append(policy)
    return " ".join(parts)


def _flat(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return value


def trials_frame(study: optuna.Study, objective: Objective) -> pd.DataFrame:
    """One row per trial: number, state, preset, duration, values, metrics, config,
    params, error. Columns that no trial has are left out."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "preset": t.user_attrs.get(BASELINE_ATTR),
            "label": describe(t.user_attrs["config"]) if "config" in t.user_attrs else None,
            "duration_s": t.duration.total_seconds() if t.duration is not None else None,
            "started": t.datetime_start.isoformat() if t.datetime_start else None,
        }
        for metric, value in zip(objective.metrics, t.values or []):
            row[f"value.{metric}"] = value
        for key, value in t.user_attrs.get("metrics", {}).items():
            row[f"metrics.{key}"] = _flat(value)
        for key, value in t.user_attrs.get("config", {}).items():
            row[f"config.{key}"] = _flat(value)
        for key, value in t.params.items():
            row[f"params.{key}"] = value
        for key in ("error", "infeasible", "interrupted", "retry_of", "worker"):
            row[key] = t.user_attrs.get(key)
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.dropna(axis="columns", how="all") if not frame.empty else frame


def _trial_record(t: FrozenTrial, objective: Objective) -> dict[str, Any]:
    return {
        "trial": t.number,
        "preset": t.user_attrs.get(BASELINE_ATTR),
        "label": describe(t.user_attrs.get("config", {})),
        "values": dict(zip(objective.metrics, t.values)),
        "params": t.user_attrs.get("config", {}),
        "optuna_params": t.params,
        "metrics": t.user_attrs.get("metrics", {}),
    }


def best_document(study: optuna.Study, objective: Objective,
                  context: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What `best.json` holds: a FrozenConfig (`autotune.frozen/v1`) of the best trial by
    `autotune.ranking` (+ the Pareto front for several objectives). `context` is run.json's
    `frozen` entry: model, draft, hardware, workload and the run's provenance."""
    best = best_trial(study, objective)
    if best is None:
        return None
    front = None
    if objective.multi:
        front = [_trial_record(t, objective)
                 for t in sorted(study.best_trials, key=lambda t: t.number)]
    return _trial_document(best, objective, context, front)


def _trial_document(t: FrozenTrial, objective: Objective, context: dict[str, Any] | None,
                    pareto_front: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One trial as a FrozenConfig."""
    record = _trial_record(t, objective)
    metrics = {k: v for k, v in record["metrics"].items() if k != "config"}
    return frozen_document(
        record["params"], metrics=metrics,
        objective={"name": objective.name, "metrics": list(objective.metrics),
                   "directions": objective.directions, "values": record["values"]},
        context=context, trial=record, pareto_front=pareto_front)


def ranked_documents(study: optuna.Study, objective: Objective,
                     context: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Frozen configs of every complete trial in `autotune.ranking` order, best first:
    the fallbacks of the exports."""
    return [_trial_document(t, objective, context) for t in ranked(study, objective)]


def write_run_files(run_dir: Path, study: optuna.Study, objective: Objective,
                    context: dict[str, Any] | None = None) -> None:
    """Rewrite `trials.csv` and `best.json` from the storage."""
    frame = trials_frame(study, objective)
    write_atomically(run_dir / TRIALS_FILE, frame.to_csv(index=False))
    doc = best_document(study, objective, context)
    if doc is not None:
        write_atomically(run_dir / BEST_FILE, json.dumps(doc, indent=2) + "\n")


def top_table(study: optuna.Study, objective: Objective, n: int = 10) -> str:
    """The top `n` complete trials in `autotune.ranking` order (the Pareto front first for
    several objectives)."""
    order, front = ranked(study, objective), pareto_numbers(study, objective)
    if not order:
        return "no trial completed"
    rows = []
    for t in order[:n]:
        m = t.user_attrs.get("metrics", {})
        row: dict[str, Any] = {"trial": t.number, "config": describe(t.user_attrs.get("config", {}))}
        for metric, value in zip(objective.metrics, t.values):
            row[metric] = value
        for key, head in (("speedup", "speedup"), ("baseline_latency_ms_per_token", "AR ms/tok"),
                          ("mean_accepted_tokens", "tau"), ("acceptance_rate", "accept")):
            if key not in objective.metrics and key in m:
                row[head] = m[key]
        if objective.multi:
            row["pareto"] = "*" if t.number in front else ""
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.to_string(index=False, float_format=lambda v: f"{v:.3f}" if math.isfinite(v) else "-")
