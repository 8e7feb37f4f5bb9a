"""best.json's optional `schedule` section, read for the report: which draft
length K the run chose at each batch size (K = 0: do not speculate there) and every
(batch size, K) it measured, on the search prompts and, for the chosen K, on held-out ones.

The report never fails on a bad document: what cannot be read is left out and named in
`Schedule.problems`. Plain data, torch-free; the header and the batch-size panel share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.common.interval import Interval
from autotune.report.trials import finite

SCHEDULE_KEY = "schedule"
SEARCH = "search"
HELD_OUT = "held_out"


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
    ci90: tuple[float, float] | None
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
def _int(value: Any, least: int) -> int | None:
    """An int >= least (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        return None
    return value


def _ci(figures: dict[str, Any]) -> tuple[float, float] | None:
    ci = Interval.of(figures)
    return (ci.low, ci.high) if ci is not None else None


def _point(raw: Any) -> Point | None:
    if not isinstance(raw, dict):
        return None
    b, k = _int(raw.get("batch_size"), 1), _int(raw.get("k"), 0)
    split = raw.get("split")
    if b is None or k is None or split not in (SEARCH, HELD_OUT):
        return None
    return Point(b, k, split, finite(raw.get("speedup")), _ci(raw),
                 finite(raw.get("tokens_per_s")), finite(raw.get("ar_tokens_per_s")),
                 finite(raw.get("tau")), raw.get("chosen") is True)


def _range(raw: Any) -> Range | None:
    if not isinstance(raw, dict):
        return None
    start, end, k = _int(raw.get("start"), 1), _int(raw.get("end"), 1), _int(raw.get("k"), 0)
    if start is None or end is None or k is None or end < start:
        return None
    return Range(start, end, k)


def _valid(items: Any, read: Any, what: str, problems: list[str]) -> list[Any]:
    """The readable entries of a list; how many were not, in `problems`."""
    items = items if isinstance(items, list) else []
    out = [x for x in map(read, items) if x is not None]
    if len(out) < len(items):
        problems.append(f"{len(items) - len(out)} of {len(items)} {what} unreadable, left out")
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


def read_schedule(best_doc: dict[str, Any] | None) -> Schedule | None:
    """The `schedule` section of a best.json document; None when it has none (the
    report is then drawn as before)."""
    raw = (best_doc or {}).get(SCHEDULE_KEY)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        return Schedule(problems=[f"`schedule` is a {type(raw).__name__}, not an object"])
    problems: list[str] = []
    points = _valid(raw.get("points"), _point, "points", problems)
    ranges = sorted(_valid(raw.get("ranges"), _range, "ranges", problems), key=lambda r: r.start)
    listed = raw.get("batch_sizes") if isinstance(raw.get("batch_sizes"), list) else []
    sizes = {b for b in (_int(x, 1) for x in listed) if b is not None}
    # Without a usable list, the batch sizes are the ones something was measured at.
    batch_sizes = sorted(sizes or {p.batch_size for p in points} or {r.start for r in ranges})
    if not ranges:
        ranges = _ranges_from_points(batch_sizes, points)
        if ranges:
            problems.append("no readable `ranges`: the chosen K is taken from the chosen "
                            "search points")
    method, objective = raw.get("method"), raw.get("objective")
    return Schedule(method if isinstance(method, str) else None,
                    objective if isinstance(objective, str) else None,
                    batch_sizes, ranges, points, problems)


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
