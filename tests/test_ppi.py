"""Prediction-powered validation: the estimator's arithmetic, its unbiasedness under a
biased predictor, its coverage and its power (synthetic, seeded: no timing here)."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.measure import paired, ppi
from autotune.measure.paired import PromptPair


def _population(rng: np.random.Generator, n: int, categories: int = 3
                ) -> list[tuple[str, str, float, float, int]]:
    """(id, category, baseline s, candidate s, tokens): speedups that vary by prompt
    (0.7x to 2x) far more than by timing noise, as real workloads do."""
    out = []
    for i in range(n):
        tokens = int(rng.integers(8, 64))
        per_token = rng.uniform(0.02, 0.04)
        speed = float(np.exp(rng.normal(0.15, 0.3)))
        out.append((f"p{i}", f"c{i % categories}", per_token * tokens,
                    per_token * tokens / speed, tokens))
    return out


def _pairs(rows, noise: float, rng: np.random.Generator, bias: float = 1.0,
           repeats: int = 1) -> list[PromptPair]:
    """Pairs from true rows: each time times (1 + noise * N(0,1)) per repeat; `bias`
    scales the candidate (a predictor that is systematically off)."""
    out = []
    for pid, cat, base, cand, tokens in rows:
        for _ in range(repeats):
            out.append(PromptPair(pid, cat, base * (1 + noise * rng.normal()), tokens - 1,
                                  cand * bias * (1 + noise * rng.normal()), tokens - 1,
                                  rounds=tokens // 2, emitted=tokens - 1))
    return out


def _truth(rows) -> float:
    base = sum(r[2] for r in rows) / sum(r[4] - 1 for r in rows)
    cand = sum(r[3] for r in rows) / sum(r[4] - 1 for r in rows)
    return base / cand


def test_too_few_measured_prompts_give_the_classical_statistic_of_the_sample() -> None:
    rng = np.random.default_rng(1)
    rows = _population(rng, 60)
    predicted = _pairs(rows, 0.0, rng, bias=1.4)
    measured = _pairs(rows[:ppi.MIN_CROSS_FIT - 1], 0.05, rng, repeats=2)
    result = ppi.estimate(measured, predicted, repeats=2)
    assert result.lam == 0.0
    assert result.speedup == pytest.approx(paired.speedup(measured))
    assert result.ci90 is not None and result.ci90 == pytest.approx(paired.interval(measured))
    assert result.pool == 60 and result.measured == ppi.MIN_CROSS_FIT - 1
    # Below an interval's floor, none.
    few = _pairs(rows[:paired.MIN_INTERVAL_PROMPTS - 1], 0.05, rng)
    assert ppi.estimate(few, predicted).ci90 is None


def test_repeats_are_one_pass_each_and_perfect_predictions_are_trusted() -> None:
    """Predictions equal to the measured figures: the weight is PPI++'s 1 / (1 + n/M)
    (a half of 6 corrected, 68 predicted) and the estimate is the pool's own figure
    within a percent, however many repeats were pooled."""
    rng = np.random.default_rng(7)
    rows = _population(rng, 80)
    predicted = _pairs(rows, 0.0, rng)
    measured = _pairs(rows[:12], 0.0, rng, repeats=3)
    result = ppi.estimate(measured, predicted, repeats=3)
    assert result.lam == pytest.approx(1 / (1 + 6 / 68))
    assert result.speedup == pytest.approx(_truth(rows), rel=0.01)
    assert result.predicted_speedup == pytest.approx(_truth(rows), rel=1e-9)


def test_a_biased_predictor_is_corrected_on_average() -> None:
    """Predictions 40% too fast: the predictions alone are far off, the prediction-
    powered estimate over many random samples is centred on the pool's figure."""
    rng = np.random.default_rng(2)
    rows = _population(rng, 200)
    predicted = _pairs(rows, 0.0, rng, bias=1 / 1.4)
    truth = _truth(rows)
    estimates = []
    for draw in range(300):
        pick = np.random.default_rng(draw).choice(len(rows), 16, replace=False)
        measured = _pairs([rows[i] for i in pick], 0.03, rng)
        estimates.append(ppi.estimate(measured, predicted, seed=draw).speedup)
    assert ppi.estimate(measured, predicted).predicted_speedup == \
        pytest.approx(truth * 1.4, rel=1e-6)
    assert np.mean(estimates) == pytest.approx(truth, rel=0.02)


