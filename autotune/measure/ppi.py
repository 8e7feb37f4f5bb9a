"""Prediction-powered inference of the paired speedup over a held-out pool.

The validation measures a random sample of `n` prompts from a held-out pool of `N`, and
the replay tier predicts every pool prompt's decode times for free. Prediction-powered
inference (Angelopoulos et al., "Prediction-powered inference", Science 2023) combines
the two: the predictions carry the breadth of the pool, and the measured sample corrects
their bias. Its power-tuned form (PPI++, Angelopoulos, Duchi and Zrnic 2023) weighs the
predictions by `lam` in [0, 1], chosen from the data to minimise the variance:
`lam = 0` is the classical estimate from the measured sample alone, so a useless
predictor costs (almost) nothing and a good one narrows the interval.

The statistic is `autotune.measure.paired`'s: the AR baseline's decode time per token
over the candidate's, each summed over the prompts. It is a smooth function of four
means (baseline seconds and tokens, candidate seconds and tokens per prompt), each
estimated as

    lam * mean_rest(f) + mean_sample(y - lam * f)

(`y` measured, `f` predicted, the sample a simple random sample of the pool and `rest`
the pool's other prompts). Cross-fitted (Zrnic and Candes, "Cross-prediction-powered
inference", 2024): the sample is halved, and each half is corrected with a predictor
fitted on the other half (the cost model's seconds rescaled to the measured ones, and
PPI++'s `lam` for the statistic's linearisation), so the estimate stays unbiased
whatever the predictions are. Fitting `lam` on the prompts it corrects, as plain PPI++
does, biased the estimate by 2% and cost 8 points of coverage at 16 measured prompts
in `tests/test_ppi.py`'s simulation.

The interval is `paired.ratio_interval`'s (Fieller's, widened for skew) over the
estimate's two independent sources of error: the measured prompts' corrected figures
(`y - lam * f`, their spread taken within each half, as each half is corrected by its
own fit) and the pool's other prompts' predictions (the pool is a sample too). It
replaced a percentile bootstrap of the whole procedure (Zrnic 2024), which covered 82-86%
at nominal 90% on 8-16 measured prompts (issue 59; `tests/test_interval_coverage.py`).
It stays valid however wrong the predictions are; it only narrows when they track the
measured figures prompt by prompt.

Per category (`by_category`), the few measured prompts of a category correct its pool
prompts with a predictor fitted on the other categories' measured prompts, and the
interval is the delta method's with Student's t (a bootstrap over 2-4 prompts is too
narrow); a category with fewer than two measured prompts shows its prediction alone,
marked as such, with no interval.

Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from autotune.common.interval import CI_KEY
from autotune.measure import paired
from autotune.measure.paired import PromptPair

__all__ = ["ESTIMATOR", "PoolEstimate", "by_category", "estimate"]

ESTIMATOR = "ppi++"
# A category's figure is corrected by at least this many of its own measured prompts
# (an interval needs two); below it, it is the predictions alone, marked as such.
MIN_MEASURED = 2


@dataclass(frozen=True)
class PoolEstimate:
    """The speedup over a pool from its predictions and a measured sample of it.

    `speedup` and `ci90` are the prediction-powered figures (`ci90` None below two
    measured prompts); `lam` the predictions' weight (0: the measured sample alone);
    `measured` / `pool` the sample and pool sizes; `measured_speedup` /
    `measured_ci90` the classical figures of the sample alone; `predicted_speedup` the
    predictions alone over the pool (biased as the predictor is: for comparison only).
    """

    speedup: float | None
    ci90: tuple[float, float] | None
    lam: float
    measured: int
    pool: int
    measured_speedup: float | None
    measured_ci90: tuple[float, float] | None
    predicted_speedup: float | None

    def to_json(self) -> dict[str, object]:
        return {"speedup": self.speedup, CI_KEY: list(self.ci90) if self.ci90 else None,
                "estimator": ESTIMATOR, "ppi_lambda": self.lam, "measured_prompts": self.measured,
                "pool_prompts": self.pool, "measured_speedup": self.measured_speedup,
                "measured_ci90": list(self.measured_ci90) if self.measured_ci90 else None,
                "predicted_speedup": self.predicted_speedup}


def _columns(pairs: Sequence[PromptPair], scale: float = 1.0) -> np.ndarray:
    """(4, n): baseline seconds, baseline tokens, candidate seconds, candidate tokens."""
    return np.array([[p.baseline_s, p.baseline_tokens, p.candidate_s, p.candidate_tokens]
                     for p in pairs], dtype=np.float64).T.reshape(4, len(pairs)) * scale


def _ratio(means: np.ndarray) -> np.ndarray:
    """The statistic from (4, ...) means; NaN where undefined."""
    base_s, base_t, cand_s, cand_t = means
    with np.errstate(divide="ignore", invalid="ignore"):
        value = (base_s / base_t) / (cand_s / cand_t)
    return np.where(np.isfinite(value) & (value > 0), value, np.nan)


def _fit(yt: np.ndarray, ft: np.ndarray, corrected: int, m: int
         ) -> tuple[np.ndarray, np.ndarray]:
    """The predictor fitted on measured prompts `yt` / `ft` (4, B, t), for correcting
    `corrected` other measured prompts beside `m` predicted ones: the predictions'
    seconds rescaled to the measured seconds (a cost model 20% off in one arm is
    calibrated, not just down-weighted), and PPI++'s variance-minimising weight for the
    statistic's linearisation (g the gradient of log speedup, z = g.y, h = g.f:
    lam = Cov(z, h) / ((1 + corrected/m) Var(h)), clipped to [0, 1]; 0 is the
    classical estimate). Returns the (4, B, 1) scale and the (B,) weight."""
    scale = np.ones((4, yt.shape[1], 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in (0, 2):                           # the seconds columns
            ratio = yt[k].sum(axis=-1) / ft[k].sum(axis=-1)
            scale[k, :, 0] = np.where(np.isfinite(ratio) & (ratio > 0), ratio, 1.0)
        centre = yt.mean(axis=-1)                                       # (4, B)
        gradient = np.stack([1 / centre[0], -1 / centre[1], -1 / centre[2],
                             1 / centre[3]])                             # (4, B)
        z = np.einsum("kb,kbn->bn", gradient, yt)
        h = np.einsum("kb,kbn->bn", gradient, scale * ft)
        # Covariance and variance over the same prompts: their ratio is the regression
        # slope of z on h, steady where either alone swings with the sample's spread.
        dz = z - z.mean(axis=-1, keepdims=True)
        dh = h - h.mean(axis=-1, keepdims=True)
        lam = (dz * dh).sum(axis=-1) / ((1 + corrected / max(m, 1)) * (dh * dh).sum(axis=-1))
    return scale, np.where(np.isfinite(lam), np.clip(lam, 0.0, 1.0), 0.0)


def _corrected(y: np.ndarray, fs: np.ndarray, fp: np.ndarray, scale: np.ndarray,
               lam: np.ndarray) -> np.ndarray:
    """lam * mean(scaled predictions of the others) + mean(y - lam * scaled f): the
    (4, B) prediction-powered means from (4, B, n) measured, (4, B, M) predicted."""
    rectifier = (y - lam[None, :, None] * scale * fs).mean(axis=-1)
    return lam[None, :] * (scale[..., 0] * fp.mean(axis=-1)) + rectifier


@dataclass(frozen=True)
class _Folds:
    """Cross-fitted prediction-powered means for B halvings at once, with what their
    variance is read from: `means` (4, B) and `lams` (B,) the halves' mean weight;
    `corrected` (4, B, n) each measured prompt's `y - lam * scale * f` under its own
    half's fit, `predicted` (4, B, M) each other pool prompt's weighted, scaled
    prediction (the means are their means plus the corrected prompts' mean)."""

    means: np.ndarray
    lams: np.ndarray
    corrected: np.ndarray
    predicted: np.ndarray
    halves: tuple[np.ndarray, np.ndarray]


def _fold_means(y: np.ndarray, fs: np.ndarray, fp: np.ndarray) -> _Folds:
    """Cross-fitted prediction-powered means of the four columns.

    `y`, `fs`: (4, B, n) measured and predicted figures of the measured prompts, `fp`:
    (4, B, M) the predictions of the pool's other prompts, for B orderings at once.
    The measured prompts are split in two halves by position (the orderings are
    shuffled). Each half is corrected by a predictor `_fit` on the other half only, so
    the fit never sees the prompts it corrects and the estimate stays unbiased.
    """
    n, m = y.shape[-1], fp.shape[-1]
    half = n // 2
    folds = (np.arange(half), np.arange(half, n))
    corrected = np.zeros(y.shape)
    predicted = np.zeros(fp.shape)
    lams = np.zeros(y.shape[1])
    for own, other in (folds, folds[::-1]):
        scale, lam = _fit(y[..., other], fs[..., other], len(own), m)
        corrected[..., own] = y[..., own] - lam[None, :, None] * scale * fs[..., own]
        predicted += (len(own) / n) * lam[None, :, None] * scale * fp
        lams += lam * len(own) / n
    means = corrected.mean(axis=-1) + predicted.mean(axis=-1)
    return _Folds(means, lams, corrected, predicted, folds)


def _fold_interval(folds: _Folds, level: float) -> tuple[float, float] | None:
    """`paired.ratio_interval` of the cross-fitted estimate, from three independent
    sources of error: each half's corrected figures (centred within the half: each half
    has its own fit, so the halves' means differ by their fits, not by chance; weighted
    so that the two halves' means add up as the estimate does) and the pool's other
    prompts' predictions (the pool is a sample too). Student's t on a half's degrees
    of freedom (n/2 - 1): on n - 2 (or Welch-Satterthwaite's, between the two) the
    interval held 87-88% at a nominal 90% on 12-16 prompts with one in ten slow and
    unpredicted, the case the prediction-powered estimate is weakest in (the
    predictions take the spread they track out of the interval, and what is left is a
    rare slow prompt a half may lack); on n/2 - 1 it held 90%
    (`tests/test_interval_coverage.py`). The price: with a useless predictor the
    interval is up to 1.4 times the measured-alone one on 12 prompts."""
    n = folds.corrected.shape[-1]
    m = folds.predicted.shape[-1]
    sources = []
    for half in folds.halves:
        part = folds.corrected[..., half]
        k = len(half)
        # Var of (k / n) * mean over the half = (k / n)^2 * s^2 / k.
        sources.append(paired.ErrorSource(part - part.mean(axis=-1, keepdims=True),
                                          k / (n * n * (k - 1)), k - 1))
    predicted = folds.predicted - folds.predicted.mean(axis=-1, keepdims=True)
    sources.append(paired.ErrorSource(predicted, 1.0 / (m * (m - 1)), m - 1,
                                      measured=False))
    return paired.ratio_interval(folds.means.mean(axis=1), sources, level)


# Fewest measured prompts for the cross-fitted estimate (four per half: a half's fit
# and its spread are read from its prompts); below it the measured sample alone
# (lam 0). At 4-7 measured prompts the cross-fitted interval, on n - 2 degrees of
# freedom, was wider than the measured-alone one it would replace.
MIN_CROSS_FIT = 8
# Random halvings averaged for the point estimate (each is unbiased; their mean is
# steadier than one).
POINT_SPLITS = 16


def estimate(measured: Sequence[PromptPair], predicted: Sequence[PromptPair],
             repeats: int = 1, level: float = paired.INTERVAL_LEVEL,
             seed: int = 0) -> PoolEstimate:
    """The prediction-powered speedup over the pool `predicted` (one predicted pair per
    pool prompt) from `measured`, a simple random sample of the pool measured `repeats`
    times per prompt (pooled by `paired.pool`; each measured prompt must be in the
    pool), with its `level` interval (None below `paired.MIN_INTERVAL_PROMPTS` measured
    prompts or where none is bounded). Below `MIN_CROSS_FIT` measured prompts it is the
    classical estimate. `seed`: the random halvings of the cross-fit."""
    pool = paired.pool(predicted)
    sample = paired.pool(measured)
    by_id = {p.prompt_id: p for p in pool}
    missing = [p.prompt_id for p in sample if p.prompt_id not in by_id]
    if missing:
        raise ValueError(f"measured prompts not in the predicted pool: {missing[:5]}")
    measured_ci = paired.interval(sample, level)
    classical = paired.speedup(sample)
    predicted_value = (float(_ratio(_columns(pool).mean(axis=1))) if pool
                       else float("nan"))
    predicted_speedup = None if np.isnan(predicted_value) else predicted_value
    # The predictions' own mean is taken over the prompts not measured: a sample that
    # is part of it would correlate the two terms.
    measured_ids = {p.prompt_id for p in sample}
    rest = [p for p in pool if p.prompt_id not in measured_ids]
    if len(sample) < MIN_CROSS_FIT or len(rest) < 2:
        return PoolEstimate(classical, measured_ci, 0.0, len(sample), len(pool), classical,
                            measured_ci, predicted_speedup)
    y = _columns(sample, 1.0 / repeats)                              # (4, n), one pass
    fs = _columns([by_id[p.prompt_id] for p in sample])              # (4, n)
    fp = _columns(rest)                                              # (4, M)
    rng = np.random.default_rng(seed)
    n, m = y.shape[1], fp.shape[1]
    # The point estimate: the mean over random halvings (the pool's predictions whole).
    order = np.stack([rng.permutation(n) for _ in range(POINT_SPLITS)])     # (S, n)
    folds = _fold_means(y[:, order], fs[:, order],
                        np.broadcast_to(fp[:, None, :], (4, POINT_SPLITS, m)))
    value = float(_ratio(folds.means.mean(axis=1)))
    if np.isnan(value):
        return PoolEstimate(None, None, float(folds.lams.mean()), len(sample), len(pool),
                            classical, measured_ci, predicted_speedup)
    ci = _fold_interval(folds, level)
    return PoolEstimate(value, ci, float(folds.lams.mean()),
                        len(sample), len(pool), classical, measured_ci, predicted_speedup)


def _category(sample: list[PromptPair], members: list[PromptPair],
              others: list[PromptPair], by_id: dict[str, PromptPair], repeats: int,
              level: float) -> tuple[float | None, tuple[float, float] | None]:
    """One category's prediction-powered figure and interval: its measured prompts
    `sample` correct its pool `members` with a predictor fitted on the measured
    prompts of the other categories (`others`), which never sees the prompts it
    corrects.

    A category holds a handful of measured prompts, too few for a bootstrap (at 2 to 4
    it covered 70-80% at nominal 90% in a simulation with a bias of its own per
    category); the interval is the delta method's on the log scale with Student's t
    at n - 1 degrees of freedom instead (90-97% there): wide when little is measured,
    as it should be."""
    ids = {p.prompt_id for p in sample}
    rest = [p for p in members if p.prompt_id not in ids]
    y = _columns(sample, 1.0 / repeats)[:, None, :]
    fs = _columns([by_id[p.prompt_id] for p in sample])[:, None, :]
    fp = _columns(rest)[:, None, :]
    scale, lam = _fit(_columns(others, 1.0 / repeats)[:, None, :],
                      _columns([by_id[p.prompt_id] for p in others])[:, None, :],
                      len(sample), fp.shape[-1])
    means = _corrected(y, fs, fp, scale, lam)[:, 0]                     # (4,)
    value = float(_ratio(means))
    if np.isnan(value):
        return None, None
    gradient = np.array([1 / means[0], -1 / means[1], -1 / means[2], 1 / means[3]])
    rectifier = gradient @ (y[:, 0] - lam[0] * scale[:, 0] * fs[:, 0])  # (n,)
    predicted = gradient @ (lam[0] * scale[:, 0] * fp[:, 0])            # (M,)
    variance = rectifier.var(ddof=1) / rectifier.size
    if predicted.size > 1:
        variance += predicted.var(ddof=1) / predicted.size
    quantile = float(student_t.ppf(0.5 + level / 2, rectifier.size - 1))
    half = quantile * float(np.sqrt(variance))
    return value, (value * float(np.exp(-half)), value * float(np.exp(half)))


def by_category(measured: Sequence[PromptPair], predicted: Sequence[PromptPair],
                repeats: int = 1, level: float = paired.INTERVAL_LEVEL,
                ) -> dict[str, dict[str, object]]:
    """Per pool category (in first-seen order): the prediction-powered figures
    (`_category`) where the category has at least `MIN_MEASURED` measured prompts (a
    simple random sample of the pool is one of each category too) and the other
    categories as many to fit on, else the predictions alone, marked
    `"estimator": "predicted"` with no interval: a figure nothing measured has
    corrected is not a result."""
    groups: dict[str, list[PromptPair]] = {}
    for p in paired.pool(predicted):
        groups.setdefault(p.category, []).append(p)
    by_id = {p.prompt_id: p for members in groups.values() for p in members}
    measured_pooled = paired.pool(measured)
    out: dict[str, dict[str, object]] = {}
    for category, members in groups.items():
        ids = {p.prompt_id for p in members}
        sample = [p for p in measured_pooled if p.prompt_id in ids]
        others = [p for p in measured_pooled if p.prompt_id not in ids]
        row: dict[str, object] = {"prompts": len(members), "measured_prompts": len(sample)}
        if (len(sample) >= MIN_MEASURED and len(others) >= MIN_MEASURED
                and len(members) > len(sample)):
            value, ci = _category(sample, members, others, by_id, repeats, level)
            row.update(speedup=value, ci90=list(ci) if ci else None, estimator=ESTIMATOR,
                       mean_accepted_tokens=paired.tau(sample))
        elif sample and len(members) == len(sample):
            # The whole category measured: nothing to predict.
            ci = paired.interval(sample, level)
            row.update(speedup=paired.speedup(sample), ci90=list(ci) if ci else None,
                       estimator="measured", mean_accepted_tokens=paired.tau(sample))
        else:
            row.update(speedup=float(_ratio(_columns(members).mean(axis=1))), ci90=None,
                       estimator="predicted", mean_accepted_tokens=paired.tau(members))
        out[category] = row
    return out
