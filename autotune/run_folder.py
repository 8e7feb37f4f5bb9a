"""The run folder of a search: `run.json`, `trials.csv`, `best.json`, the top-trials table.

Everything here is rebuilt from the study storage, so the files are always consistent
with it, and each is replaced atomically after every trial (a kill never leaves half of
one).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from autotune.files import write_atomically
from autotune.frozen import frozen_document
from autotune.objectives import Objective
from autotune.samplers import BASELINE_ATTR

RUN_FILE = "run.json"
TRIALS_FILE = "trials.csv"
BEST_FILE = "best.json"


def describe(config: dict[str, Any]) -> str:
    """A short human label for a config (progress line, tables)."""
    method = config.get("method", "none")
    if method == "none":
        return "baseline (AR)"
    choices = config.get("tree_choices") or []
    width = config.get("tree_width") or 0
    if choices:                       # a static tree: its shape is the list of paths
        parts = [method, f"tree choices({len(choices)})"]
    elif width:                       # a dynamic tree; no token budget = every node
        tokens = config.get("tree_tokens") or 0
        parts = [method, f"tree w{width} d{config.get('tree_depth')}"
                 + (f" t{tokens}" if tokens else "")]
    else:
        parts = [method, f"k={config.get('k')}"]
    if method == "layer_skip":
        parts.append(f"attn={len(config.get('attn_skip', []))} mlp={len(config.get('mlp_skip', []))}")
    elif method == "sorted_exit":
        parts.append(f"exits={','.join(map(str, config.get('exits', [])))}")
    elif method == "ngram":
        parts.append(f"n={config.get('ngram_min')}..{config.get('ngram_max')}")
    policy = config.get("exit_policy", "fixed")     # a tree always runs `fixed`
    if policy in ("confidence", "adaptive"):
        parts.append(f"{policy} γ={config.get('gamma'):.2f}")
    elif policy != "fixed":
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


def best_trial(study: optuna.Study, objective: Objective) -> FrozenTrial | None:
    """The best complete trial; for several objectives, the front's best on the first."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    if objective.multi:
        sign = 1 if objective.directions[0] == "minimize" else -1
        return min(study.best_trials, key=lambda t: sign * t.values[0])
    return study.best_trial


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
    """What `best.json` holds: a FrozenConfig (`autotune.frozen/v1`) of the best trial
    (+ the Pareto front for several objectives). `context` is run.json's `frozen`
    entry: model, draft, hardware, workload and the run's provenance."""
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
    """Frozen configs of every complete trial, best first (the Pareto front first for
    several objectives, then by the first objective): the fallbacks of the exports."""
    return [_trial_document(t, objective, context) for t in _ranked(study, objective)[0]]


def _ranked(study: optuna.Study, objective: Objective) -> tuple[list[FrozenTrial], set[int]]:
    """Complete trials best first (the Pareto front first, then by the first objective),
    and the front's trial numbers (empty for one objective)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    signs = [1 if d == "minimize" else -1 for d in objective.directions]
    front = {t.number for t in study.best_trials} if objective.multi and complete else set()
    ranked = sorted(complete, key=lambda t: (t.number not in front,
                                             [s * v for s, v in zip(signs, t.values)]))
    return ranked, front


def write_run_files(run_dir: Path, study: optuna.Study, objective: Objective,
                    context: dict[str, Any] | None = None) -> None:
    """Rewrite `trials.csv` and `best.json` from the storage."""
    frame = trials_frame(study, objective)
    write_atomically(run_dir / TRIALS_FILE, frame.to_csv(index=False))
    doc = best_document(study, objective, context)
    if doc is not None:
        write_atomically(run_dir / BEST_FILE, json.dumps(doc, indent=2) + "\n")


def top_table(study: optuna.Study, objective: Objective, n: int = 10) -> str:
    """The top `n` complete trials (the Pareto front first for several objectives)."""
    ranked, front = _ranked(study, objective)
    if not ranked:
        return "no trial completed"
    rows = []
    for t in ranked[:n]:
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
