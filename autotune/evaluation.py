"""Evaluating a candidate under an objective: DecodeConfig -> metrics dict.

Timed metrics go through `autotune.measure.measure` (objectives never time anything
themselves), `repeats` times, combined by medians; `agreement` goes through one
teacher-forced pass per prompt (`autotune.agreement`), which decodes nothing. Kept apart
from `objectives.py`, which only reads objective files, so that reading one loads no
model library; `Objective.evaluate` calls `evaluate` here.
"""

from __future__ import annotations

import statistics
from typing import Any

from autotune.agreement import reference_continuations, teacher_forced_agreement
from autotune.decoding.config import DecodeConfig
from autotune.measure import Measurement, PromptRun, measure
from autotune.objectives import EvalContext, Objective, Report, is_defined, is_number
from autotune.workloads import encode_prompt

__all__ = ["evaluate", "reference_sequences"]


def evaluate(objective: Objective, ctx: EvalContext, config: DecodeConfig,
             report: Report | None = None) -> dict[str, Any]:
    """`Objective.evaluate` (see there): timed metrics, agreement, or both."""
    first = objective.metrics[0]
    single = report if not objective.multi else None
    result: dict[str, Any] = {}
    if objective.needs_timing:
        result = _timed(objective, ctx, config, single if first != "agreement" else None)
    if objective.needs_agreement:
        result.update(_agreement(ctx, config, single if first == "agreement" else None))
        result.setdefault("config", config.to_dict())
    return result


def _timed(objective: Objective, ctx: EvalContext, config: DecodeConfig,
           report: Report | None) -> dict[str, Any]:
    metric = objective.metrics[0]
    n_prompts = len(ctx.prompts)
    summaries: list[dict[str, Any]] = []
    for repeat in range(objective.repeats):
        done = [s[metric] for s in summaries]

        def on_prompt(index: int, run: PromptRun, so_far: Measurement,
                      done: list[Any] = done, repeat: int = repeat) -> None:
            if report is None:
                return
            partial = so_far.summary()[metric]
            value = _median([*done, partial])
            if is_defined(value):
                report(repeat * n_prompts + index, float(value))

        summaries.append(measure(ctx.target, config, ctx.prompts, ctx.max_new_tokens,
                                 ctx.seed, ctx.draft, on_prompt=on_prompt).summary())
    return _combine(summaries, objective.metrics)


def _agreement(ctx: EvalContext, config: DecodeConfig,
               report: Report | None) -> dict[str, Any]:
    agreements = positions = 0
    for index, sequence in enumerate(reference_sequences(ctx)):
        a, p = teacher_forced_agreement(ctx.target, config, [sequence], ctx.draft)
        agreements, positions = agreements + a, positions + p
        if report is not None and positions:
            report(index, agreements / positions)
    return {"agreement": agreements / positions if positions else None,
            "agreement_positions": positions}


def reference_sequences(ctx: EvalContext) -> list[tuple[int, list[int]]]:
    """(prompt length, prompt + the target's greedy continuation) per prompt of `ctx`,
    computed once per search and kept in `ctx.memo`."""
    key = f"agreement.reference/{ctx.max_new_tokens}"
    if key not in ctx.memo:
        ids = [encode_prompt(ctx.target.tokenizer, p) for p in ctx.prompts]
        continuations = reference_continuations(ctx.target, ids, ctx.max_new_tokens)
        ctx.memo[key] = [(len(p), p + c) for p, c in zip(ids, continuations)]
    return ctx.memo[key]


def _median(values: list[Any]) -> Any:
    """Median of the defined values (None if there are none)."""
    defined = [v for v in values if is_defined(v)]
    return statistics.median(defined) if defined else None


def _combine(summaries: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    """One summary from several repeats: medians of numeric values, the rest from the
    last repeat; a repeat that was not lossless makes the whole not lossless."""
    out = dict(summaries[-1])
    if len(summaries) == 1:
        return out
    for key, value in out.items():
        values = [s.get(key) for s in summaries]
        # Equal values stay as they are (an int count stays an int).
        if (any(is_defined(v) for v in values) and (value is None or is_number(value))
                and len(set(values)) > 1):
            out[key] = _median(values)
    if any(s.get("lossless") is False for s in summaries):
        out["lossless"] = False
        out["mismatched_prompts"] = sorted({p for s in summaries
                                            for p in s.get("mismatched_prompts", [])})
    out["repeats"] = len(summaries)
    out["repeat_values"] = {m: [s.get(m) for s in summaries] for m in metrics if m in out}
    return out
