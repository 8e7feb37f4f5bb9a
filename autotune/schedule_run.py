"""The schedule stage of a search run: tune the recommended config's K per batch size
(`autotune.schedule`) once the search and its validation are done, and keep the result
in the study so that `best.json` carries it and a rerun re-measures nothing."""

from __future__ import annotations

import sys
from typing import Any, Sequence

import optuna

from autotune import ranking
from autotune.decoding.config import config_from_mapping
from autotune.objectives import EvalContext
from autotune.samplers import is_baseline
from autotune.schedule import OBJECTIVE, SCHEDULE_ATTR, candidate_ks, ranges, tune
from autotune.space.binding import BoundSpace
from autotune.validation import answer
from autotune.workloads import Prompt, workload_digest


def largest_k(space: BoundSpace) -> int | None:
    """The largest draft length the space offers (None: it has no K knob)."""
    highs = [row["high"] for row in space.knobs() if row["key"] == "k" and row["high"]]
    highs += [max(row["choices"]) for row in space.knobs()
              if row["key"] == "k" and row["choices"]]
    return int(max(highs)) if highs else None


def _off(batch_sizes: Sequence[int], method: str, why: str) -> dict[str, Any]:
    """A schedule that never speculates, with the reason (nothing measured)."""
    return {"method": method, "batch_sizes": list(batch_sizes), "objective": OBJECTIVE,
            "ranges": ranges({size: 0 for size in batch_sizes}), "points": [], "notes": [why]}


def run_schedule(study: optuna.Study, objective: Any, context: EvalContext, space: BoundSpace,
                 batch_sizes: Sequence[int], ks: Sequence[int] | None,
                 search_prompts: list[Prompt], held_out: list[Prompt]) -> dict[str, Any]:
    """Tune (or reuse) the schedule of the run's recommended config; stored in the study."""
    chosen = answer(study, objective)
    key = {"batch_sizes": list(batch_sizes), "ks": list(ks) if ks else None,
           "trial": chosen.trial.number if chosen.trial is not None else None,
           "complete_trials": len(ranking.complete(study)),
           "search_sha256": workload_digest(search_prompts),
           "held_out_sha256": workload_digest(held_out) if held_out else None,
           "max_new_tokens": context.max_new_tokens}
    stored = study.user_attrs.get(SCHEDULE_ATTR)
    if isinstance(stored, dict) and stored.get("key") == key:
        return stored
    config = (config_from_mapping(chosen.trial.user_attrs.get("config", {}))
              if chosen.trial is not None and not is_baseline(chosen.trial) else None)
    if config is None or config.method == "none":
        schedule = _off(batch_sizes, "none", "the run's answer is not to speculate at batch "
                        "size 1; no batch size was tuned")
    elif config.is_tree:
        schedule = _off(batch_sizes, config.method, "the answer drafts a tree, which the "
                        "batched decoder does not run; search chains (tree_width=0) for a "
                        "batch-size schedule")
    else:
        print(f"autotune: tuning K per batch size {','.join(map(str, batch_sizes))} for "
              f"trial {chosen.trial.number} ({config.method}) against batched AR",
              file=sys.stderr, flush=True)
        from autotune.batch_measure import measure_batched

        def measure(cfg: Any, prompts: list[Prompt], size: int) -> dict[str, Any]:
            return measure_batched(context.target, cfg, prompts, size, context.max_new_tokens,
                                   context.seed or 0, context.draft).summary()

        schedule = tune(config, batch_sizes, candidate_ks(config, largest_k(space), ks),
                        search_prompts, held_out, measure,
                        progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    schedule["key"] = key
    study.set_user_attr(SCHEDULE_ATTR, schedule)
    return schedule
