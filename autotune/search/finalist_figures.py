"""A finalist's validation figures from its measured runs, kept as plain rows.

A race measures the held-out sample in looks, and a rerun may resume it; so each run of
a finalist is kept in the validation record as one row of numbers (`Row`), and every
figure (the speedup and its interval, prediction-powered where the replay tier predicts
the finalist; τ, α, ms per token, losslessness, the categories) is computed from the
rows, the same way for a fresh race and a resumed one.

Torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.common.interval import CI_KEY, Interval
from autotune.measure import paired, ppi
from autotune.measure.divergence import Kind
from autotune.measure.paired import PromptPair
from autotune.records.validation import POOLED_FIGURES, FinalistFigures

if TYPE_CHECKING:
    from autotune.measure.results import PromptRun

__all__ = ["ROW_FIELDS", "figures", "row_of"]

# One measured run (a prompt, one repeat) of a finalist against its paired baseline run.
ROW_FIELDS = ("prompt_id", "category", "baseline_s", "baseline_tokens", "candidate_s",
              "candidate_tokens", "rounds", "emitted", "drafted", "accepted", "same_tokens")
# `same_tokens` holds the run's lossless verdict as a code. 1 and 0 keep what they meant
# in rows written before near-ties were told apart (same tokens / not: a failure); a
# difference the dtype's rounding explains is 2.
VERDICT_CODE: dict[Kind, int] = {Kind.EXACT: 1, Kind.REAL: 0, Kind.NEAR_TIE: 2}
CODE_VERDICT: dict[int, Kind] = {code: kind for kind, code in VERDICT_CODE.items()}


def row_of(run: PromptRun) -> list[Any]:
    """`run` as a row of `ROW_FIELDS` (JSON-ready)."""
    pair = run.pair()
    rounds = run.candidate.rounds
    return [pair.prompt_id, pair.category, pair.baseline_s, pair.baseline_tokens,
            pair.candidate_s, pair.candidate_tokens, pair.rounds, pair.emitted,
            sum(t.drafted for t in rounds), sum(t.accepted for t in rounds),
            VERDICT_CODE[run.verdict().kind]]


def _pairs(rows: list[list[Any]]) -> list[PromptPair]:
    return [PromptPair(*row[:8]) for row in rows]


def figures(rows: list[list[Any]], predicted: list[PromptPair] | None, repeats: int,
            level: float, greedy: bool, token_exact: bool) -> FinalistFigures:
    """The figures a finalist carries in the validation record, from its `rows`:
    prediction-powered over the pool `predicted` when given, else from the measured
    rows alone; the interval at `level` (a race's look level)."""
    pairs = _pairs(rows)
    pooled = paired.pool(pairs)
    base_s = sum(p.baseline_s for p in pooled)
    base_t = sum(p.baseline_tokens for p in pooled)
    cand_s = sum(p.candidate_s for p in pooled)
    cand_t = sum(p.candidate_tokens for p in pooled)
    drafted = sum(row[8] for row in rows)
    kinds = [(row[0], CODE_VERDICT.get(int(row[10]), Kind.REAL)) for row in rows]
    named = {kind: list(dict.fromkeys(pid for pid, k in kinds if k is kind)) for kind in Kind}
    common = dict(
        latency_ms_per_token=1000 * cand_s / cand_t if cand_t else None,
        baseline_latency_ms_per_token=1000 * base_s / base_t if base_t else None,
        mean_accepted_tokens=paired.tau(pairs),
        acceptance_rate=sum(row[9] for row in rows) / drafted if drafted else None,
        # Greedy: no run diverged from AR beyond a near-tie (measure/divergence.py).
        lossless=(not named[Kind.REAL]) if greedy else None,
        lossless_binding=token_exact,
        mismatched_prompts=named[Kind.REAL] if greedy else [],
        near_tie_prompts=named[Kind.NEAR_TIE] if greedy else [],
        divergences=({kind.value: sum(1 for _, k in kinds if k is kind) for kind in Kind}
                     if greedy else None),
        look_level=level)
    if predicted:
        estimate = ppi.estimate(pairs, predicted, repeats, level=level)
        written = estimate.to_json()
        return FinalistFigures(
            **common, measured_prompts=estimate.measured, speedup=estimate.speedup,
            interval=Interval.from_json(written[CI_KEY]), estimator=ppi.ESTIMATOR,
            pooled={k: v for k, v in written.items() if k in POOLED_FIGURES},
            by_category=ppi.by_category(pairs, predicted, repeats, level))
    ci = paired.interval(pairs, level)
    return FinalistFigures(
        **common, measured_prompts=len(pooled), speedup=paired.speedup(pairs),
        interval=Interval(*ci) if ci else None, estimator="measured",
        by_category=paired.by_category(pairs, level))
