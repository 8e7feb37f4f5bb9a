"""best.json's optional `schedule` section, read for the report: which draft
length K the run chose at each batch size (K = 0: do not speculate there) and every
(batch size, K) it measured, on the search prompts and, for the chosen K, on held-out ones.

The report never fails on a bad document: what cannot be read is left out and named in
`Schedule.problems`. Plain data, torch-free; the header and the batch-size panel share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from pydantic import ValidationError

from autotune.common.interval import Interval
from autotune.common.records import JsonRecord
from autotune.frozen.record import ScheduleDocument, SchedulePoint, ScheduleRangeRecord
from autotune.report.documents import readable_parts
from autotune.report.trials import finite

SCHEDULE_KEY = "schedule"
SEARCH = "search"
HELD_OUT = "held_out"

Item = TypeVar("Item", bound=JsonRecord)
Read = TypeVar("Read")


@dataclass(frozen=True)
class Range:
    """Batch sizes start..end (inclusive) run with draft length k (0: AR)."""

    start: int
    end: int
    k: int


@dataclass(frozen=True)
class Point:
    """One measured (batch size, K) on one prompt split. Any figure may be None."""

    batch_size: int
    k: int
    split: str
    speedup: float | None
    interval: Interval | None
    tokens_per_s: float | None
    ar_tokens_per_s: float | None
    tau: float | None
    chosen: bool


@dataclass
class Schedule:
    """The section as read. `batch_sizes`: the tuned ones, ascending. `ranges`: sorted by
    start. `problems`: what was left out and why (empty for a clean document)."""

    method: str | None = None
    objective: str | None = None
    batch_sizes: list[int] = field(default_factory=list)
    ranges: list[Range] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def chosen_k(self, batch_size: int) -> int | None:
        """The K the schedule runs at `batch_size` (None: outside every range)."""
        return next((r.k for r in self.ranges if r.start <= batch_size <= r.end), None)

    def point(self, batch_size: int, k: int, split: str) -> Point | None:
        """The measured point, a `chosen` one first when a document repeats it."""
        found = [p for p in self.points
                 if (p.batch_size, p.k, p.split) == (batch_size, k, split)]
        return next((p for p in found if p.chosen), found[0] if found else None)

    @property
    def stops_at(self) -> int | None:
        """The first tuned batch size whose chosen K is 0: where speculation stops paying
        (None: it pays at every tuned batch size)."""
        return next((b for b in self.batch_sizes if self.chosen_k(b) == 0), None)

    @property
    def pays_again(self) -> list[int]:
        """Tuned batch sizes above `stops_at` where a K > 0 was chosen again (a
        non-monotone schedule: the text must not claim "off from B=..." for good)."""
        stop = self.stops_at
        return [] if stop is None else [b for b in self.batch_sizes
                                        if b > stop and (self.chosen_k(b) or 0) > 0]


# ------------------------------------------------------------------ reading
def _int(value: int | None, least: int) -> int | None:
    """An int >= least."""
    return value if value is not None and value >= least else None


def _item(model: type[Item], raw: object) -> Item | None:
    """One entry of the section as its record; None for one that does not read (strict:
    a count written as text or a flag is not a count)."""
    try:
        return model.model_validate(raw, strict=True)
    except ValidationError:
        return None


def _point(raw: object) -> Point | None:
    point = _item(SchedulePoint, raw)
    if point is None:
        return None
    b, k = _int(point.batch_size, 1), _int(point.k, 0)
    if b is None or k is None or point.split not in (SEARCH, HELD_OUT):
        return None
    # Figures only a schedule's points carry (frozen.record declares the shared ones).
    return Point(b, k, point.split, finite(point.speedup), point.interval,
                 finite(point.extra("tokens_per_s")), finite(point.extra("ar_tokens_per_s")),
                 finite(point.extra("tau")), point.extra("chosen") is True)


def _range(raw: object) -> Range | None:
    item = _item(ScheduleRangeRecord, raw)
    if item is None:
        return None
    start, end, k = _int(item.start, 1), _int(item.end, 1), _int(item.k, 0)
    if start is None or end is None or k is None or end < start:
        return None
    return Range(start, end, k)


def _valid(items: object, read: Callable[[object], Read | None], what: str,
           problems: list[str]) -> list[Read]:
    """The readable entries of a list; how many were not, in `problems`."""
    entries = items if isinstance(items, list) else []
    out = [x for x in map(read, entries) if x is not None]
    if len(out) < len(entries):
        problems.append(f"{len(entries) - len(out)} of {len(entries)} {what} unreadable, left out")
    return out


def _ranges_from_points(batch_sizes: list[int], points: list[Point]) -> list[Range]:
    """Ranges rebuilt from the chosen search points when the document has none: each
    tuned batch size up to the next one minus 1, the last one alone."""
    ranges = []
    for i, b in enumerate(batch_sizes):
        k = next((p.k for p in points if p.batch_size == b and p.split == SEARCH and p.chosen), None)
        if k is not None:
            end = batch_sizes[i + 1] - 1 if i + 1 < len(batch_sizes) else b
            ranges.append(Range(b, end, k))
    return ranges


def read_schedule(best_doc: Mapping[str, Any] | None) -> Schedule | None:
    """The `schedule` section of best.json's parsed content, read item by item (what does
    not read is left out and named in `problems`); None when it has none (the report is
    then drawn as before)."""
    raw = (best_doc or {}).get(SCHEDULE_KEY)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        return Schedule(problems=[f"`schedule` is a {type(raw).__name__}, not an object"])
    problems: list[str] = []
    # The section's own facts as its record; its lists apart, entry by entry.
    facts = {key: value for key, value in raw.items() if key not in ("points", "ranges")}
    head = readable_parts(ScheduleDocument, facts)
    points = _valid(raw.get("points"), _point, "points", problems)
    ranges = sorted(_valid(raw.get("ranges"), _range, "ranges", problems), key=lambda r: r.start)
    sizes = {b for b in (_int(x, 1) for x in head.batch_sizes) if b is not None}
    # Without a usable list, the batch sizes are the ones something was measured at.
    batch_sizes = sorted(sizes or {p.batch_size for p in points} or {r.start for r in ranges})
    if not ranges:
        ranges = _ranges_from_points(batch_sizes, points)
        if ranges:
            problems.append("no readable `ranges`: the chosen K is taken from the chosen "
                            "search points")
    return Schedule(head.method, head.objective, batch_sizes, ranges, points, problems)


# ------------------------------------------------------------------ in words
def span(start: int, end: int) -> str:
    return f"{start}" if start == end else f"{start}–{end}"


def _merged(ranges: list[Range]) -> list[Range]:
    """Adjacent ranges of one K as one (the text says each K once per stretch)."""
    out: list[Range] = []
    for r in ranges:
        if out and out[-1].k == r.k and out[-1].end + 1 >= r.start:
            out[-1] = Range(out[-1].start, max(out[-1].end, r.end), r.k)
        else:
            out.append(r)
    return out


def schedule_line(schedule: Schedule | None) -> str | None:
    """`Batch-size schedule: K=4 at 1, K=3 at 2–3, off from B=4` from the ranges (None
    without a schedule or any range)."""
    if schedule is None or not schedule.ranges:
        return None
    ranges = _merged(schedule.ranges)
    head = "Batch-size schedule: "
    if all(r.k == 0 for r in ranges):
        return (head + f"off at every tuned batch size ({span(ranges[0].start, ranges[-1].end)}): "
                "do not speculate")
    parts = []
    for i, r in enumerate(ranges):
        if r.k > 0:
            parts.append(f"K={r.k} at {span(r.start, r.end)}")
        elif i == len(ranges) - 1:
            # The last range runs to the largest tuned batch size; beyond it nothing was
            # measured, and an engine carrying K=0 forward stays off: "from" is fair.
            parts.append(f"off from B={r.start}")
        else:
            parts.append(f"off at {span(r.start, r.end)}")
    return head + ", ".join(parts)
