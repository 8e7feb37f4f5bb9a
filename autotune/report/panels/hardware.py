"""Verify cost on this hardware: what one forward of the target costs against the number
of tokens it verifies in that pass (the run folder's hardware_profile.json), the range
where extra draft tokens ride along almost for free, and where the best config sits. When
the profile also holds the batched verify pass ("batch": B rows x n tokens per row, from
`autotune search --batch-sizes` or `autotune profile --batch-sizes`), a second pair of
figures shows it and where batching stops amortising."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import optuna
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autotune.records.profile import FREE_FACTOR, PROFILE_FILE, free_tokens
from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.style import (
    BEST_COLOR,
    SMALL_FIG_HEIGHT,
    esc,
    figure,
    layout,
    note,
    section,
)
from autotune.report.trials import best_speculative, finite, metrics_of, pick

FREE_TOLERANCE = FREE_FACTOR - 1    # "free": within 10 % of the cost of verifying one token
_PROFILE_COLUMNS = ["tokens", "ms", "ms_min", "ms_per_token"]
_BATCH_COLUMNS = ["batch_size", "tokens", "ms", "ms_min", "ms_per_row"]


@dataclass
class Hardware:
    """The target's forward cost against the tokens verified in one pass.

    `frame`: tokens, ms (median), ms_min, ms_per_token (median / tokens), by tokens.
    `free_up_to`: the largest n whose median is within FREE_TOLERANCE of the 1-token
    cost; `extra_ms_per_token`: the slope of a least-squares line through the medians
    from there on. `verified`: the best speculative trial's mean_verified_tokens."""

    frame: pd.DataFrame
    info: dict[str, str] = field(default_factory=dict)
    free_up_to: int | None = None
    base_ms: float | None = None
    extra_ms_per_token: float | None = None
    verified: float | None = None
    verified_number: int | None = None
    note: str | None = None
    # The batched verify pass, only when the profile has "batch" (None otherwise, and the
    # panel is drawn as without it): batch_size, tokens (per row), ms, ms_min, ms_per_row
    # (ms / batch_size), by batch size then tokens; its own model/device/context info.
    batch: pd.DataFrame | None = None
    batch_info: dict[str, str] = field(default_factory=dict)
    batch_note: str | None = None


class ProfilePoint(BaseModel):
    """One measured point of hardware_profile.json (`measure.profile`): the median (and
    fastest) ms of a target forward verifying `tokens` tokens. Strict, as a point is
    either usable or left out: tokens a positive integer, ms a positive finite number;
    an unusable `ms_min` is only absent."""

    model_config = ConfigDict(strict=True, frozen=True)

    tokens: int = Field(ge=1)
    ms: float = Field(gt=0, allow_inf_nan=False)
    ms_min: float | None = None

    @field_validator("ms_min", mode="before")
    @classmethod
    def _positive_or_absent(cls, value: object) -> float | None:
        ms = finite(value)
        return ms if ms is not None and ms > 0 else None


class BatchPoint(ProfilePoint):
    """One point of the profile's "batch" entry: one pass over `batch_size` rows of
    `tokens` tokens each."""

    batch_size: int = Field(ge=1)


Point = TypeVar("Point", bound=ProfilePoint)


def _points(doc: object, key: str, model: type[Point]) -> tuple[list[Point], int]:
    """The usable points listed under `key` of a profile document (an object), and how
    many entries were not (not an object, a bad figure)."""
    entries = doc.get(key) if isinstance(doc, Mapping) else None
    points, dropped = [], 0
    for entry in entries if isinstance(entries, list) else []:
        try:
            points.append(model.model_validate(entry))
        except ValidationError:
            dropped += 1
    return points, dropped


def profile_points(doc: object) -> tuple[pd.DataFrame, int]:
    """The valid points of a hardware profile document, by tokens, and how many entries
    were left out (not an object, tokens not a positive integer, ms not a positive finite
    number, a repeated token count)."""
    points, dropped = _points(doc, "points", ProfilePoint)
    rows, seen = [], set()
    for point in points:
        if point.tokens in seen:
            dropped += 1
            continue
        seen.add(point.tokens)
        rows.append((point.tokens, point.ms, point.ms_min, point.ms / point.tokens))
    frame = pd.DataFrame(rows, columns=_PROFILE_COLUMNS)
    return frame.sort_values("tokens", ignore_index=True), dropped


