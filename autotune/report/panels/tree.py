"""Draft trees, width × depth: the best trial per tree shape (at its best token budget)
as a heatmap, with the chains of the same drafters and the static trees in their own
columns, and how often the accepted path reached each depth."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.trial import FrozenTrial

from autotune.schema.shape import CHAIN, STATIC, DraftShape
from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.style import esc, figure, layout, method_color, note, section
from autotune.report.trials import (
    complete_trials,
    config_of,
    finite,
    metrics_of,
    response,
    response_metric,
    shape_of,
    trial_label,
    trial_method,
)

# The heatmap's columns besides the tree widths (as text).
CHAIN_COLUMN, STATIC_COLUMN = "chain", "static"
_CELL_COLUMNS = ["column", "depth", "value", "number", "label", "method", "tokens", "nodes",
                 "budgets", "n_trials", "is_best"]
_DEPTH_COLUMNS = ["number", "label", "method", "role", "depth", "share"]


@dataclass
class TreePanel:
    """Speedup over the shape of the draft tree.

    `cells`: one row per heatmap cell, the best trial of that shape: column ("chain",
    the tree width as text, or "static"), depth, value (the response metric), number,
    label, method, tokens (its tree_tokens; 0 = every drafted node), nodes (nodes
    verified per round), budgets (the tree_tokens tried in the cell, as text), n_trials,
    is_best (the best cell). `columns`: the column order. `depth_acc`: number, label,
    method, role, depth, share: the depth acceptance of the best tree and best chain."""

    metric: str
    metric_title: str
    higher_better: bool
    columns: list[str]
    cells: pd.DataFrame
    depth_acc: pd.DataFrame
    note: str | None = None


def _budget(tokens: int) -> str:
    return "all" if tokens == 0 else str(tokens)


def _sign_of(metric: str, objective: ObjectiveInfo) -> int:
    """+1 when smaller is better for `metric` (speedup and unknown metrics: larger)."""
    if metric in objective.metrics:
        return objective.sign(objective.metrics.index(metric))
    return -1


def _column(shape: DraftShape) -> str:
    return {CHAIN: CHAIN_COLUMN, STATIC: STATIC_COLUMN}.get(shape.kind, str(shape.width))


def data(study: optuna.Study, objective: ObjectiveInfo) -> TreePanel:
    """The best speedup per tree width × depth, at the best token budget.

    Per (width, depth) cell, the complete trial with the best speedup (else the first
    objective) over every tree_tokens tried there: the cell shows its value and names its
    budget. Chains (tree_width 0) of the methods that also drafted trees form a "chain"
    column at depth = k, a tree of width 1 in all but the exit policy; static trees
    (tree_choices) a "static" column at their deepest path."""
    trials = complete_trials(study)
    metric, title = response_metric(trials, objective)
    sign = _sign_of(metric, objective)
    shaped = [(t, shape) for t in trials
              if (shape := shape_of(config_of(t), trial_method(t))) is not None]
    tree_methods = {trial_method(t) for t, s in shaped if s.is_tree}
    empty = TreePanel(metric, title, sign < 0, [], pd.DataFrame(columns=_CELL_COLUMNS),
                      pd.DataFrame(columns=_DEPTH_COLUMNS))
    if not trials:
        empty.note = "No trial has completed yet."
        return empty
    if not tree_methods:
        empty.note = ("No trial drafted a tree: every config is a chain (tree_width 0, no "
                      "tree_choices). A search space with tree knobs (tree_width, tree_depth, "
                      "tree_tokens) fills this panel.")
        return empty
    groups: dict[tuple[str, int], list[tuple[FrozenTrial, DraftShape, float]]] = {}
    unmeasured = []
    for t, shape in shaped:
        if not shape.is_tree and trial_method(t) not in tree_methods:
            continue
        value = response(t, metric, objective)
        if value is None:
            unmeasured.append(f"#{t.number}")
            continue
        # levels: a chain's k, a dynamic tree's depth, a static tree's deepest path.
        groups.setdefault((_column(shape), shape.levels), []).append((t, shape, value))
    rows = []
    for (column, depth), members in groups.items():
        t, shape, value = min(members, key=lambda m: (sign * m[2], m[0].number))
        budgets = sorted({m[1].tokens for m in members}, key=lambda b: (b == 0, b))
        rows.append({"column": column, "depth": depth, "value": value, "number": t.number,
                     "label": trial_label(t), "method": trial_method(t), "tokens": shape.tokens,
                     "nodes": shape.nodes,
                     "budgets": (", ".join(_budget(b) for b in budgets)
                                 if column not in (CHAIN_COLUMN, STATIC_COLUMN) else ""),
                     "n_trials": len(members), "is_best": False})
    cells = pd.DataFrame(rows, columns=_CELL_COLUMNS)
    widths = sorted({int(c) for c in cells["column"] if c not in (CHAIN_COLUMN, STATIC_COLUMN)})
    columns = (([CHAIN_COLUMN] if (cells["column"] == CHAIN_COLUMN).any() else [])
               + [str(w) for w in widths]
               + ([STATIC_COLUMN] if (cells["column"] == STATIC_COLUMN).any() else []))
    notes = []
    if not (cells["column"] != CHAIN_COLUMN).any():
        cells = cells.iloc[0:0]
        columns = []
    if not cells.empty:
        cells = cells.sort_values(["depth", "column"], key=lambda c: c.map(columns.index)
                                  if c.name == "column" else c, ignore_index=True)
        best_at = min(range(len(cells)), key=lambda i: (sign * cells.at[i, "value"], cells.at[i, "number"]))
        cells.loc[best_at, "is_best"] = True
        notes.append(_summary(cells, metric, sign))
    else:
        notes.append(f"No tree trial measured {metric}.")
    if unmeasured:
        notes.append(f"No {metric} for {', '.join(unmeasured)}.")
    depth_acc = _depth_acceptance(cells, sign, {t.number: t for t in trials})
    if not cells.empty and depth_acc.empty:
        notes.append("No depth acceptance recorded for the best tree or chain.")
    return TreePanel(metric, title, sign < 0, columns, cells, depth_acc, " ".join(notes) or None)


def _shape_text(row: Any) -> str:
    """`tree w4 d5 t30`, `chain k=4`, `static tree, 12 nodes, depth 4` for a cell row."""
    if row["column"] == CHAIN_COLUMN:
        return f"chain k={row['depth']}"
    if row["column"] == STATIC_COLUMN:
        return f"static tree, {row['nodes']} nodes, depth {row['depth']}"
    return f"tree w{row['column']} d{row['depth']} t={_budget(int(row['tokens']))}"


def _best_row(part: pd.DataFrame, sign: int) -> Any:
    return min(part.index, key=lambda i: (sign * part.at[i, "value"], part.at[i, "number"]))


def _summary(cells: pd.DataFrame, metric: str, sign: int) -> str:
    """The best tree against the best chain, and how to read the chain / static columns."""
    unit = "×" if metric == "speedup" else f" {metric}"
    trees = cells[cells["column"] != CHAIN_COLUMN]
    chains = cells[cells["column"] == CHAIN_COLUMN]
    tree = trees.loc[_best_row(trees, sign)]
    parts = [f"Best tree: #{tree['number']} {tree['method']} {_shape_text(tree)}, "
             f"{tree['value']:.3g}{unit}"]
    if not chains.empty:
        chain = chains.loc[_best_row(chains, sign)]
        parts[0] += (f"; best chain of the same drafters: #{chain['number']} {chain['method']} "
                     f"{_shape_text(chain)}, {chain['value']:.3g}{unit}")
    parts[0] += "."
    parts.append("Each cell is the best trial of its width and depth over the token budgets tried "
                 "there (t: tree_tokens, the nodes kept after the rerank; t=all keeps every "
                 "drafted node).")
    if not chains.empty:
        parts.append("The chain column holds the chains (tree_width 0) of the drafters that also "
                     "drafted trees, at depth = k, the most tokens a chain drafts per round: a "
                     "width-1 tree but for its exit policy.")
    statics = cells[cells["column"] == STATIC_COLUMN]
    if not statics.empty:
        listed = "; ".join(f"#{r.number} {r.method} {r.nodes} nodes to depth {r.depth}: "
                           f"{r.value:.3g}{unit}" for r in statics.itertuples(index=False))
        parts.append(f"The static column holds static trees (tree_choices) at their deepest "
                     f"path: {listed}.")
    return " ".join(parts)


def _depth_acceptance(cells: pd.DataFrame, sign: int, by_number: dict[int, FrozenTrial]) -> pd.DataFrame:
    """Depth acceptance (share of rounds whose accepted path reached depth d, among those
    that drafted that deep) of the best tree and of the best chain, when recorded."""
    rows = []
    for role, part in (("best tree", cells[cells["column"] != CHAIN_COLUMN]),
                       ("best chain", cells[cells["column"] == CHAIN_COLUMN])):
        if part.empty:
            continue
        t = by_number[int(part.at[_best_row(part, sign), "number"])]
        values = metrics_of(t).depth_acceptance
        if not isinstance(values, list):
            continue
        rows += [{"number": t.number, "label": trial_label(t), "method": trial_method(t),
                  "role": role, "depth": d, "share": finite(v)}
                 for d, v in enumerate(values, start=1) if finite(v) is not None]
    return pd.DataFrame(rows, columns=_DEPTH_COLUMNS)


# ------------------------------------------------------------------ figures
def _cell_text(row: Any, unit: str, best: bool) -> str:
    """What a tree cell prints: its value and token budget (nodes for a static tree)."""
    value = f"{'★ ' if best else ''}{row.value:.2f}{unit}"
    if row.column == CHAIN_COLUMN:
        return value
    if row.column == STATIC_COLUMN:
        return f"{value}<br>{row.nodes} nodes"
    return f"{value}<br>t={'all' if row.tokens == 0 else row.tokens}"


def _cell_hover(row: Any, metric: str) -> str:
    if row.column == CHAIN_COLUMN:
        shape = f"chain, k={row.depth}"
    elif row.column == STATIC_COLUMN:
        shape = f"static tree (tree_choices): {row.nodes} nodes, depth {row.depth}"
    else:
        shape = (f"tree width {row.column}, depth {row.depth}, "
                 f"tree_tokens {'all' if row.tokens == 0 else row.tokens} ({row.nodes} nodes)")
    lines = [f"#{row.number} {row.method}: {shape}", f"{metric} {row.value:.3f}",
             esc(row.label)]
    if row.budgets:
        lines.append(f"budgets tried here: {row.budgets}")
    lines.append(f"{row.n_trials} trial{'s' if row.n_trials != 1 else ''} of this shape")
    return "<br>".join(lines)


def render(tp: TreePanel) -> str:
    how = ("The best trial per draft-tree shape: x is the tree width (children expanded per "
           "node), y the depth (levels drafted); each cell shows its best "
           f"{tp.metric} and the token budget t that gave it (★: the best cell). "
           "Hover for the trial. Where recorded, the right plot shows how often the accepted "
           "path reached each depth.")
    title = "Draft trees: width × depth"
    if tp.cells.empty:
        return section("tree", title, how, note(tp.note))
    depths = sorted({int(d) for d in tp.cells["depth"]})
    rows_y = [str(d) for d in depths]
    z: list[list[float | None]] = [[None] * len(tp.columns) for _ in depths]
    text = [[""] * len(tp.columns) for _ in depths]
    hover = [[""] * len(tp.columns) for _ in depths]
    unit = "×" if tp.metric == "speedup" else ""
    for row in tp.cells.itertuples(index=False):
        i, j = depths.index(int(row.depth)), tp.columns.index(row.column)
        z[i][j] = float(row.value)
        text[i][j] = _cell_text(row, unit, bool(row.is_best))
        hover[i][j] = _cell_hover(row, tp.metric)
    if tp.metric == "speedup":
        # White at AR parity: blue cells beat plain decoding, red ones lose to it.
        scale: dict[str, str | float | bool] = dict(colorscale="RdBu", zmid=1.0)
    else:
        scale = dict(colorscale="Viridis", reversescale=not tp.higher_better)
    ticks = {CHAIN_COLUMN: "chain (k)", STATIC_COLUMN: "static"}
    fig = go.Figure(go.Heatmap(
        z=z, x=tp.columns, y=rows_y, text=text, texttemplate="%{text}", hovertext=hover,
        hovertemplate="%{hovertext}<extra></extra>", xgap=2, ygap=2, hoverongaps=False,
        colorbar=dict(title=dict(text=tp.metric_title, side="right")), **scale))
    layout(fig, "tree width (children per node)", "tree depth (levels; chain: k)",
           max(300, 60 + 48 * len(depths)), legend=False)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=tp.columns,
                     tickvals=tp.columns, ticktext=[ticks.get(c, c) for c in tp.columns])
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=rows_y)
    heat = figure(fig, "fig-tree")
    if tp.depth_acc.empty:
        return section("tree", title, how, heat + note(tp.note))
    acc = go.Figure()
    for role, part in tp.depth_acc.groupby("role", sort=False):
        tree = role == "best tree"
        acc.add_trace(go.Scatter(
            x=part["depth"], y=part["share"], mode="lines+markers",
            name=f"{role}: #{part['number'].iloc[0]}",
            line=dict(color=method_color(str(part["method"].iloc[0])), width=2.5 if tree else 1.5,
                      dash="solid" if tree else "dash"),
            marker=dict(symbol="star" if tree else "circle", size=9 if tree else 6),
            hovertemplate=f"{esc(role)} #{part['number'].iloc[0]}: depth %{{x}}<br>"
                          "reached in %{y:.2f} of the rounds that drafted it<extra></extra>"))
    layout(acc, "depth d", "share of rounds reaching depth d", max(300, 60 + 48 * len(depths)))
    acc.update_yaxes(range=[0, 1.05])
    acc.update_xaxes(dtick=1)
    body = (f'<div class="grid"><div class="cell">{heat}</div>'
            f'<div class="cell">{figure(acc, "fig-tree-depth")}</div></div>')
    return section("tree", title, how, body + note(tp.note))


PANEL = Panel("tree", lambda i: data(i.study, i.objective), render)
