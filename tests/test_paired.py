"""The paired statistic: ratio of summed decode time per token, pooled repeats, the
bootstrap interval over prompts and the split by category (pure arithmetic)."""

from __future__ import annotations

import pytest

from autotune.measure.paired import (
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


def test_interval_brackets_the_figure_is_seeded_and_needs_two_prompts():
    pairs = [pair(str(i), 1.0, c) for i, c in enumerate([0.5, 0.6, 0.8, 0.9, 1.1, 0.7])]
    low, high = interval(pairs)
    assert low < speedup(pairs) < high
    assert interval(pairs) == (low, high)                  # same data, same interval
    assert interval(pairs[:1]) is None
    # Identical prompts: no spread at all.
    same = [pair(str(i), 1.0, 0.5) for i in range(5)]
    assert interval(same) == pytest.approx((2.0, 2.0))
    # A wider level gives a wider interval.
    wide = interval(pairs, level=0.99)
    assert wide[0] <= low and wide[1] >= high


def test_interval_resamples_prompts_whole_with_their_repeats():
    # Two prompts, each measured twice; resampling repeats apart would give other bounds.
    pairs = [pair("a", 1.0, 0.5), pair("a", 1.0, 0.5), pair("b", 1.0, 2.0), pair("b", 1.0, 2.0)]
    low, high = interval(pairs)
    assert low == pytest.approx(0.5) and high == pytest.approx(2.0)


def test_by_category_and_tau():
    pairs = [pair("a", 1.0, 0.5, category="code", rounds=4, emitted=10),
             pair("b", 1.0, 0.4, category="code", rounds=6, emitted=10),
             pair("c", 1.0, 1.25, category="chat", rounds=10, emitted=10)]
    split = by_category(pairs)
    assert list(split) == ["code", "chat"]
    assert split["code"]["speedup"] == pytest.approx(2.0 / 0.9)
    assert split["code"]["prompts"] == 2 and split["code"]["ci90"] is not None
    assert split["chat"]["ci90"] is None and split["chat"]["speedup"] == pytest.approx(0.8)
    assert split["code"]["mean_accepted_tokens"] == pytest.approx(20 / 10)
    assert tau(pairs) == pytest.approx(30 / 20)
