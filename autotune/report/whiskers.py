"""Speedup intervals drawn readably: whiskers clipped to a range the point estimates set.

A category measured on a handful of prompts can carry an interval from 0.01 to 1000;
drawn whole, it sets the axis and flattens every other point onto the line at 1. The
points are what a reader compares, so the axis is theirs: it spans every point estimate
and the parity line at 1.0, padded by half their spread (at least `MIN_PAD` each side,
so close points still show their whiskers). A whisker beyond it is cut at the edge and
marked there with a triangle pointing the way it goes on, whose hover text gives the
whole interval: an interval that wide is itself the message (too few prompts to tell).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

__all__ = ["MIN_PAD", "Whiskers", "clip", "clip_markers", "readable_range"]

MIN_PAD = 0.15


def readable_range(points: Sequence[float | None]) -> tuple[float, float]:
    """The y-range for speedup `points` (None / NaN ignored): every point and 1.0, padded
    by half their spread and at least `MIN_PAD`; never below 0 (no speedup is)."""
    values = [v for v in points if v is not None and math.isfinite(v)] + [1.0]
    low, high = min(values), max(values)
    pad = max(MIN_PAD, 0.5 * (high - low))
    return max(0.0, low - pad), high + pad


@dataclass(frozen=True)
class Whiskers:
    """Plotly `error_y` arrays (`up`, `down`: None where a point has no interval) cut to a
    range, and where each cut whisker ends (`clipped_high` / `clipped_low`: the edge, or
    None where the whisker fits)."""

    up: list[float | None]
    down: list[float | None]
    clipped_high: list[float | None]
    clipped_low: list[float | None]

    @property
    def any_clipped(self) -> bool:
        return any(v is not None for v in (*self.clipped_high, *self.clipped_low))


def clip(speedups: Sequence[float | None], lows: Sequence[float | None],
         highs: Sequence[float | None], bounds: tuple[float, float]) -> Whiskers:
    """Whiskers of each point cut to `bounds` (a point without a whole interval gets
    none: never a zero-length bar that reads as certainty)."""
    bottom, top = bounds
    up: list[float | None] = []
    down: list[float | None] = []
    cut_high: list[float | None] = []
    cut_low: list[float | None] = []
    for s, lo, hi in zip(speedups, lows, highs):
        if s is None or lo is None or hi is None or not all(
                math.isfinite(v) for v in (s, lo, hi)):
            for column in (up, down, cut_high, cut_low):
                column.append(None)
            continue
        up.append(max(min(hi, top) - s, 0.0))
        down.append(max(s - max(lo, bottom), 0.0))
        cut_high.append(top if hi > top else None)
        cut_low.append(bottom if lo < bottom else None)
    return Whiskers(up, down, cut_high, cut_low)


def clip_markers(fig: go.Figure, x: Sequence[object], whiskers: Whiskers,
                 intervals: Sequence[tuple[float, float] | None], color: str = "#333",
                 name: str = "interval clipped", offsetgroup: str | None = None) -> None:
    """Triangles where `whiskers` were cut (up at the top edge, down at the bottom), each
    hovering the whole interval; nothing when none was cut. `offsetgroup`: the points'
    trace's, so a grouped scatter puts the triangles over their own points."""
    for edges, symbol in ((whiskers.clipped_high, "triangle-up"),
                          (whiskers.clipped_low, "triangle-down")):
        at = [(xi, edge, ci) for xi, edge, ci in zip(x, edges, intervals) if edge is not None]
        if not at:
            continue
        fig.add_trace(go.Scatter(
            x=[a[0] for a in at], y=[a[1] for a in at], mode="markers", name=name,
            showlegend=False, marker=dict(symbol=symbol, size=9, color=color),
            offsetgroup=offsetgroup,
            text=[f"interval clipped: [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "interval clipped"
                  for _, _, ci in at],
            hovertemplate="%{text}<extra></extra>"))
