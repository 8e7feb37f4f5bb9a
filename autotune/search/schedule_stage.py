"""The schedule stage of a search run: tune the recommended config's K per batch size
(`autotune.search.schedule`) once the search and its validation are done, and keep the result
in the study so that `best.json` carries it and a rerun re-measures nothing."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

import optuna

from autotune.records.summary import MeasurementSummary
from autotune.schema.config import DecodeConfig
from autotune.schema.methods import get_method
from autotune.records import ranking
from autotune.search.finalists import answer
from autotune.search.objectives import EvalContext
from autotune.search.samplers import is_baseline
from autotune.records.trial import TrialRecord
from autotune.frozen.record import ScheduleDocument
from autotune.search.schedule import (
    OBJECTIVE,
    Predict,
    ScheduleKey,
    candidate_ks,
    ranges,
    store_schedule,
    stored_schedule,
    tune,
)
from autotune.space.binding import BoundSpace
from autotune.workloads.prompts import Prompt, workload_digest


def largest_k(space: BoundSpace) -> int | None:
    """The largest draft length the space offers (None: it has no K knob)."""
    highs = [row["high"] for row in space.knobs() if row["key"] == "k" and row["high"]]
    highs += [max(row["choices"]) for row in space.knobs()
              if row["key"] == "k" and row["choices"]]
    return int(max(highs)) if highs else None


def _off(batch_sizes: Sequence[int], method: str, why: str) -> ScheduleDocument:
    """A schedule that never speculates, with the reason (nothing measured)."""
    return ScheduleDocument(method=method, batch_sizes=list(batch_sizes), objective=OBJECTIVE,
                            ranges=ranges({size: 0 for size in batch_sizes}), points=[],
                            notes=[why])


def _batch_profile(run_dir: Path, target: Any, batch_sizes: Sequence[int], widths: Sequence[int],
                   context_tokens: int) -> dict[str, Any]:
    """The batch x tokens-per-row profile of the run folder's hardware_profile.json when it
    covers these sizes, else measured now and added to that file."""
    from autotune.measure.profile import (
        PROFILE_FILE,
        batch_forward_profile,
        save_run_profile,
    )

    path = run_dir / PROFILE_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    batch = doc.get("batch")
    if isinstance(batch, dict) and batch.get("model") == target.name:
        have = {(p["batch_size"], p["tokens"]) for p in batch.get("batch_points", [])}
        if all((b, n) in have for b in batch_sizes for n in widths):
            return batch
    print(f"autotune: profiling the batched verify pass for batch sizes "
          f"{','.join(map(str, batch_sizes))} x {widths[0]}..{widths[-1]} tokens per row",
          file=sys.stderr, flush=True)
    batch = batch_forward_profile(target, batch_sizes, widths, context_tokens, repeats=2)
    if doc.get("points"):
        doc["batch"] = batch
        save_run_profile(run_dir, doc)
    return batch


def _replay_screen(context: EvalContext, run_dir: Path, batch_sizes: Sequence[int],
                   ks: Sequence[int]) -> Predict:
    """Predicted speedup at (config, B) by the replay tier (None where it cannot predict
    the config): exact per-row acceptance, the batch profile's pass costs."""
    from autotune.replay import replay_refusal
    from autotune.replay.batch import BatchCost, predict_batched
    from autotune.search.evaluation import replayer

    rep = replayer(context)
    # Passes are profiled after as many cached tokens as a typical round of these prompts.
    context_tokens = int(statistics.median(len(r.prompt) + len(r.tokens) // 2
                                           for r in rep.references))
    profile = _batch_profile(run_dir, context.target, sorted({1, *batch_sizes}),
                             list(range(1, max(ks) + 2)), context_tokens)
    cost = BatchCost(profile["batch_points"], rep.parts.target_curve)

    def predict(config: Any, size: int) -> float | None:
        if not config.greedy or replay_refusal(config) is not None:
            return None
        return predict_batched(rep, cost, config, size)["speedup"]
    return predict


def run_schedule(study: optuna.Study, objective: Any, context: EvalContext, space: BoundSpace,
                 batch_sizes: Sequence[int], ks: Sequence[int] | None,
                 search_prompts: list[Prompt], held_out: list[Prompt],
                 run_dir: Path | None = None) -> ScheduleDocument:
    """Tune (or reuse) the schedule of the run's recommended config; stored in the study.
    With `run_dir` (a search whose fidelity replays) the replay tier screens the K
    values at each batch size first and only the most promising are measured."""
    chosen = answer(study, objective)
    key = ScheduleKey(batch_sizes=list(batch_sizes), ks=list(ks) if ks else None,
                      trial=chosen.trial.number if chosen.trial is not None else None,
                      complete_trials=len(ranking.complete(study)),
                      search_sha256=workload_digest(search_prompts),
                      held_out_sha256=workload_digest(held_out) if held_out else None,
                      max_new_tokens=context.max_new_tokens)
    stored = stored_schedule(study)
    if stored is not None and stored[0] == key:
        return stored[1]
    config = (TrialRecord.of(chosen.trial).config or DecodeConfig()
              if chosen.trial is not None and not is_baseline(chosen.trial) else None)
    if config is None or config.method == "none":
        schedule = _off(batch_sizes, "none", "the run's answer is not to speculate at batch "
                        "size 1; no batch size was tuned")
    elif config.is_tree or get_method(config.method).own_trees:
        schedule = _off(batch_sizes, config.method, "the answer drafts a tree, which the "
                        "batched decoder does not run; search chains (tree_width=0, a "
                        "chain-drafting method) for a batch-size schedule")
    else:
        print(f"autotune: tuning K per batch size {','.join(map(str, batch_sizes))} for "
              f"trial {chosen.trial.number} ({config.method}) against batched AR",
              file=sys.stderr, flush=True)
        from autotune.measure.batched import measure_batched

        def measure(cfg: DecodeConfig, prompts: list[Prompt], size: int) -> MeasurementSummary:
            return measure_batched(context.target, cfg, prompts, size, context.max_new_tokens,
                                   context.seed or 0, context.draft).record()

        candidates = candidate_ks(config, largest_k(space), ks)
        predict = (_replay_screen(context, run_dir, batch_sizes, candidates)
                   if run_dir is not None and config.greedy else None)
        schedule = tune(config, batch_sizes, candidates, search_prompts, held_out, measure,
                        predict,
                        progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    store_schedule(study, schedule, key)
    return schedule