def batch_points(batch: object) -> tuple[pd.DataFrame, int]:
    """The valid points of a profile's "batch" entry, by batch size then tokens, and how
    many were left out (not an object, batch size or tokens not a positive integer, ms
    not a positive finite number, a repeated (batch size, tokens) pair)."""
    points, dropped = _points(batch, "batch_points", BatchPoint)
    rows, seen = [], set()
    for point in points:
        if (point.batch_size, point.tokens) in seen:
            dropped += 1
            continue
        seen.add((point.batch_size, point.tokens))
        rows.append((point.batch_size, point.tokens, point.ms, point.ms_min,
                     point.ms / point.batch_size))
    frame = pd.DataFrame(rows, columns=_BATCH_COLUMNS)
    return frame.sort_values(["batch_size", "tokens"], ignore_index=True), dropped


def _batch_summary(frame: pd.DataFrame) -> str:
    """At the fewest tokens per row (1: a batched AR step), each batch size's pass against
    one row's, and the first step up in batch size where the per-row cost falls by less
    than FREE_TOLERANCE: past it, more rows cost about as much again as they bring."""
    n = int(frame["tokens"].min())
    at = frame[frame["tokens"] == n].set_index("batch_size")["ms"]
    what = f"{n} token{'s' if n > 1 else ''} per row"
    if 1 not in at.index or len(at) < 2:
        return (f"At {what} there is no 1-row pass and another batch size to compare: the "
                f"table of points is all there is.")
    one = float(at[1])
    sizes = [int(b) for b in at.index if b > 1]
    costs = " / ".join(f"{at[b] / one:.2f}x" for b in sizes)
    per_row = " / ".join(f"{at[b] / one / b:.2f}x" for b in sizes)
    text = (f"At {what}, one pass over {' / '.join(map(str, sizes))} rows costs {costs} "
            f"one row's ({per_row} per row).")
    ordered = [int(b) for b in at.index]
    for small, large in zip(ordered, ordered[1:]):
        if at[large] / large > (1 - FREE_TOLERANCE) * at[small] / small:
            return (text + f" From {small} to {large} rows the per-row cost falls by less "
                           f"than {FREE_TOLERANCE:.0%}: batching stops amortising there.")
    return text + f" The per-row cost still falls at every step up to {ordered[-1]} rows."


def _batch(batch: object) -> tuple[pd.DataFrame, dict[str, str], str]:
    """The "batch" entry as (points, its display info, the note under its figures)."""
    frame, dropped = batch_points(batch)
    info = pick(batch, ("model", "device", "dtype", "context_tokens", "repeats"))
    if frame.empty:
        return frame, info, (f"{PROFILE_FILE} has a \"batch\" entry with no valid point "
                             "(batch_size >= 1, tokens >= 1, ms > 0): nothing to plot.")
    notes = [_batch_summary(frame)]
    if dropped:
        notes.append(f"{dropped} malformed batch point{'s' if dropped != 1 else ''} left out.")
    return frame, info, " ".join(notes)


def free_up_to(frame: pd.DataFrame, tolerance: float = FREE_TOLERANCE) -> int | None:
    """The largest token count whose median cost is within `tolerance` of the 1-token
    cost; None without a 1-token point."""
    if not (frame["tokens"] == 1).any():
        return None
    # profile.free_tokens measures against the first point: the 1-token one, once sorted.
    points = frame.sort_values("tokens")[["tokens", "ms"]].to_dict("records")
    return int(free_tokens({"points": points}, 1 + tolerance))


def marginal_ms(frame: pd.DataFrame, start: int) -> float | None:
    """Milliseconds per extra verified token beyond `start`: the least-squares slope of
    the medians at `start` tokens and above (None with fewer than two such points)."""
    part = frame[frame["tokens"] >= start]
    if len(part) < 2:
        return None
    x, y = part["tokens"].astype(float), part["ms"].astype(float)
    mx, my = x.mean(), y.mean()
    return float(((x - mx) * (y - my)).sum() / ((x - mx) ** 2).sum())


