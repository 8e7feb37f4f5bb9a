"""The finalists, re-measured on held-out prompts: where speculation pays and where it
hurts. Per finalist (the search's best distinct configs and the strongest engine default),
its validated paired speedup overall ("all") and per prompt category, with the 90%
bootstrap interval as error bars and the AR parity line at 1.0; below, a table of the
finalists with the search's figure beside the validated one.

Reads the study's validation record (`validation.current_record`); a run without one, or
whose record is stale, gets a note: its figures are the search's own."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import optuna
import pandas as pd
import plotly.graph_objects as go

from autotune.common.interval import Interval
from autotune.frozen.record import CategoryFigures
from autotune.report.documents import readable_parts
from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.style import esc, figure, layout, note, num, parity_line, section
from autotune.report.trials import finite
from autotune.report.verdict import plural, search_speedup, stale_reason
from autotune.report.whiskers import clip, clip_markers, readable_range
from autotune.records.answer import current_record
from autotune.records.validation import FinalistEntry, ValidationRecord

ALL = "all"
# One colour per finalist, in the record's order (Okabe-Ito, colour-blind safe): two
# finalists of one method must still be told apart.
FINALIST_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",
                   "#F0E442", "#000000")
FRAME_COLUMNS = ["trial", "legend", "label", "role", "chosen", "group", "speedup", "ci_low",
                 "ci_high", "prompts", "tau", "hover"]


@dataclass
class Finalists:
    """`frame`: one row per finalist and group (FRAME_COLUMNS; `group` is "all" first,
    then the validation categories in the record's order; `ci_low` / `ci_high` NaN where
    there is no interval, e.g. a category of one prompt). `table`: `finalist_rows`.
    `facts`: the record's shared facts as display strings. `note`: why nothing is drawn
    (no record, a stale one, no finalist), or None."""

    frame: pd.DataFrame
    table: list[FinalistRow] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)
    note: str | None = None


@dataclass(frozen=True)
class FinalistRow:
    """One finalist in the table: who it is, the search's own speedup beside the
    validated one and its 90% interval, τ (validated tokens per round), lossless,
    near_ties (prompts that left AR's output at a near-tie the dtype's rounding explains;
    None for a record without the count), chosen (the record's winner)."""

    trial: int
    label: str
    role: str | None
    search_speedup: float | None
    speedup: float | None
    interval: Interval | None
    tau: float | None
    lossless: bool | None
    near_ties: int | None
    chosen: bool


def finalist_rows(record: ValidationRecord) -> list[FinalistRow]:
    """One row per finalist, in the record's order."""
    return [FinalistRow(f.trial, f.label, f.role, search_speedup(f), finite(f.speedup),
                        f.figures.interval, finite(f.figures.mean_accepted_tokens),
                        f.figures.lossless,
                        (len(f.figures.near_tie_prompts)
                         if f.figures.has("near_tie_prompts") else None),
                        f.trial == record.winner)
            for f in record.finalists]


@dataclass(frozen=True)
class GroupFigures:
    """A finalist's figures on one group of held-out prompts ("all" or a category)."""

    speedup: float | None
    interval: Interval | None
    tau: float | None
    prompts: int | None
    estimator: str | None = None


def _hover(f: FinalistEntry, group: str, figures: GroupFigures) -> str:
    head = f"#{f.trial} {f.label} ({f.role})"
    speedup, ci, prompts, tau = figures.speedup, figures.interval, figures.prompts, figures.tau
    if speedup is None:
        return f"{head}<br>{group}: no figure (nothing decoded)"
    if figures.estimator == "predicted":
        return (f"{head}<br>{group}: {speedup:.3f}× predicted only (fewer than two of its "
                "prompts measured: not a result)")
    if ci is not None:
        figure_line = f"{group}: {speedup:.3f}× [{ci.low:.3f}, {ci.high:.3f}]"
        count = plural(prompts, "prompt") if prompts is not None else ""
    else:
        figure_line = f"{group}: {speedup:.3f}×"
        count = (f"{plural(prompts, 'prompt')}: no interval" if prompts is not None
                 else "no interval")
    extra = " · ".join(part for part in (count, f"τ {tau:.2f}" if tau is not None else "") if part)
    return f"{head}<br>{figure_line}" + (f"<br>{extra}" if extra else "")


def _groups(record: ValidationRecord) -> list[str]:
    """"all", then the categories in the record's order, then any only a finalist has."""
    # A prediction-powered record holds for its pool: the pool's categories.
    order = [ALL, *(record.pool_categories or record.categories or {})]
    for f in record.finalists:
        for category in f.figures.by_category:
            if category not in order:
                order.append(category)
    return order


def _figures(record: ValidationRecord, f: FinalistEntry, group: str) -> GroupFigures | None:
    """`f`'s figures on `group` (None: it has none there)."""
    if group == ALL:
        figures = f.figures
        # A prediction-powered record's figures hold for its pool.
        prompts = record.pool_prompts if record.written("pool_prompts") else record.prompts
        return GroupFigures(finite(figures.speedup), figures.interval,
                            finite(figures.mean_accepted_tokens), prompts)
    written = f.figures.by_category.get(group)
    if not isinstance(written, dict):
        return None
    category = readable_parts(CategoryFigures, written)
    return GroupFigures(finite(category.speedup), category.interval,
                        finite(category.mean_accepted_tokens), category.prompts,
                        category.estimator)


def frame_of(record: ValidationRecord) -> pd.DataFrame:
    """The plot's rows (FRAME_COLUMNS) from a validation record. Held-out prompts of a
    single category: "all" only (that category's figures are the same ones)."""
    groups = _groups(record)
    if len(groups) == 2:
        groups = [ALL]
    rows = []
    for f in record.finalists:
        chosen = f.trial == record.winner
        legend = f"{f.label} ({f.role})" + (" ✓ chosen" if chosen else "")
        for group in groups:
            figures = _figures(record, f, group)
            if figures is None:
                continue
            ci = figures.interval
            rows.append((f.trial, legend, f.label, f.role, chosen, group, figures.speedup,
                         ci.low if ci is not None else math.nan,
                         ci.high if ci is not None else math.nan, figures.prompts,
                         figures.tau, _hover(f, group, figures)))
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


def facts_of(record: ValidationRecord) -> dict[str, str]:
    """The record's shared facts as display strings."""
    facts = {"prompts": f"{plural(record.prompts, 'held-out prompt')} × "
                        f"{plural(record.repeats, 'repeat')}"
                        + (f" measured of a pool of {record.pool_prompts}, "
                           "prediction-powered (ppi++): the replay tier's predictions "
                           "on the pool corrected by the measured prompts"
                           if record.pooled else ""),
             "source": str(record.source or ""),
             "decision": record.decision.replace("_", " "),
             "reason": record.reason,
             "statistic": record.statistic}
    baseline_ms = finite(record.baseline_ms)
    if baseline_ms is not None:
        facts["AR baseline"] = f"{baseline_ms:.2f} ms/token"
    facts.update(record.measured_in())
    return {k: v for k, v in facts.items() if v}


def data(study: optuna.Study, objective: ObjectiveInfo | None = None) -> Finalists:
    """The finalists of the study's current validation record (a note without one).
    `objective` is unused: validation judges on the paired speedup whatever the search
    ranked; it is taken so every panel is called alike."""
    record = current_record(study)
    empty = pd.DataFrame(columns=FRAME_COLUMNS)
    if record is None:
        stale = stale_reason(study)
        why = (f"Not validated: {stale}." if stale else
               "Not validated: no finalists were re-measured on held-out prompts (a run from "
               "before validation, or one stopped before it).")
        return Finalists(empty, note=why + " The report's figures are the search's own.")
    rows, facts = finalist_rows(record), facts_of(record)
    if not rows:
        return Finalists(empty, [], facts, f"No finalist to validate: {record.reason}.")
    frame = frame_of(record)
    text = None if not frame.empty else "No finalist has a validated figure."
    if len(_groups(record)) == 2 and text is None:
        text = (f"Every held-out prompt is of one category ({_groups(record)[1]}): "
                "no split by category to show.")
    return Finalists(frame, rows, facts, text)


# ------------------------------------------------------------------ drawing
def _figure(frame: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    groups = list(dict.fromkeys(frame["group"]))
    bounds = readable_range(list(frame["speedup"]))
    for i, (legend, part) in enumerate(frame.groupby("legend", sort=False)):
        # No interval: no bar (None), never a zero-length one that reads as certainty; a
        # whisker past the readable range is cut there and marked (`report.whiskers`).
        whiskers = clip([finite(v) for v in part["speedup"]], [finite(v) for v in part["ci_low"]],
                        [finite(v) for v in part["ci_high"]], bounds)
        up, down = whiskers.up, whiskers.down
        chosen = bool(part["chosen"].iloc[0])
        fig.add_trace(go.Scatter(
            x=part["group"], y=part["speedup"], mode="markers", name=str(legend),
            offsetgroup=str(legend),
            text=part["hover"], hovertemplate="%{text}<extra></extra>",
            marker=dict(color=FINALIST_COLORS[i % len(FINALIST_COLORS)],
                        size=14 if chosen else 10, symbol="star" if chosen else "circle",
                        line=dict(width=1, color="#333")),
            error_y=dict(type="data", symmetric=False, array=up, arrayminus=down,
                         thickness=1.5, width=4)))
        intervals = [(lo, hi) if finite(lo) is not None and finite(hi) is not None else None
                     for lo, hi in zip(part["ci_low"], part["ci_high"])]
        clip_markers(fig, list(part["group"]), whiskers, intervals,
                     FINALIST_COLORS[i % len(FINALIST_COLORS)], offsetgroup=str(legend))
    layout(fig, "prompt category (all: every held-out prompt)", "validated speedup (× AR)")
    fig.update_layout(scattermode="group", scattergap=0.5)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=groups)
    parity_line(fig, "speedup")
    # Ratios around 1.0, the range the point estimates set (`report.whiskers`).
    fig.update_yaxes(range=list(bounds))
    if len(groups) > 1:
        # "all" pools the categories to its right: a thin rule sets it apart.
        fig.add_vline(x=0.5, line=dict(color="#ccc", width=1))
    return fig


_TABLE_HEADS = (("trial", False), ("config", True), ("role", True), ("search speedup", False),
                ("validated speedup", False), ("90% interval", False),
                ("τ (tokens/round)", False), ("lossless", False), ("near-ties", False),
                ("chosen", False))
NEAR_TIES = "near-ties"


def _cells(row: FinalistRow, near_ties: bool) -> str:
    """One finalist's cells, in `_TABLE_HEADS` order (the near-tie count where shown)."""
    cells = [f"<td>{esc(row.trial)}</td>",
             f'<td class="text label">{esc(row.label)}</td>',
             f'<td class="text nowrap">{esc(row.role) if row.role is not None else ""}</td>',
             f"<td>{esc(num(row.search_speedup))}</td>", f"<td>{esc(num(row.speedup))}</td>",
             f'<td class="nowrap">{esc(num(row.interval, 2))}</td>',
             f"<td>{esc(num(row.tau))}</td>", f"<td>{esc(num(row.lossless))}</td>"]
    if near_ties:
        cells.append(f"<td>{esc(num(row.near_ties))}</td>")
    cells.append(f"<td>{'✓' if row.chosen else ''}</td>")
    return "".join(cells)


def _table(rows: list[FinalistRow]) -> str:
    # The near-tie count only where some finalist has one (bf16 / fp16 records).
    near_ties = any(r.near_ties for r in rows)
    heads = "".join(f'<th class="{"text" if text else ""}">{esc(title)}</th>'
                    for title, text in _TABLE_HEADS if title != NEAR_TIES or near_ties)
    body = []
    for row in rows:
        cls = ' class="best"' if row.chosen else ""
        body.append(f"<tr{cls}>{_cells(row, near_ties)}</tr>")
    return (f"<div class='table-wrap'><table><thead><tr>{heads}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


def render(f: Finalists) -> str:
    how = ("The search's best distinct configs and the strongest engine default, re-measured "
           "against the AR baseline on prompts the search never saw (runs interleaved per "
           "prompt, repeats pooled): validated speedup overall and per category, with its 90% "
           "bootstrap interval over prompts; above the dashed line at 1.0 speculation pays. "
           "A category of one prompt has no interval.")
    title = "Finalists on held-out prompts"
    if f.frame.empty and not f.table:
        return section("finalists", title, how, note(f.note))
    facts = ""
    if f.facts:
        items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in f.facts.items())
        facts = f'<div class="summary facts"><dl>{items}</dl></div>'
    plot = figure(_figure(f.frame), "fig-finalists") if not f.frame.empty else ""
    return section("finalists", title, how, plot + note(f.note) + _table(f.table) + facts)


PANEL = Panel("finalists", lambda i: data(i.study, i.objective), render)
