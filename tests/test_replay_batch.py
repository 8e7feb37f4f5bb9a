"""The batch profile (B x tokens per row) and the batch cost model built on it."""

from __future__ import annotations

import pytest
from tiny import gpt2_model, one_thread, tiny_llama, tiny_loaded  # noqa: F401  (autouse fixture)

from autotune.common.errors import AutotuneError
from autotune.measure.profile import batch_forward_profile
from autotune.replay.batch import BatchCost


def _points(ms):
    return [{"batch_size": b, "tokens": n, "ms": ms(b, n)} for b in (1, 2, 8) for n in (1, 4)]


def test_batch_cost_interpolates_between_batch_sizes_and_scales_to_the_loop():
    cost = BatchCost(_points(lambda b, n: 10.0 * b + n), [[1, 11.0], [4, 14.0]])
    assert cost.ms(2, 4) == pytest.approx(24.0)             # a profiled point
    assert cost.ms(4, 1) == pytest.approx(41.0)             # between B = 2 (21) and 8 (81)
    assert cost.ms(16, 1) == pytest.approx(161.0)           # straight on past B = 8
    # The loop's curve runs 2x the bare B = 1 pass: every column is scaled alike.
    slow = BatchCost(_points(lambda b, n: 10.0 * b + n), [[1, 22.0], [4, 28.0]])
    assert slow.ms(1, 1) == pytest.approx(22.0) and slow.ms(8, 4) == pytest.approx(168.0)


def test_batch_cost_needs_batch_size_one():
    with pytest.raises(ValueError, match="batch size 1"):
        BatchCost([{"batch_size": 2, "tokens": 1, "ms": 1.0}], [[1, 1.0]])


def test_batch_profile_times_every_batch_size_and_width():
    profile = batch_forward_profile(tiny_llama(seed=1, layers=2), (1, 3), (1, 2, 5),
                                    context_tokens=16, repeats=2)
    grid = [(p["batch_size"], p["tokens"]) for p in profile["batch_points"]]
    assert grid == [(1, 1), (1, 2), (1, 5), (3, 1), (3, 2), (3, 5)]
    assert all(p["ms"] >= p["ms_min"] > 0 for p in profile["batch_points"])
    assert profile["context_tokens"] == 16 and profile["repeats"] == 2


def test_batch_profile_refuses_hf_forward():
    with pytest.raises(AutotuneError, match="compact Llama-family forward"):
        batch_forward_profile(tiny_loaded(gpt2_model()), (1,), (1,))