def data(doc: Any, study: optuna.Study | None = None, objective: ObjectiveInfo | None = None,
         problem: str | None = None) -> Hardware:
    """The hardware panel from the run folder's hardware_profile.json (`doc`: its parsed
    content, None when there is none; `problem`: why it could not be read), with the best
    speculative trial's mean verified tokens per pass when the study is given."""
    empty = pd.DataFrame(columns=_PROFILE_COLUMNS)
    if problem:
        return Hardware(empty, note=f"Cannot read {PROFILE_FILE}: {problem}. `autotune search` "
                                    f"writes it into the run folder.")
    if doc is None:
        return Hardware(empty, note=f"No {PROFILE_FILE} in this run folder: `autotune search` "
                                    "writes it into the run folder (runs from before it did "
                                    "have none).")
    frame, dropped = profile_points(doc)
    if frame.empty:
        what = "is not a JSON object" if not isinstance(doc, dict) else (
            "has no list of points" if not isinstance(doc.get("points"), list)
            else "has no valid point (tokens >= 1, ms > 0)")
        return Hardware(empty, note=f"{PROFILE_FILE} {what}: nothing to plot. `autotune search` "
                                    "writes it into the run folder.")
    info = pick(doc, ("model", "device", "dtype", "context_tokens", "repeats"))
    out = Hardware(frame, info)
    notes = []
    out.free_up_to = free_up_to(frame)
    if out.free_up_to is None:
        notes.append("The profile has no 1-token point: the cost of verifying one token, "
                     "which 'free' is measured against, is unknown.")
    else:
        out.base_ms = float(frame[frame["tokens"] == 1]["ms"].iloc[0])
        n = out.free_up_to
        if n >= int(frame["tokens"].max()):
            notes.append(f"Verifying up to {n} tokens, every size measured, costs about as much "
                         f"as one on this hardware ({out.base_ms:.3g} ms, within "
                         f"{FREE_TOLERANCE:.0%}).")
        else:
            out.extra_ms_per_token = marginal_ms(frame, n)
            extra = (f"; beyond that each extra token costs ~{out.extra_ms_per_token:.3g} ms"
                     if out.extra_ms_per_token is not None else "")
            if n == 1:
                nxt = frame[frame["tokens"] > 1].iloc[0]
                notes.append(f"Verifying is not free on this hardware: already "
                             f"{int(nxt['tokens'])} tokens cost {nxt['ms'] / out.base_ms:.2f}x "
                             f"one ({out.base_ms:.3g} ms){extra}.")
            else:
                notes.append(f"Verifying up to {n} tokens costs about as much as one on this "
                             f"hardware ({out.base_ms:.3g} ms, within "
                             f"{FREE_TOLERANCE:.0%}){extra}.")
    if dropped:
        notes.append(f"{dropped} malformed point{'s' if dropped != 1 else ''} left out.")
    if study is not None and objective is not None:
        best, _ = best_speculative(study, objective)
        verified = finite(metrics_of(best).mean_verified_tokens) if best is not None else None
        if best is not None and verified is not None:
            out.verified, out.verified_number = verified, best.number
            where = ""
            if out.free_up_to is not None:
                where = (" (inside the free range)" if verified <= out.free_up_to
                         else " (past the free range)")
            notes.append(f"The best speculative config, #{best.number}, verifies {verified:.3g} "
                         f"tokens per pass on average{where}.")
    out.note = " ".join(notes) or None
    if "batch" in doc:
        out.batch, out.batch_info, out.batch_note = _batch(doc["batch"])
    return out


def _batch_figures(hw: Hardware) -> str:
    """The batched verify pass: ms per pass and ms per row against tokens per row, one
    line per batch size, with the text that says what was (and was not) timed."""
    assert hw.batch is not None
    context = hw.batch_info.get("context_tokens", "?")
    text = (f'Batched verify pass ({PROFILE_FILE}, "batch"): one batched target pass over B '
            f"rows x n tokens, bare forward after {context} context tokens; the batched "
            "decoder adds each row's drafting and bookkeeping. Left: ms per pass; right: ms "
            "per row (ms / B). Where a larger B's line stops falling below a smaller one's "
            "on the right, batching stops amortising.")
    head = f'<p class="how">{esc(text)}</p>'

    if hw.batch.empty:
        return head + note(hw.batch_note)
    b = hw.batch
    sizes = sorted(int(x) for x in b["batch_size"].unique())
    # Ordered colours (dark = few rows, light = many), stopping short of viridis' pale
    # yellow, which is hard to see on white.
    colors = sample_colorscale("Viridis", [0.85 * i / max(1, len(sizes) - 1)
                                           for i in range(len(sizes))])
    cost, per = go.Figure(), go.Figure()
    for size, color in zip(sizes, colors):
        part = b[b["batch_size"] == size]
        for fig, column, what in ((cost, "ms", "ms per pass"), (per, "ms_per_row", "ms per row")):
            fig.add_trace(go.Scatter(
                x=part["tokens"], y=part[column], mode="lines+markers", name=f"B={size}",
                line=dict(color=color, width=2), marker=dict(size=5),
                hovertemplate=f"B={size}, %{{x}} tokens per row: %{{y:.3f}} {what}<extra></extra>"))
    layout(cost, "tokens per row in one pass", "ms per batched target forward", SMALL_FIG_HEIGHT,
           title="cost of one batched verify pass")
    cost.update_yaxes(rangemode="tozero")
    layout(per, "tokens per row in one pass", "ms per row (ms / B)", SMALL_FIG_HEIGHT,
           title="cost per row")
    per.update_yaxes(rangemode="tozero")
    return (head + f'<div class="grid"><div class="cell">{figure(cost, "fig-hardware-batch")}'
            f'</div><div class="cell">{figure(per, "fig-hardware-batch-per-row")}</div></div>'
            + note(hw.batch_note))


