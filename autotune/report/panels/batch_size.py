"""Batch size: where speculation pays as more rows share each forward pass.

From best.json's optional `schedule` section (a search run with `--batch-sizes`): the
speedup of each fixed draft length K against batched AR at the same batch size, the
schedule (the K chosen at each batch size) as a thick line, the chosen K re-measured on
held-out prompts with its 90% interval, and the first batch size where the schedule
turns speculation off. Below, the chosen K and the tokens/s of the schedule and of
batched AR per batch size.

The panel is optional: without a `schedule` section `data` returns None and the page has
no such section (the report is drawn as before)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from autotune.common.interval import Interval
from autotune.report.panels.base import Panel
from autotune.report.schedule import HELD_OUT, SEARCH, Point, Schedule, schedule_line, span
from autotune.report.style import (
    BEST_COLOR,
    esc,
    figure,
    layout,
    note,
    num,
    parity_line,
    section,
)
from autotune.report.trials import finite
from autotune.report.verdict import plural
from autotune.report.whiskers import clip, clip_markers, readable_range

PANEL_ID = "batch-size"
FRAME_COLUMNS = ["batch_size", "k", "split", "speedup", "ci_low", "ci_high", "tokens_per_s",
                 "ar_tokens_per_s", "tau", "chosen", "hover"]
HELD_OUT_COLOR = "#000000"
STOP_COLOR = "#555555"
# Trace names: tests and the legend read them.
SCHEDULE_TRACE = "schedule (chosen K, search prompts)"
HELD_OUT_TRACE = "chosen K on held-out prompts (trust this)"


@dataclass
class BatchSize:
    """`frame`: every measured point (FRAME_COLUMNS; `ci_low` / `ci_high` NaN without an
    interval), search points first. `table`: one row per tuned batch size (`rows_of`).
    `stops_at`: the first tuned batch size whose chosen K is 0 (None: speculation pays
    at every tuned batch size); `stop_text` says so. `line`: the header's schedule line.
    `note`: what could not be read or shown, or None."""

    frame: pd.DataFrame
    table: list[BatchSizeRow] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    method: str | None = None
    objective: str | None = None
    stops_at: int | None = None
    pays_again: list[int] = field(default_factory=list)
    stop_text: str = ""
    line: str | None = None
    note: str | None = None


def _speedup_text(p: Point) -> str:
    if p.speedup is None:
        return "no speedup measured"
    ci = (f" [{p.interval.low:.2f}, {p.interval.high:.2f}] (90%)" if p.interval is not None
          else " (no interval)")
    return f"{p.speedup:.2f}×{ci} vs batched AR"


def hover_of(p: Point) -> str:
    """`B=4 · K=3 (held-out prompts)<br>1.21× [1.10, 1.30] (90%) vs batched AR<br>...`"""
    where = "search prompts" if p.split == SEARCH else "held-out prompts"
    tag = ", chosen" if p.chosen else ""
    rates = (f"{num(p.tokens_per_s, 1)} tok/s · batched AR {num(p.ar_tokens_per_s, 1)} tok/s")
    return (f"B={p.batch_size} · K={p.k} ({where}{tag})<br>{_speedup_text(p)}<br>{rates}"
            f"<br>τ {num(p.tau, 2)} tokens/round/row")


def frame_of(schedule: Schedule) -> pd.DataFrame:
    """Every point as one row (FRAME_COLUMNS), search then held-out, by batch size and K."""
    order = sorted(schedule.points, key=lambda p: (p.split != SEARCH, p.batch_size, p.k))
    rows = [{"batch_size": p.batch_size, "k": p.k, "split": p.split, "speedup": p.speedup,
             "ci_low": p.interval.low if p.interval is not None else math.nan,
             "ci_high": p.interval.high if p.interval is not None else math.nan,
             "tokens_per_s": p.tokens_per_s,
             "ar_tokens_per_s": p.ar_tokens_per_s, "tau": p.tau, "chosen": p.chosen,
             "hover": hover_of(p)} for p in order]
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


def _search_speedup(p: Point | None, k: int) -> float | None:
    # K = 0 is batched AR itself: 1.0 by definition even where no figure was stored.
    if k == 0:
        return 1.0 if p is None or p.speedup is None else p.speedup
    return p.speedup if p is not None else None


@dataclass(frozen=True)
class BatchSizeRow:
    """One tuned batch size in the table: the chosen K; its search figures (speedup,
    tokens/s, batched AR tokens/s, tau) and held-out ones (speedup, interval, tokens/s,
    batched AR tokens/s). Any figure may be None."""

    batch_size: int
    k: int
    search_speedup: float | None
    search_tokens_per_s: float | None
    search_ar_tokens_per_s: float | None
    tau: float | None
    held_out_speedup: float | None
    held_out_interval: Interval | None
    held_out_tokens_per_s: float | None
    held_out_ar_tokens_per_s: float | None

    def cells(self) -> tuple[float | int | Interval | None, ...]:
        """The table's cells, in `_TABLE_HEADS` order."""
        return (self.batch_size, self.k, self.held_out_speedup, self.held_out_interval,
                self.held_out_tokens_per_s, self.held_out_ar_tokens_per_s,
                self.search_speedup, self.search_tokens_per_s, self.search_ar_tokens_per_s,
                self.tau)


