"""The race's intervals hold their level at the sample sizes a race measures (issue 59).

A simulation of the race's data, through the real `paired.interval` and
`ppi.estimate`: paired per-prompt baseline and candidate decode times over prompts of
varying length (most decode the full `max_new_tokens`, some stop early), per-prompt
speedups log-normal with a spread of 5%, 12% or 30% from prompt to prompt, timing noise
of 3% per run, and a heavy tail: on one prompt in ten speculation is slower by a
further exponential factor (mean 1.5 times the spread, at most 20%), the skew a slow
prompt gives a sum of decode times. The truth is the population's ratio of summed
decode times per token, in closed form. Seeded and vectorised where it can be: a few
hundred draws per case, seconds in all, the same figures on every machine.

The percentile bootstrap these intervals replaced held 66-80% at nominal 90% here
(docs/statistics.md has the table); `MIN_INTERVAL_PROMPTS` is the floor below which
no interval is given.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from autotune.measure import paired, ppi
from autotune.measure.paired import PromptPair

SIZES = (4, 6, 8, 12, 16)
SPREADS = (0.05, 0.12, 0.30)
DRAWS = 400
MEAN_LOG_SPEEDUP = 0.1
HEAVY_SHARE = 0.1
HEAVY_CAP = 0.2
NOISE = 0.03


def _heavy_scale(spread: float) -> float:
    return min(1.5 * spread, HEAVY_CAP)


def race_data(rng: np.random.Generator, draws: int, n: int, spread: float
              ) -> tuple[np.ndarray, np.ndarray, float]:
    """`draws` samples of `n` prompts: (4, draws, n) measured baseline seconds,
    baseline tokens, candidate seconds, candidate tokens; (2, draws, n) the same
    prompts' true baseline and candidate seconds without timing noise or the heavy
    tail (what a good predictor tracks); and the population's speedup."""
    shape = (draws, n)
    tokens = np.where(rng.random(shape) < 0.6, 64, rng.integers(8, 65, size=shape))
    per_token = 0.03 * np.exp(rng.normal(0.0, 0.10, shape))       # prompt length's cost
    log_speedup = MEAN_LOG_SPEEDUP + spread * rng.normal(size=shape)
    heavy = rng.random(shape) < HEAVY_SHARE
    slow = heavy * rng.exponential(_heavy_scale(spread), shape)
    base = tokens * per_token
    smooth = base / np.exp(log_speedup)
    measured = np.stack([
        base * (1 + NOISE * rng.normal(size=shape)), tokens - 1.0,
        smooth * np.exp(slow) * (1 + NOISE * rng.normal(size=shape)), tokens - 1.0])
    # E[1 / speedup]: log-normal, times E[exp(slow)] = 1 / (1 - scale) on the heavy share.
    inverse = np.exp(-MEAN_LOG_SPEEDUP + spread ** 2 / 2) * (
        1 - HEAVY_SHARE + HEAVY_SHARE / (1 - _heavy_scale(spread)))
    return measured, np.stack([base, smooth]), 1.0 / inverse


def _pairs(columns: np.ndarray, draw: int, ids: range) -> list[PromptPair]:
    return [PromptPair(f"p{i}", "c", float(columns[0, draw, j]), int(columns[1, draw, j]),
                       float(columns[2, draw, j]), int(columns[3, draw, j]))
            for j, i in enumerate(ids)]


def paired_coverage(n: int, spread: float, level: float, draws: int = DRAWS,
                    interval: Callable[[list[PromptPair], float],
                                       tuple[float, float] | None] = paired.interval
                    ) -> tuple[float, float]:
    """(coverage, share without an interval) of `interval` at `level` over `draws`
    samples of `n` prompts; a draw without one counts as covering (it claims nothing)."""
    measured, _, truth = race_data(np.random.default_rng(int(1000 * spread) + n), draws, n,
                                   spread)
    hits = none = 0
    for draw in range(draws):
        ci = interval(_pairs(measured, draw, range(n)), level)
        none += ci is None
        hits += ci is None or ci[0] <= truth <= ci[1]
    return hits / draws, none / draws


def ppi_coverage(n: int, spread: float, level: float, draws: int,
                 pool_size: int = 80) -> tuple[float, float]:
    """The same for `ppi.estimate`: a held-out pool of `pool_size` prompts, its first
    `n` measured (a random sample: the prompts are i.i.d.), every pool prompt
    predicted by a model 20% off that tracks each prompt's speedup within 5% but not
    the timing noise or the heavy tail."""
    rng = np.random.default_rng(7000 + int(1000 * spread) + n)
    measured, smooth, truth = race_data(rng, draws, pool_size, spread)
    track = np.exp(0.05 * rng.normal(size=smooth.shape[1:]))
    predicted = np.stack([smooth[0], measured[1], smooth[1] * 1.2 * track, measured[3]])
    hits = none = 0
    for draw in range(draws):
        pool = _pairs(predicted, draw, range(pool_size))
        ci = ppi.estimate(_pairs(measured[..., :n], draw, range(n)), pool, level=level,
                          seed=draw).ci90
        none += ci is None
        hits += ci is None or ci[0] <= truth <= ci[1]
    return hits / draws, none / draws


@pytest.mark.parametrize("n", SIZES)
def test_the_paired_interval_holds_its_level_on_few_prompts(n: int) -> None:
    """At least 88% at a nominal 90%, and 96% at 98% (the race's early looks take
    levels like that), over the three spreads alike (600 and 300 draws each)."""
    for level, floor, draws in ((0.90, 0.88, 600), (0.98, 0.96, 300)):
        coverage = np.mean([paired_coverage(n, spread, level, draws)[0]
                            for spread in SPREADS])
        assert coverage >= floor, (n, level, coverage)


@pytest.mark.parametrize("n", [n for n in SIZES if n >= ppi.MIN_CROSS_FIT])
def test_the_prediction_powered_interval_holds_its_level(n: int) -> None:
    """The same for `ppi.estimate` where it is cross-fitted (from `MIN_CROSS_FIT`
    measured prompts; below it, it is `paired.interval` itself)."""
    for level, floor, draws in ((0.90, 0.88, 200), (0.98, 0.96, 100)):
        coverage = np.mean([ppi_coverage(n, spread, level, draws)[0] for spread in SPREADS])
        assert coverage >= floor, (n, level, coverage)


def test_below_the_floor_there_is_no_interval_never_a_narrower_one() -> None:
    """Fewer than `MIN_INTERVAL_PROMPTS` prompts: None, from both estimators (a
    percentile bootstrap gave 3 prompts an interval that held 50-57%)."""
    measured, smooth, _ = race_data(np.random.default_rng(1), 1, 20, 0.12)
    few = _pairs(measured[..., :paired.MIN_INTERVAL_PROMPTS - 1], 0,
                 range(paired.MIN_INTERVAL_PROMPTS - 1))
    pool = _pairs(np.stack([smooth[0], measured[1], smooth[1], measured[3]]), 0, range(20))
    assert paired.interval(few) is None
    assert ppi.estimate(few, pool).ci90 is None
    assert paired.interval(_pairs(measured[..., :4], 0, range(4))) is not None
    # Below the cross-fit's floor the pool estimate is the measured sample's, interval too.
    six = _pairs(measured[..., :6], 0, range(6))
    assert ppi.estimate(six, pool).ci90 == paired.interval(six)
