"""The timing helper (`autotune.measure.timing`) on a virtual clock: what is warmed up
(every point on CUDA, the first and last elsewhere), the round-robin order, what a
reset keeps out of the timed span, and the median."""

from __future__ import annotations

import pytest
import torch

from autotune.measure.timing import Clock, median_ms, time_call, time_points

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _recorder(clock: VirtualClock, cost: dict[int, float]):
    calls: list[int] = []

    def run(n: int) -> None:
        calls.append(n)
        clock.now += cost[n]
    return run, calls


@pytest.mark.parametrize("device,warmed", [(CPU, [1, 8]), (CUDA, [1, 2, 8])])
def test_warm_up_then_round_robin(device, warmed):
    clock = VirtualClock()
    run, calls = _recorder(clock, {1: 0.001, 2: 0.002, 8: 0.008})
    times = time_points(run, (1, 2, 8), clock, device, repeats=3)
    assert calls == warmed + [1, 2, 8] * 3
    assert list(times) == [1, 2, 8]
    assert times == {n: pytest.approx([s] * 3) for n, s in
                     {1: 0.001, 2: 0.002, 8: 0.008}.items()}


def test_one_point_is_warmed_up_once():
    clock = VirtualClock()
    run, calls = _recorder(clock, {4: 0.004})
    time_points(run, (4,), clock, CPU, repeats=2)
    assert calls == [4, 4, 4]


def test_reset_runs_before_each_call_and_is_not_timed():
    clock = VirtualClock()
    run, _ = _recorder(clock, {1: 0.001, 2: 0.002})
    resets: list[int] = []

    def reset(n: int) -> None:
        resets.append(n)
        clock.now += 10.0

    times = time_points(run, (1, 2), clock, CPU, repeats=2, reset=reset)
    assert resets == [1, 2, 1, 2, 1, 2]
    assert times == {1: pytest.approx([0.001] * 2), 2: pytest.approx([0.002] * 2)}


def test_time_call_is_the_median_after_one_untimed_call():
    clock = VirtualClock()
    costs = iter([5.0, 0.003, 0.001, 0.002])      # the first (warm-up) call is slow

    def run() -> None:
        clock.now += next(costs)

    assert time_call(run, clock, repeats=3) == pytest.approx(2.0)
    assert median_ms([0.001, 0.004, 0.002]) == pytest.approx(2.0)


def test_no_points_is_an_error_and_a_cpu_clock_reads_perf_counter():
    with pytest.raises(ValueError):
        time_points(lambda n: None, (), VirtualClock(), CPU, repeats=1)
    clock = Clock(CPU)
    assert clock() <= clock()