def rows_of(schedule: Schedule) -> list[BatchSizeRow]:
    """One row per tuned batch size that has a chosen K."""
    rows = []
    for b in schedule.batch_sizes:
        k = schedule.chosen_k(b)
        if k is None:
            continue
        s, h = schedule.point(b, k, SEARCH), schedule.point(b, k, HELD_OUT)
        rows.append(BatchSizeRow(
            b, k, _search_speedup(s, k), s.tokens_per_s if s else None,
            s.ar_tokens_per_s if s else None, s.tau if s else None,
            h.speedup if h else None, h.interval if h else None,
            h.tokens_per_s if h else None, h.ar_tokens_per_s if h else None))
    return rows


def stop_text_of(schedule: Schedule) -> str:
    """Where speculation stops paying, in words."""
    sizes = schedule.batch_sizes
    stop = schedule.stops_at
    if stop is None:
        tuned = span(sizes[0], sizes[-1]) if sizes else "–"
        return (f"Speculation pays at every tuned batch size ({tuned}): the schedule never "
                "chose K=0. Beyond the largest one nothing was measured.")
    text = (f"Speculation stops paying at B={stop}: the first tuned batch size whose chosen "
            "K is 0 (chosen on the search prompts).")
    again = schedule.pays_again
    if again:
        text += (f" A K>0 was chosen again at B={', '.join(map(str, again))}: the schedule is "
                 "not simply off from there.")
    return text


def _notes(schedule: Schedule, frame: pd.DataFrame, rows: list[BatchSizeRow]) -> str | None:
    out = list(schedule.problems)
    if frame.empty:
        out.append("The schedule holds no readable measured point: nothing to draw.")
    elif not (frame["split"] == HELD_OUT).any():
        out.append("No held-out figures: the chosen K was not re-measured on held-out "
                   "prompts, so every figure here is the search's own (chosen on the same "
                   "prompts, it flatters the choice).")
    if not rows:
        out.append("No tuned batch size has a chosen K: the `ranges` are missing or cover none.")
    return " ".join(s if s.endswith(".") else s + "." for s in out) or None


def data(schedule: Schedule | None) -> BatchSize | None:
    """The panel's data from best.json's schedule (`read_schedule`); None without one."""
    if schedule is None:
        return None
    frame, rows = frame_of(schedule), rows_of(schedule)
    return BatchSize(frame, rows, schedule.batch_sizes, schedule.method, schedule.objective,
                     schedule.stops_at, schedule.pays_again, stop_text_of(schedule),
                     schedule_line(schedule), _notes(schedule, frame, rows))


