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

The interval: Fieller's, widened for skew (`ratio_interval`): the speedups rho that a
t-test over prompts does not reject, a prompt and all its repeats one unit. It replaced a
percentile bootstrap that held its nominal 90% only 66-80% of the time on 4-16 prompts
(issue 59; `tests/test_interval_coverage.py`, docs/statistics.md). Below
`MIN_INTERVAL_PROMPTS` prompts, or where the test rejects no bounded set, there is no
interval (None), never a narrower one.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from autotune.common.interval import CI_KEY

__all__ = ["INTERVAL_LEVEL", "INTERVAL_METHOD", "MIN_INTERVAL_PROMPTS", "ErrorSource",
           "PromptPair",
           "by_category", "interval", "pool", "ratio_interval", "speedup"]

INTERVAL_LEVEL = 0.90
INTERVAL_METHOD = ("Fieller's interval (a t-test over prompts inverted), widened on the side "
                   "the sample's skew says")
# The fewest measured prompts an interval is given for. From 4 on, the interval held its
# level (90% and 98%) in `tests/test_interval_coverage.py`'s simulation of the race's
# data; on 2-3 prompts a one-in-ten slow prompt is usually not in the sample and the
# sample's skew (what widens the interval towards it) cannot be estimated at all. A
# budget sizes the race's measured sample from it.
MIN_INTERVAL_PROMPTS = 4


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


def interval(pairs: Sequence[PromptPair], level: float = INTERVAL_LEVEL
             ) -> tuple[float, float] | None:
    """The `level` interval of `speedup` over prompts (each prompt, with its pooled
    repeats, one unit): `ratio_interval` over the prompts' sums. None below
    `MIN_INTERVAL_PROMPTS` prompts, or where no bounded interval holds the level (the
    candidate's time is not told apart from 0: far too few prompts for their spread)."""
    units = pool(pairs)
    n = len(units)
    if n < MIN_INTERVAL_PROMPTS:
        return None
    data = _arrays(units)                                   # (4, n)
    means = data.mean(axis=1)
    residuals = data - means[:, None]
    return ratio_interval(means, [ErrorSource(residuals, 1.0 / (n * (n - 1)), n - 1)], level)


@functools.lru_cache(maxsize=256)
def _quantiles(level: float, df: float) -> tuple[float, float]:
    """Student's t (at `df`) and the normal quantile of a two-sided `level` (cached: a
    race asks for a few levels many times, and scipy's quantiles are slow)."""
    return (float(student_t.ppf(0.5 + level / 2, df)), float(norm.ppf(0.5 + level / 2)))


@dataclass(frozen=True)
class ErrorSource:
    """One independent source of a ratio estimate's error (`ratio_interval`).

    `residuals`: (4, ..., k) each unit's centred contribution to the four means
    (baseline seconds, baseline tokens, candidate seconds, candidate tokens), a unit a
    measured prompt or a predicted pool prompt; `weight`: broadcastable to (..., k),
    such that the means' covariance from this source is `sum(weight * e_a * e_b)` over
    the last axis (averaged over any middle axes, e.g. the halvings of a cross-fitted
    estimate: the mean of their variances bounds the variance of their mean); `df` the
    degrees of freedom of that variance; `measured`: its units were measured (their
    skew is the sample's)."""

    residuals: np.ndarray
    weight: float | np.ndarray
    df: int
    measured: bool = True


