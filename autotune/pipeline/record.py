"""What a search records about itself: the identity of its study (a resumed or shared
study must match it) and `run.json` (what the run folder, the report and `best.json`'s
provenance are written from)."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from autotune.common.version import __version__
from autotune.common.files import write_atomically
from autotune.frozen.environment import command_line, hardware_record, model_record
from autotune.pipeline.loading import SearchModels
from autotune.pipeline.plan import SearchPlan
from autotune.runs.folder import RUN_FILE
from autotune.runs.record import (
    FileRecord,
    FrozenContext,
    Provenance,
    RunRecord,
    StudyIdentity,
    WorkloadRecord,
)
from autotune.search.storage import storage_url_shown
from autotune.space.binding import BIT_PARAMS
from autotune.workloads.prompts import workload_digest


def study_identity(plan: SearchPlan, models: SearchModels) -> StudyIdentity:
    """What defines the study: another space, model, workload or engine is another study."""
    target, draft, objective = models.target, models.draft, plan.objective
    defaults = objective.workload
    return StudyIdentity(
        space=plan.space.name, space_sha256=plan.space.sha256,
        objective=objective.name, objective_sha256=objective.sha256,
        model=target.name, draft=draft.name if draft is not None else None,
        device_type=target.device.type, dtype=str(target.dtype).removeprefix("torch."),
        workload=plan.workload, categories=plan.categories, prompts=len(plan.prompts),
        workload_sha256=workload_digest(plan.prompts), max_new_tokens=plan.max_new_tokens,
        temperature=defaults.temperature, top_p=defaults.top_p, engine=plan.target,
        bit_params=BIT_PARAMS)


def write_run_record(plan: SearchPlan, models: SearchModels,
                     identity: StudyIdentity) -> RunRecord:
    """Write RUN_DIR/run.json (atomically) and return its record."""
    record = RunRecord(
        study=plan.study_name, storage=storage_url_shown(plan.storage), run_dir=str(plan.run_dir),
        sampler=plan.sampler, seed=plan.seed, trials=plan.trials, prune=plan.prune,
        space_file=plan.space.path, objective_file=plan.objective.path,
        model_spec=plan.model, draft_spec=plan.draft, autotune_version=__version__,
        updated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        argv=sys.argv[1:], identity=identity, n_layers=models.target.n_layers,
        frozen=_frozen_context(plan, models, identity))
    write_atomically(plan.run_dir / RUN_FILE, json.dumps(record.to_json(), indent=2) + "\n")
    return record


def record_stages(run_dir: Path, stages: tuple[tuple[str, float], ...],
                  peak_rss: tuple[int, ...], peak_tree: tuple[int, ...] = ()) -> None:
    """Add this run's stages to RUN_DIR/run.json (atomically): `stages`, each with its
    seconds, its peak resident set and (where measured) the peak of the process and its
    engines together; `peak_rss_bytes` and `peak_tree_bytes`, the run's largest. A
    missing or unreadable run.json is left alone (the run wrote none: Ctrl-C before the
    study)."""
    path = run_dir / RUN_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    trees = peak_tree if len(peak_tree) == len(stages) else (None,) * len(stages)
    doc["stages"] = [{"stage": stage, "seconds": round(seconds, 1), "peak_rss_bytes": peak,
                      **({"peak_tree_bytes": tree} if tree else {})}
                     for (stage, seconds), peak, tree in zip(stages, peak_rss, trees)]
    doc["peak_rss_bytes"] = max(peak_rss, default=None)
    if any(peak_tree):
        doc["peak_tree_bytes"] = max(peak_tree)
    write_atomically(path, json.dumps(doc, indent=2) + "\n")


def _frozen_context(plan: SearchPlan, models: SearchModels,
                    identity: StudyIdentity) -> FrozenContext:
    """What `best.json` records besides the answer: models, hardware, workload, provenance."""
    space, objective = plan.space, plan.objective
    return FrozenContext(
        model=model_record(models.target, plan.model),
        draft=model_record(models.draft, plan.draft) if models.draft is not None else None,
        hardware=hardware_record(models.target.device),
        workload=WorkloadRecord(
            source=plan.workload, categories=identity.categories, prompts=identity.prompts,
            max_new_tokens=identity.max_new_tokens, temperature=identity.temperature,
            top_p=identity.top_p, seed=plan.seed, sha256=identity.workload_sha256),
        provenance=Provenance(
            space=FileRecord(space.name, space.path, space.sha256),
            objective=FileRecord(objective.name, objective.path, objective.sha256),
            sampler=plan.sampler, seed=plan.seed, study=plan.study_name,
            storage=storage_url_shown(plan.storage), command=command_line()))