# ------------------------------------------------------------------ drawing
def _k_colors(ks: list[int]) -> dict[int, str]:
    """One colour per fixed K, light to dark as K grows (a sequence reads as one)."""
    if len(ks) == 1:
        return {ks[0]: sample_colorscale("Blues", [0.7])[0]}
    return dict(zip(ks, sample_colorscale("Blues", [0.35 + 0.55 * i / (len(ks) - 1)
                                                    for i in range(len(ks))])))


def _k_lines(fig: go.Figure, frame: pd.DataFrame) -> None:
    """One thin line per fixed K > 0 over the search points (K=0 is the 1.0 line)."""
    search = frame[(frame["split"] == SEARCH) & (frame["k"] > 0) & frame["speedup"].notna()]
    ks = sorted(int(k) for k in search["k"].unique())
    colors = _k_colors(ks) if ks else {}
    for k in ks:
        part = search[search["k"] == k].sort_values("batch_size")
        fig.add_trace(go.Scatter(
            x=part["batch_size"], y=part["speedup"], mode="lines+markers", name=f"K={k}",
            text=part["hover"], hovertemplate="%{text}<extra></extra>",
            line=dict(color=colors[k], width=1.5), marker=dict(size=6, color=colors[k])))


def _schedule_line(fig: go.Figure, d: BatchSize, frame: pd.DataFrame) -> None:
    """The chosen K at each batch size as one thick line, each point labelled with its K."""
    rows = [r for r in d.table if r.search_speedup is not None]
    if not rows:
        return
    hovers = []
    for r in rows:
        match = frame[(frame["split"] == SEARCH) & (frame["batch_size"] == r.batch_size)
                      & (frame["k"] == r.k)]
        hovers.append(match["hover"].iloc[0] if not match.empty else
                      f"B={r.batch_size} · K=0: batched AR itself (1.00×)")
    fig.add_trace(go.Scatter(
        x=[r.batch_size for r in rows], y=[r.search_speedup for r in rows],
        mode="lines+markers+text", name=SCHEDULE_TRACE, text=[f"K={r.k}" for r in rows],
        textposition="top center", hovertext=hovers, hovertemplate="%{hovertext}<extra></extra>",
        line=dict(color=BEST_COLOR, width=5), marker=dict(size=10, color=BEST_COLOR)))


def _held_out(fig: go.Figure, frame: pd.DataFrame, bounds: tuple[float, float]) -> None:
    """Held-out points with their 90% intervals (no bar where there is none), whiskers
    clipped to `bounds`."""
    part = frame[(frame["split"] == HELD_OUT) & frame["speedup"].notna()]
    if part.empty:
        return
    has = list(part["ci_low"].notna() & part["ci_high"].notna())
    # A whisker past the readable range is cut at its edge and marked (`report.whiskers`).
    whiskers = clip([float(s) for s in part["speedup"]],
                    [float(lo) if ok else None for lo, ok in zip(part["ci_low"], has)],
                    [float(hi) if ok else None for hi, ok in zip(part["ci_high"], has)], bounds)
    up, down = whiskers.up, whiskers.down
    fig.add_trace(go.Scatter(
        x=part["batch_size"], y=part["speedup"], mode="markers", name=HELD_OUT_TRACE,
        text=part["hover"], hovertemplate="%{text}<extra></extra>",
        marker=dict(symbol="diamond", size=12, color=HELD_OUT_COLOR,
                    line=dict(width=1, color="white")),
        error_y=dict(type="data", symmetric=False, array=up, arrayminus=down,
                     thickness=1.5, width=5, color=HELD_OUT_COLOR)))
    intervals = [(float(lo), float(hi)) if ok else None
                 for lo, hi, ok in zip(part["ci_low"], part["ci_high"], has)]
    clip_markers(fig, list(part["batch_size"]), whiskers, intervals, HELD_OUT_COLOR)