def render(hw: Hardware) -> str:
    how = ("What one forward of the target costs against the number of tokens it verifies "
           "in that pass (left: ms per pass, median and fastest; right: ms per token). Where "
           "the left curve is flat, extra draft tokens ride along almost for free: the shaded "
           f"range stays within {FREE_TOLERANCE:.0%} of the 1-token cost.")
    title = "Verify cost on this hardware"
    if hw.frame.empty:
        return section("hardware", title, how, note(hw.note))
    f = hw.frame
    cost = go.Figure()
    if hw.free_up_to is not None and hw.free_up_to > int(f["tokens"].min()):
        cost.add_vrect(x0=float(f["tokens"].min()), x1=float(hw.free_up_to),
                       fillcolor="#009E73", opacity=0.10, line_width=0,
                       annotation_text=f"free up to {hw.free_up_to}",
                       annotation_position="top left")
    if hw.base_ms is not None:
        cost.add_hline(y=hw.base_ms * (1 + FREE_TOLERANCE), line=dict(color="#888", dash="dot", width=1),
                       annotation_text=f"1 token +{FREE_TOLERANCE:.0%}",
                       annotation_position="bottom right")
    mins = f[f["ms_min"].notna()]
    if not mins.empty:
        cost.add_trace(go.Scatter(x=mins["tokens"], y=mins["ms_min"], mode="lines", name="fastest",
                                  line=dict(color="#0072B2", width=1, dash="dot"), opacity=0.45,
                                  hovertemplate="%{x} tokens: fastest %{y:.3f} ms<extra></extra>"))
    cost.add_trace(go.Scatter(x=f["tokens"], y=f["ms"], mode="lines+markers", name="median",
                              line=dict(color="#0072B2", width=2), marker=dict(size=5),
                              hovertemplate="%{x} tokens: median %{y:.3f} ms<extra></extra>"))
    per = go.Figure(go.Scatter(x=f["tokens"], y=f["ms_per_token"], mode="lines+markers",
                               name="median / tokens", line=dict(color="#E69F00", width=2),
                               marker=dict(size=5),
                               hovertemplate="%{x} tokens: %{y:.4f} ms per token<extra></extra>"))
    for fig, where in ((cost, "right"), (per, "top right")):
        # Mid-height on the cost plot, clear of the "free up to" label and of the curve.
        if hw.verified is not None:
            fig.add_vline(x=hw.verified, line=dict(color=BEST_COLOR, width=1.5, dash="dash"),
                          annotation_text=f"best #{hw.verified_number}: {hw.verified:.3g} verified",
                          annotation_position=where)
    layout(cost, "tokens verified in one pass", "ms per target forward", SMALL_FIG_HEIGHT,
           title="cost of one verify pass")
    cost.update_yaxes(rangemode="tozero")
    layout(per, "tokens verified in one pass", "ms per verified token (log)", SMALL_FIG_HEIGHT,
           title="cost per verified token", legend=False)
    per.update_yaxes(type="log")
    info = hw.info
    measured = ", ".join(x for x in (
        info.get("model"), f"on {info['device']}" if info.get("device") else None, info.get("dtype"),
        f"context {info['context_tokens']} tokens" if info.get("context_tokens") else None,
        f"median of {info['repeats']} repeats" if info.get("repeats") else None) if x)
    head = f'<p class="how">Measured: {esc(measured)} ({esc(PROFILE_FILE)}).</p>' if measured else ""
    body = (head + f'<div class="grid"><div class="cell">{figure(cost, "fig-hardware")}</div>'
            f'<div class="cell">{figure(per, "fig-hardware-per-token")}</div></div>')
    if hw.batch is not None:
        # After the single-row note, so a page without "batch" reads exactly as before.
        return section("hardware", title, how, body + note(hw.note) + _batch_figures(hw))
    return section("hardware", title, how, body + note(hw.note))


PANEL = Panel("hardware", lambda i: data(i.profile, i.study, i.objective, i.profile_problem), render)
