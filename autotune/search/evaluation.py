"""Evaluating a candidate under an objective: DecodeConfig -> MeasurementSummary.

Timed metrics go through `autotune.measure.measurement.measure_arms` (objectives never time anything
themselves), the prompts `repeats` times with each prompt's repeats pooled; `agreement` goes through one
teacher-forced pass per prompt (`autotune.measure.agreement`), which decodes nothing. Kept apart
from `objectives.py`, which only reads objective files, so that reading one loads no
model library.
"""

from __future__ import annotations

import json
from typing import Any

from autotune.schema.config import DecodeConfig
from autotune.decoding.prefill import PrefillMemo
from autotune.decoding.reference import reference_continuations
from autotune.measure.agreement import teacher_forced_agreement
from autotune.measure.measurement import measure_arms
from autotune.measure.results import Measurement, PromptRun
from autotune.records.summary import MeasurementSummary
from autotune.search.objectives import EvalContext, Objective, Report, is_defined
from autotune.workloads.prompts import encode_prompt

__all__ = ["evaluate", "reference_sequences", "replayer"]


def evaluate(objective: Objective, ctx: EvalContext, config: DecodeConfig,
             report: Report | None = None) -> MeasurementSummary:
    """The figures of `config` under `objective`: timed metrics (the prompts measured
    `objective.repeats` times against the AR baseline, `report(step, value)` after each
    prompt for the pruner), `agreement`, or both."""
    first = objective.metrics[0]
    single = report if not objective.multi else None
    result = MeasurementSummary()
    if objective.needs_timing and ctx.fidelity == "replay":
        # A sampler proposes the same point again and again once it converges: a point
        # replayed before costs a dictionary lookup (predictions are deterministic, and
        # a summary is a frozen record).
        seen: dict[str, MeasurementSummary] = ctx.memo.setdefault("replayed", {})
        key = json.dumps(config.to_dict(), sort_keys=True)
        if key not in seen:
            seen[key] = MeasurementSummary.from_json(replayer(ctx).summary(config))
        result = seen[key]
    elif objective.needs_timing:
        result = _timed(objective, ctx, config, single if first != "agreement" else None)
    if objective.needs_agreement:
        agreement, positions = _agreement(ctx, config, single if first == "agreement" else None)
        result = result.with_figures(agreement=agreement, agreement_positions=positions)
        if result.config is None:
            result = result.with_figures(config=config.to_dict())
    return result


def _timed(objective: Objective, ctx: EvalContext, config: DecodeConfig,
           report: Report | None) -> MeasurementSummary:
    """One measurement over `repeats` passes of the prompts, pooled (each prompt's
    repeats summed), never a pick among repeats."""
    metric = objective.metrics[0]
    n_prompts = len(ctx.prompts)

    def on_prompt(index: int, repeat: int, runs: dict[str, PromptRun],
                  so_far: dict[str, Measurement]) -> None:
        if report is None:
            return
        value = so_far["candidate"].record().figure(metric)
        if is_defined(value):
            report(repeat * n_prompts + index, float(value))

    measured = measure_arms(ctx.target, {"candidate": config}, ctx.prompts,
                            ctx.max_new_tokens, repeats=objective.repeats, seed=ctx.seed,
                            draft=ctx.draft, on_prompt=on_prompt,
                            backend=ctx.backend, prefills=_trial_prefills(ctx))["candidate"]
    return measured.record().with_figures(repeats=objective.repeats, fidelity="measure")


def _trial_prefills(ctx: EvalContext) -> PrefillMemo:
    """The search's prefill memo: every trial measures the same prompts, so each prompt's
    prefill is timed once (by the first trial's first arm) and copied by every later
    trial. All of them kept on the CPU; on an accelerator only the latest prompt's, as
    in any measurement: kept caches would count in every arm's allocator peak."""
    memo = ctx.memo.get("prefills")
    if memo is None:
        keep = len(ctx.prompts) if ctx.target.device.type == "cpu" else 1
        memo = ctx.memo["prefills"] = PrefillMemo(capacity=keep)
    return memo


def _agreement(ctx: EvalContext, config: DecodeConfig,
               report: Report | None) -> tuple[float | None, int]:
    """The share of the target's greedy tokens the draft agrees with, teacher-forced
    (None without a position), and the positions it covers."""
    agreements = positions = 0
    for index, sequence in enumerate(reference_sequences(ctx)):
        a, p = teacher_forced_agreement(ctx.target, config, [sequence], ctx.draft)
        agreements, positions = agreements + a, positions + p
        if report is not None and positions:
            report(index, agreements / positions)
    return (agreements / positions if positions else None), positions


def replayer(ctx: EvalContext, parts_effort: Any = None) -> Any:
    """The search's `Replayer` (references and cost parts made once, in `ctx.memo`; the
    parts measured at `parts_effort`, a `replay.effort.PartsEffort`, full when None)."""
    from pathlib import Path

    from autotune.replay import PARTS_FILE
    from autotune.replay.effort import FULL
    from autotune.replay.reference import cache_dir
    from autotune.replay.run import Replayer

    if "replayer" not in ctx.memo:
        parts = Path(ctx.replay_parts) if ctx.replay_parts else cache_dir() / PARTS_FILE
        ctx.memo["replayer"] = Replayer(ctx.target, ctx.draft, ctx.prompts,
                                        ctx.max_new_tokens, parts,
                                        parts_effort=parts_effort or FULL)
    return ctx.memo["replayer"]


def reference_sequences(ctx: EvalContext) -> list[tuple[int, list[int]]]:
    """(prompt length, prompt + the target's greedy continuation) per prompt of `ctx`,
    computed once per search and kept in `ctx.memo`."""
    key = f"agreement.reference/{ctx.max_new_tokens}"
    if key not in ctx.memo:
        ids = [encode_prompt(ctx.target.tokenizer, p) for p in ctx.prompts]
        continuations = reference_continuations(ctx.target, ids, ctx.max_new_tokens)
        ctx.memo[key] = [(len(p), p + c) for p, c in zip(ids, continuations)]
    return ctx.memo[key]