def _y_range(frame: pd.DataFrame) -> tuple[float, float]:
    # Ratios around 1.0, the range the point estimates set (`report.whiskers`): a range
    # from zero, or one a few prompts' wide interval sets, would flatten the differences
    # that matter.
    return readable_range([finite(v) for v in frame["speedup"]])


def figure_of(d: BatchSize) -> go.Figure:
    """Speedup against batch size: fixed-K lines, the schedule, held-out points, the AR
    line at 1.0 and the batch size where the schedule stops speculating."""
    fig = go.Figure()
    _k_lines(fig, d.frame)
    _schedule_line(fig, d, d.frame)
    low, high = _y_range(d.frame)
    _held_out(fig, d.frame, (low, high))
    if d.stops_at is not None:
        # A trace, not a shape: shapes on a log axis take log10 coordinates, and a trace
        # also names the marker in the legend.
        fig.add_trace(go.Scatter(
            x=[d.stops_at, d.stops_at], y=[low, high], mode="lines",
            name=f"stops paying at B={d.stops_at}", hoverinfo="name",
            line=dict(color=STOP_COLOR, width=2, dash="dot")))
    layout(fig, "batch size (log₂ scale)", "speedup vs batched AR at the same batch size (×)")
    fig.update_xaxes(type="log", tickvals=d.batch_sizes, ticktext=[str(b) for b in d.batch_sizes])
    fig.update_yaxes(range=[low, high])
    parity_line(fig, "speedup")
    return fig


# Each column's title and digits, in `BatchSizeRow.cells` order.
_TABLE_HEADS = (("batch size", 0), ("chosen K", 0), ("held-out speedup", 2),
                ("90% interval", 2), ("held-out tok/s", 1), ("batched AR tok/s (held-out)", 1),
                ("search speedup", 2), ("search tok/s", 1), ("batched AR tok/s (search)", 1),
                ("τ (search)", 2))


def _table(rows: list[BatchSizeRow], stops_at: int | None) -> str:
    heads = "".join(f"<th>{esc(title)}</th>" for title, _ in _TABLE_HEADS)
    body = []
    for row in rows:
        cells = "".join(f'<td class="nowrap">{esc(num(value, digits))}</td>'
                        for value, (_, digits) in zip(row.cells(), _TABLE_HEADS))
        # The row where speculation stops paying stands out, as the best row does elsewhere.
        cls = ' class="best"' if row.batch_size == stops_at else ""
        body.append(f"<tr{cls}>{cells}</tr>")
    return (f"<div class='table-wrap'><table><thead><tr>{heads}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


_HOW = ("Speedup = tokens/s with speculation ÷ tokens/s of batched autoregressive decoding at "
        "the same batch size, a paired ratio over the same prompts with AR interleaved, all "
        "measured in one run on this machine (90% paired bootstrap intervals). Thin lines: "
        "each fixed K on the search prompts (K=0 is batched AR itself, the dashed line at "
        "1.0). Thick line: the schedule, the K chosen at each batch size; it was chosen on "
        "those same prompts, so it flatters the choice. Diamonds: the chosen K re-measured on "
        "held-out prompts the choice never saw, with their intervals: the figures to trust.")


def render(d: BatchSize) -> str:
    """The panel's section (the page calls it only with data: `Panel.shows`)."""
    facts = ", ".join(x for x in (f"method {d.method}" if d.method else "",
                                  f"objective {d.objective}" if d.objective else "",
                                  plural(len(d.batch_sizes), "tuned batch size")) if x)
    head = f'<p class="headline">{esc(d.stop_text)}</p>'
    line = f"<p>{esc(d.line)} ({esc(facts)}).</p>" if d.line else f"<p>{esc(facts)}.</p>"
    plot = figure(figure_of(d), "fig-batch-size") if not d.frame.empty else ""
    table = _table(d.table, d.stops_at) if d.table else ""
    return section(PANEL_ID, "Batch size", _HOW, head + line + plot + note(d.note) + table)


PANEL = Panel(PANEL_ID, lambda i: data(i.schedule), render, optional=True)
