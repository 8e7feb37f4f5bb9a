"""How autotune times a piece of work: the clock, the warm-up, the repeats, the median.

Every timed figure is built from these: a run's decode time reads `Clock`; a cost part
(one pass of a sublayer, a head, a token pick) is `time_call`; a curve over several
sizes (the hardware profile, the replay cost model's pass curves, the batch profile)
is `time_points`, and a forward over n new tokens after a cached context is
`forward_times`.

- `Clock` is `perf_counter` after the device has finished its queued work (a CUDA
  synchronisation; a CPU runs synchronously).
- Warm-up is untimed: the first calls pay for allocator growth, kernel selection and
  lazy imports. On a GPU every shape may pick its own kernels, so there every point is
  warmed up; elsewhere the first and the last (the smallest and largest) are.
- The points are visited round-robin `repeats` times, so a slow drift of a shared
  machine hits every point alike; a figure is the median of its repeats.

Torch is imported only where a function needs it: the report and the light commands
read modules that import this one and must not load torch.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any, Callable, Hashable, Sequence, TypeVar

if TYPE_CHECKING:
    import torch

P = TypeVar("P", bound=Hashable)


class Clock:
    """`perf_counter` after the device has finished its queued work."""

    def __init__(self, device: torch.device) -> None:
        self._sync: Callable[[], None] | None = None
        if device.type == "cuda":
            import torch

            self._sync = torch.cuda.synchronize

    def __call__(self) -> float:
        if self._sync is not None:
            self._sync()
        return time.perf_counter()


def median_ms(seconds: Sequence[float]) -> float:
    """The median of timed samples (seconds), in milliseconds."""
    return 1000 * statistics.median(seconds)


def time_call(run: Callable[[], Any], clock: Callable[[], float], repeats: int) -> float:
    """Median milliseconds of `run()` over `repeats` timed calls after one untimed call."""
    run()                                  # warm-up
    times = []
    for _ in range(repeats):
        start = clock()
        run()
        times.append(clock() - start)
    return median_ms(times)


def _warmup_points(points: Sequence[P], device: torch.device) -> list[P]:
    if device.type == "cuda":
        return list(points)
    return list(dict.fromkeys((points[0], points[-1])))


def time_points(run: Callable[[P], Any], points: Sequence[P], clock: Callable[[], float],
                device: torch.device, repeats: int,
                reset: Callable[[P], Any] | None = None) -> dict[P, list[float]]:
    """Seconds of `run(point)`, `repeats` samples for each point of `points` (ordered
    from the cheapest to the dearest: the first and last are warmed up off a GPU).

    Untimed warm-up (every point on CUDA), then the points visited round-robin
    `repeats` times; `reset(point)`, when given, runs untimed before each call (e.g.
    cropping a cache back to its context). Returns {point: [seconds, ...]} with the
    points in their order.
    """
    if not points:
        raise ValueError("time_points needs at least one point")

    def timed(point: P) -> float:
        if reset is not None:
            reset(point)
        start = clock()
        run(point)
        return clock() - start

    for point in _warmup_points(points, device):
        timed(point)
    times: dict[P, list[float]] = {point: [] for point in points}
    for _ in range(repeats):
        for point in points:
            times[point].append(timed(point))
    return times


def forward_times(forward: Any, vocab: int, sizes: Sequence[int], context: int,
                  clock: Callable[[], float], device: torch.device, repeats: int,
                  last_only: bool = False) -> dict[int, list[float]]:
    """Seconds of one forward over n new tokens after `context` cached tokens, `repeats`
    samples for each n of `sizes` (increasing), timed as `time_points` times.

    `forward` is a model's forward (`decode_cache(length)`, `forward(ids [1, n],
    cache, start=, last_only=)` -> logits [1, n, V] or [1, 1, V] with `last_only`).
    The context [1, context] is prefilled once, untimed; every timed forward writes its
    n tokens right after it, where a verify pass (all logits) or a draft step (the last
    token's, `last_only`) would. Token ids, drawn from `vocab` with a fixed seed, do not
    change the cost of a dense forward; fixed ones keep runs alike.
    """
    import torch

    largest = max(sizes)
    ids = torch.randint(vocab, (1, context + largest),
                        generator=torch.Generator().manual_seed(0)).to(device)
    with torch.inference_mode():
        # The cache a generation decodes into: on a static forward, the one its graphs
        # are bound to, so the profile times the passes the decoder runs.
        cache = forward.decode_cache(context + largest)
        forward.forward(ids[:, :context], cache)

        def run(n: int) -> None:
            forward.forward(ids[:, context:context + n], cache, start=context,
                            last_only=last_only)

        return time_points(run, sizes, clock, device, repeats,
                           reset=lambda n: cache.crop(context))