@pytest.mark.parametrize("quality", ["good", "useless"])
def test_the_interval_covers_the_population_figure(quality: str) -> None:
    """Nominal 90%: over many (population draw, sample) pairs the interval holds the
    figure of the population the pool was drawn from at least 85% of the time, for a
    good and for a useless predictor (test_interval_coverage.py holds it to 88% on the
    race's data)."""
    rng = np.random.default_rng(3)
    big = _population(rng, 20000)
    truth = _truth(big)
    hits = 0
    draws = 120
    for draw in range(draws):
        local = np.random.default_rng(100 + draw)
        pool_rows = [big[i] for i in local.choice(len(big), 150, replace=False)]
        if quality == "good":
            predicted = _pairs(pool_rows, 0.05, local, bias=1.2)
        else:
            shuffled = [pool_rows[i] for i in local.permutation(len(pool_rows))]
            predicted = [PromptPair(r[0], r[1], s[2], s[4] - 1, s[3], s[4] - 1)
                         for r, s in zip(pool_rows, shuffled)]
        pick = local.choice(len(pool_rows), 16, replace=False)
        measured = _pairs([pool_rows[i] for i in pick], 0.03, local)
        ci = ppi.estimate(measured, predicted, seed=draw).ci90
        assert ci is not None
        hits += ci[0] <= truth <= ci[1]
    assert hits / draws >= 0.85


def test_a_good_predictor_narrows_the_interval_and_a_useless_one_costs_little() -> None:
    rng = np.random.default_rng(4)
    rows = _population(rng, 200)
    pick = rng.choice(len(rows), 12, replace=False)
    measured = _pairs([rows[i] for i in pick], 0.03, rng)
    good = ppi.estimate(measured, _pairs(rows, 0.03, rng, bias=1.3))
    shuffled = [rows[i] for i in rng.permutation(len(rows))]
    useless = ppi.estimate(measured, [PromptPair(r[0], r[1], s[2], s[4] - 1, s[3], s[4] - 1)
                                      for r, s in zip(rows, shuffled)])

    def width(ci: tuple[float, float] | None) -> float:
        assert ci is not None
        return ci[1] - ci[0]

    classical = width(good.measured_ci90)
    assert good.lam > 0.7
    assert width(good.ci90) < classical * 0.6
    assert useless.lam < 0.5
    # A half's degrees of freedom (ppi._fold_interval) and a weight fitted on 6 prompts:
    # at 12 measured prompts a useless predictor costs up to 40% of width.
    assert width(useless.ci90) < classical * 1.4


def test_measured_prompts_must_be_in_the_pool() -> None:
    rng = np.random.default_rng(5)
    rows = _population(rng, 10)
    with pytest.raises(ValueError, match="not in the predicted pool"):
        ppi.estimate(_pairs(rows[:3], 0.0, rng), _pairs(rows[3:], 0.0, rng))


def test_a_category_without_two_measured_prompts_is_marked_predicted() -> None:
    rng = np.random.default_rng(6)
    rows = _population(rng, 30, categories=3)          # c0, c1, c2 by index mod 3
    predicted = _pairs(rows, 0.0, rng)
    chosen = ([r for r in rows if r[1] == "c0"][:4] + [rows[1]]
              + [r for r in rows if r[1] == "c2"][:2])
    table = ppi.by_category(_pairs(chosen, 0.02, rng), predicted)
    assert list(table) == ["c0", "c1", "c2"]
    for name, measured in (("c0", 4), ("c2", 2)):
        assert table[name]["estimator"] == ppi.ESTIMATOR and table[name]["ci90"] is not None
        assert table[name]["measured_prompts"] == measured and table[name]["prompts"] == 10
    assert table["c1"]["estimator"] == "predicted" and table["c1"]["ci90"] is None
    assert table["c1"]["measured_prompts"] == 1


def test_category_intervals_cover_under_a_bias_of_their_own() -> None:
    """The predictor is 20% off in c0 and 10% the other way elsewhere, and c0 has 3
    measured prompts: its interval still holds c0's population figure at least 85% of
    the time over many draws (a bootstrap over 3 prompts held it 70-80%)."""
    rng = np.random.default_rng(8)
    big = _population(rng, 30000, categories=3)
    truth = _truth([r for r in big if r[1] == "c0"])
    hits, draws = 0, 150
    for draw in range(draws):
        local = np.random.default_rng(500 + draw)
        pool_rows = [big[i] for i in local.choice(len(big), 150, replace=False)]
        predicted = [pair for r in pool_rows
                     for pair in _pairs([r], 0.05, local, bias=1.2 if r[1] == "c0" else 0.9)]
        c0 = [r for r in pool_rows if r[1] == "c0"]
        rest = [r for r in pool_rows if r[1] != "c0"]
        chosen = ([c0[i] for i in local.choice(len(c0), 3, replace=False)]
                  + [rest[i] for i in local.choice(len(rest), 10, replace=False)])
        ci = ppi.by_category(_pairs(chosen, 0.03, local), predicted)["c0"]["ci90"]
        assert ci is not None
        hits += ci[0] <= truth <= ci[1]
    assert hits / draws >= 0.85
