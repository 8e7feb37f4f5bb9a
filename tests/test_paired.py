"""The paired statistic: ratio of summed decode time per token, pooled repeats, its
interval over prompts (Fieller's; its coverage: test_interval_coverage.py) and the split
by category (pure arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.measure.paired import (
    MIN_INTERVAL_PROMPTS,
    PromptPair,
    by_category,
    interval,
    pool,
    speedup,
    tau,
)


def pair(pid: str, base_s: float, cand_s: float, tokens: int = 10, category: str = "c",
         rounds: int = 5, emitted: int = 10) -> PromptPair:
    return PromptPair(pid, category, base_s, tokens, cand_s, tokens, rounds, emitted)


def test_speedup_is_a_ratio_of_sums_weighting_every_token_alike():
    # Prompt a: 2x faster over 100 tokens; prompt b: 2x slower over 10 tokens.
    pairs = [PromptPair("a", "c", 2.0, 100, 1.0, 100), PromptPair("b", "c", 0.1, 10, 0.2, 10)]
    assert speedup(pairs) == pytest.approx((2.1 / 110) / (1.2 / 110))
    # Not the median of per-prompt ratios (which would be 1.25 here).
    assert speedup(pairs) != pytest.approx(1.25)


def test_tokens_may_differ_between_arms_under_sampling():
    pairs = [PromptPair("a", "c", 1.0, 10, 1.0, 20)]
    assert speedup(pairs) == pytest.approx(2.0)


def test_repeats_of_a_prompt_pool_by_summing_never_by_picking():
    pooled = pool([pair("a", 1.0, 0.5), pair("b", 1.0, 1.0), pair("a", 1.0, 1.5)])
    assert [p.prompt_id for p in pooled] == ["a", "b"]
    assert pooled[0].candidate_s == 2.0 and pooled[0].candidate_tokens == 20
    assert speedup([pair("a", 1.0, 0.5), pair("a", 1.0, 1.5)]) == pytest.approx(1.0)


def test_undefined_when_a_side_decoded_nothing():
    assert speedup([]) is None
    assert speedup([PromptPair("a", "c", 1.0, 0, 1.0, 0)]) is None


def test_interval_brackets_the_figure_is_deterministic_and_needs_enough_prompts():
    pairs = [pair(str(i), 1.0, c) for i, c in enumerate([0.5, 0.6, 0.8, 0.9, 1.1, 0.7])]
    low, high = interval(pairs)
    assert low < speedup(pairs) < high
    assert interval(pairs) == (low, high)                  # same data, same interval
    # Below the floor: no interval, never a narrower one.
    assert MIN_INTERVAL_PROMPTS == 4
    assert interval(pairs[:MIN_INTERVAL_PROMPTS - 1]) is None
    assert interval(pairs[:MIN_INTERVAL_PROMPTS]) is not None
    # Identical prompts: no spread at all.
    same = [pair(str(i), 1.0, 0.5) for i in range(5)]
    assert interval(same) == pytest.approx((2.0, 2.0))
    # A wider level gives a wider interval.
    wide = interval(pairs, level=0.99)
    assert wide[0] <= low and wide[1] >= high


def test_fieller_interval_in_closed_form_on_equal_tokens():
    """Equal tokens per prompt on both sides: the interval is the set of rho where a
    t-test of mean(b - rho c) = 0 does not reject (Fieller), computed here by brute
    force over a grid of rho; the sample is symmetric at the estimate, so no skew
    widens it."""
    from scipy.stats import t as student_t

    cand = np.array([0.9, 1.1, 0.9, 1.1, 1.0])
    base = cand + np.array([-0.1, -0.1, 0.1, 0.1, 0.0])     # b - c symmetric at rho-hat 1
    pairs = [pair(str(i), b, c) for i, (b, c) in enumerate(zip(base, cand))]
    q = student_t.ppf(0.95, 4)
    grid = np.linspace(0.7, 1.4, 70001)
    keep = [r for r in grid if abs((base - r * cand).mean())
            <= q * (base - r * cand).std(ddof=1) / np.sqrt(5)]
    low, high = interval(pairs)
    assert speedup(pairs) == pytest.approx(1.0)
    assert (low, high) == pytest.approx((min(keep), max(keep)), abs=2e-5)


def test_interval_resamples_prompts_whole_with_their_repeats():
    """A prompt's repeats are one unit: measured twice each, four prompts give the
    interval of their pooled figures (not of eight prompts)."""
    once = [pair("a", 1.0, 0.5), pair("b", 1.0, 2.0), pair("c", 1.0, 0.9), pair("d", 1.0, 1.1)]
    twice = [*once, *once]
    assert interval(twice) == pytest.approx(interval(pool(twice)))
    as_eight = [pair(f"{p.prompt_id}{r}", 1.0, p.candidate_s) for r in (1, 2)
                for p in once]
    assert interval(twice) != pytest.approx(interval(as_eight))


def test_by_category_and_tau():
    pairs = [pair("a", 1.0, 0.5, category="code", rounds=4, emitted=10),
             pair("b", 1.0, 0.4, category="code", rounds=6, emitted=10),
             pair("c", 1.0, 1.25, category="chat", rounds=10, emitted=10)]
    split = by_category(pairs)
    assert list(split) == ["code", "chat"]
    assert split["code"]["speedup"] == pytest.approx(2.0 / 0.9)
    # Two prompts: fewer than an interval needs (MIN_INTERVAL_PROMPTS).
    assert split["code"]["prompts"] == 2 and split["code"]["ci90"] is None
    assert split["chat"]["ci90"] is None and split["chat"]["speedup"] == pytest.approx(0.8)
    assert split["code"]["mean_accepted_tokens"] == pytest.approx(20 / 10)
    assert tau(pairs) == pytest.approx(30 / 20)
