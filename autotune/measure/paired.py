"""The paired speedup statistic, its bootstrap interval and its split by category.

Torch-free arithmetic over per-prompt decode times, shared by `measure` (every trial's
`speedup`), the finalists' validation and the report, so that the figure a search
ranks, the figure `best.json` records and the figure the report shows are one statistic.

The statistic: the AR baseline's decode time per generated token divided by the
candidate's, both summed over the same prompts (runs interleaved prompt by prompt in one
process; repeats of a prompt pooled by summing). Why a ratio of sums and not the median
of per-prompt ratios:
- it is the change of the workload's total decode time, the figure a deployment sees;
- every generated token weighs the same, so a prompt that stops after three tokens (a
  ratio of two tiny, noisy times) does not count as much as one that decodes 64;
- it does not hide a category where speculation is slower behind a median taken over
  the others.
Pairing still protects it from a shared machine's drifts: each prompt's baseline and
candidate runs are seconds apart and alternate which goes first.

The interval: a percentile bootstrap over prompts (a prompt and all its repeats are one
unit, resampled whole), seeded, so the same data give the same interval.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from autotune.common.interval import CI_KEY

__all__ = ["INTERVAL_LEVEL", "PromptPair", "by_category", "interval", "pool", "speedup"]

INTERVAL_LEVEL = 0.90
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class PromptPair:
    """One prompt's paired figures (several repeats of a prompt pool into one).

    `*_s` are decode seconds (prefill excluded), `*_tokens` the tokens those seconds
    produced (generated tokens minus the prefill's first), `rounds` / `emitted` the
    candidate's draft/verify rounds and the tokens they appended (after the EOS cut).
    """

    prompt_id: str
    category: str
    baseline_s: float
    baseline_tokens: int
    candidate_s: float
    candidate_tokens: int
    rounds: int = 0
    emitted: int = 0


def pool(pairs: Iterable[PromptPair]) -> list[PromptPair]:
    """Sum the repeats of each prompt into one pair, in first-seen prompt order."""
    pooled: dict[str, PromptPair] = {}
    for p in pairs:
        q = pooled.get(p.prompt_id)
        pooled[p.prompt_id] = p if q is None else PromptPair(
            p.prompt_id, p.category, q.baseline_s + p.baseline_s,
            q.baseline_tokens + p.baseline_tokens, q.candidate_s + p.candidate_s,
            q.candidate_tokens + p.candidate_tokens, q.rounds + p.rounds, q.emitted + p.emitted)
    return list(pooled.values())


def _arrays(pairs: Sequence[PromptPair]) -> np.ndarray:
    """(4, n): baseline seconds, baseline tokens, candidate seconds, candidate tokens."""
    return np.array([[p.baseline_s, p.baseline_tokens, p.candidate_s, p.candidate_tokens]
                     for p in pairs], dtype=np.float64).T.reshape(4, len(pairs))


def _ratio(columns: np.ndarray) -> np.ndarray:
    """The statistic over the last axis of (4, ..., n) sums; NaN where undefined."""
    base_s, base_t, cand_s, cand_t = columns.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = (base_s / base_t) / (cand_s / cand_t)
    return np.where(np.isfinite(value) & (value > 0), value, np.nan)


def speedup(pairs: Sequence[PromptPair]) -> float | None:
    """AR decode time per token / candidate decode time per token, summed over `pairs`
    (None when either side decoded nothing)."""
    if not pairs:
        return None
    value = float(_ratio(_arrays(pool(pairs))))
    return None if np.isnan(value) else value


def interval(pairs: Sequence[PromptPair], level: float = INTERVAL_LEVEL,
             resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `speedup` over prompts (each prompt, with its
    pooled repeats, resampled whole). None for fewer than two prompts: one prompt says
    nothing about the spread over prompts."""
    units = pool(pairs)
    if len(units) < 2:
        return None
    data = _arrays(units)                                   # (4, n)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(units), size=(resamples, len(units)))
    values = _ratio(data[:, picks])                         # (resamples,)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return None
    tail = (1.0 - level) / 2
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def tau(pairs: Sequence[PromptPair]) -> float | None:
    """Tokens appended per draft/verify round (after the EOS cut)."""
    rounds = sum(p.rounds for p in pairs)
    return sum(p.emitted for p in pairs) / rounds if rounds else None


def by_category(pairs: Sequence[PromptPair], level: float = INTERVAL_LEVEL,
                seed: int = 0) -> dict[str, dict[str, object]]:
    """Per category (in first-seen order): speedup, its interval (None below two
    prompts), τ and the number of prompts."""
    groups: dict[str, list[PromptPair]] = {}
    for p in pool(pairs):
        groups.setdefault(p.category, []).append(p)
    out: dict[str, dict[str, object]] = {}
    for category, members in groups.items():
        ci = interval(members, level, seed=seed)
        out[category] = {"speedup": speedup(members), CI_KEY: list(ci) if ci else None,
                         "mean_accepted_tokens": tau(members), "prompts": len(members)}
    return out
