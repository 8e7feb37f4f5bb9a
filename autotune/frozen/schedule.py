"""A frozen config's optional `schedule`: which K its method runs at each batch size.

The JSON Schema and `record.ScheduleDocument` check its structure; `read_schedule` checks
what they cannot (the ranges tile the tuned batch sizes) and gives the typed `Schedule`
exporters act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from autotune.common.errors import AutotuneError
from autotune.frozen.record import ScheduleDocument


@dataclass(frozen=True)
class ScheduleRange:
    """Batch sizes `start`..`end` (inclusive) run `k` draft tokens per round (0: no
    speculation there)."""

    start: int
    end: int
    k: int

    def span(self) -> str:
        """`1` or `2-3`."""
        return str(self.start) if self.start == self.end else f"{self.start}-{self.end}"

    def label(self) -> str:
        """`1: K=4` or `2-3: K=3`."""
        return f"{self.span()}: K={self.k}"


@dataclass(frozen=True)
class Schedule:
    """A frozen config's `schedule`: which K its method runs at each batch size.

    `ranges` are sorted, contiguous and start at batch size 1; the last one ends at the
    largest tuned batch size (`largest`), beyond which nothing was measured. `points`
    (every measured batch size and K) stay in the document: exporters need only these."""

    method: str
    batch_sizes: tuple[int, ...]
    ranges: tuple[ScheduleRange, ...]
    objective: str | None = None

    @property
    def max_k(self) -> int:
        """The largest K of any range: what an engine must size its buffers for."""
        return max(r.k for r in self.ranges)

    @property
    def largest(self) -> int:
        """The largest tuned batch size (the last range's end)."""
        return self.ranges[-1].end

    def describe(self) -> str:
        """`1: K=4, 2-3: K=3, 4-8: K=0`."""
        return ", ".join(r.label() for r in self.ranges)


def _schedule_ranges(raw: ScheduleDocument) -> tuple[ScheduleRange, ...]:
    """`schedule.ranges` as ScheduleRanges, or the first problem (sorted, contiguous,
    starting at 1: every batch size up to the last end has exactly one K)."""
    if not raw.ranges:
        raise AutotuneError("schedule.ranges: must be a non-empty list of {start, end, k}")
    ranges: list[ScheduleRange] = []
    for i, item in enumerate(raw.ranges):
        where = f"schedule.ranges.{i}"
        if item.start is None or item.end is None or item.k is None:
            raise AutotuneError(f"{where}: needs integer start, end and k")
        r = ScheduleRange(item.start, item.end, item.k)
        if r.start < 1 or r.end < r.start or r.k < 0:
            raise AutotuneError(f"{where}: needs 1 <= start <= end and k >= 0, got "
                                f"start={r.start}, end={r.end}, k={r.k}")
        expected = ranges[-1].end + 1 if ranges else 1
        if r.start != expected:
            raise AutotuneError(
                f"{where}: starts at {r.start}, not {expected} (ranges must be sorted and "
                "contiguous, the first starting at batch size 1)")
        ranges.append(r)
    return tuple(ranges)


def read_schedule(raw: ScheduleDocument | None, method: str | None = None) -> Schedule | None:
    """A frozen config's `schedule` (`FrozenConfig.schedule`) checked, None when it has
    none, or an AutotuneError naming its first problem in one `schedule.key: message`
    line. The record holds the structure; this checks what it cannot: the ranges tile
    1..largest tuned batch size, each later range starts at a tuned batch size (a range
    runs from one to the next minus 1), and a schedule that speculates is for the
    config's own `method` when one is given."""
    if raw is None:
        return None
    ranges = _schedule_ranges(raw)
    if not raw.batch_sizes or not all(b >= 1 for b in raw.batch_sizes):
        raise AutotuneError("schedule.batch_sizes: must be a non-empty list of the tuned "
                            "batch sizes (integers >= 1)")
    tuned = tuple(sorted(set(raw.batch_sizes)))
    # The first range starts at 1 whatever the smallest tuned size (its K covers the
    # sizes below it); every later one at a tuned size.
    for i, r in enumerate(ranges[1:], start=1):
        if r.start not in tuned:
            raise AutotuneError(f"schedule.ranges.{i}: starts at {r.start}, which is not a "
                                f"tuned batch size ({', '.join(map(str, tuned))})")
    if ranges[-1].end != tuned[-1]:
        raise AutotuneError(f"schedule.ranges.{len(ranges) - 1}: ends at {ranges[-1].end}, "
                            f"not at the largest tuned batch size {tuned[-1]} (nothing "
                            "beyond it was measured)")
    if raw.method is None:
        raise AutotuneError("schedule.method: must name the method the schedule is for")
    # A schedule that never speculates says so whatever its method (the search writes
    # method "none" when the batch-1 answer is not to speculate).
    if method is not None and raw.method != method and any(r.k for r in ranges):
        raise AutotuneError(f"schedule.method: {raw.method!r} is not the config's method "
                            f"{method!r} (the schedule sets K for the params' method)")
    return Schedule(raw.method, tuned, ranges, raw.objective)