def ratio_interval(means: np.ndarray, sources: Sequence[ErrorSource], level: float
                   ) -> tuple[float, float] | None:
    """Fieller's interval for the statistic `(m0 / m1) / (m2 / m3)` of four estimated
    means `means` (4,), widened for skew; None where it is unbounded. `sources`: the
    estimate's independent sources of error (`ErrorSource`); Student's t on the fewest
    degrees of freedom among them.

    Why this interval: the statistic is a ratio, rho = E[b_s] / (kappa E[c_s]) with
    kappa = E[b_t] / E[c_t]. For a trial rho, g(rho) = m0 - rho * kappa * m2 has mean 0
    exactly when rho is the truth, and it is a mean over prompts; the interval is the
    set of rho a t-test of g(rho) = 0 (its variance from the linearised residuals
    P - rho Q, evaluated at that rho) does not reject: a quadratic inequality in rho,
    solved in closed form. Unlike a t interval around the estimate (the delta method),
    the variance follows rho, so a sample whose spread grows with its ratio is not
    read as precise; unlike a bootstrap it is not narrowed by the few distinct
    resamples of 4-8 prompts. The t statistic of a skewed mean is itself skewed (its
    quantiles shift by gamma (2 z^2 + 1) / (6 sqrt n), Cornish-Fisher, gamma the measured
    residuals' skewness): the bound on the side the skew points to is moved out by that
    much and the other kept (never narrowed: a skew estimated from a few prompts is
    noisy). A prompt on which speculation is much slower (a heavy tail of candidate
    time) is what it guards against: there, the lower bound.
    """
    m0, m1, m2, m3 = (float(v) for v in means)
    if not all(np.isfinite(v) and v > 0 for v in (m0, m1, m2, m3)):
        return None
    kappa, per_token = m1 / m3, m2 / m3
    a_stat, b_stat = m0, kappa * m2                          # g(rho) = a_stat - rho b_stat
    estimate = a_stat / b_stat
    s_pp = s_pq = s_qq = 0.0
    parts: list[tuple[float, int]] = []                     # (variance at rho-hat, df)
    measured: list[np.ndarray] = []
    for source in sources:
        e, weight = source.residuals, source.weight
        p = e[0]
        q = per_token * e[1] - kappa * per_token * e[3] + kappa * e[2]
        s_pp += float(np.mean((weight * p * p).sum(axis=-1)))
        s_pq += float(np.mean((weight * p * q).sum(axis=-1)))
        s_qq += float(np.mean((weight * q * q).sum(axis=-1)))
        d = p - estimate * q
        parts.append((float(np.mean((weight * d * d).sum(axis=-1))), max(source.df, 1)))
        if source.measured:
            measured.append(d)
    # Student's t on the fewest degrees of freedom among the sources that carry any
    # variance (Welch-Satterthwaite's lower end: a source whose spread hangs on one
    # far prompt has little more than its own).
    carrying = [df for v, df in parts if v > 0] or [df for _, df in parts]
    df = float(min(carrying))
    skew, units = 0.0, 1
    if measured:
        d = np.concatenate(measured, axis=-1)
        second = (d * d).mean(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            gamma = np.where(second > 0, (d ** 3).mean(axis=-1) / second ** 1.5, 0.0)
        skew, units = float(np.mean(gamma)), d.shape[-1]
    quantile, normal = _quantiles(level, round(df, 1))
    shift = skew * (2 * normal ** 2 + 1) / (6 * np.sqrt(units))
    upper_q = max(quantile - shift, quantile)     # g / se at the lower bound of rho
    lower_q = min(-quantile - shift, -quantile)   # and at the upper bound

    def roots(q: float) -> tuple[float, float] | None:
        q2 = q * q
        a = b_stat * b_stat - q2 * s_qq
        if a <= 0:
            return None            # the t-test rejects no bounded set of rho
        b = a_stat * b_stat - q2 * s_pq
        c = a_stat * a_stat - q2 * s_pp
        root = float(np.sqrt(max(b * b - a * c, 0.0)))
        return (b - root) / a, (b + root) / a

    low_side, high_side = roots(upper_q), roots(lower_q)
    if low_side is None or high_side is None:
        return None
    # A lower root at or below 0: no speedup above 0 is ruled out.
    return float(max(low_side[0], 0.0)), float(high_side[1])


def tau(pairs: Sequence[PromptPair]) -> float | None:
    """Tokens appended per draft/verify round (after the EOS cut)."""
    rounds = sum(p.rounds for p in pairs)
    return sum(p.emitted for p in pairs) / rounds if rounds else None


def by_category(pairs: Sequence[PromptPair], level: float = INTERVAL_LEVEL
                ) -> dict[str, dict[str, object]]:
    """Per category (in first-seen order): speedup, its interval (None below
    `MIN_INTERVAL_PROMPTS` prompts), τ and the number of prompts."""
    groups: dict[str, list[PromptPair]] = {}
    for p in pool(pairs):
        groups.setdefault(p.category, []).append(p)
    out: dict[str, dict[str, object]] = {}
    for category, members in groups.items():
        ci = interval(members, level)
        out[category] = {"speedup": speedup(members), CI_KEY: list(ci) if ci else None,
                         "mean_accepted_tokens": tau(members), "prompts": len(members)}
    return out
