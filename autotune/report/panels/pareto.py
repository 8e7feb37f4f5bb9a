"""The Pareto front: every complete trial in the plane of the first two objectives, the
front joined by a line (a single-objective study gets a note)."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
import pandas as pd
import plotly.graph_objects as go

from autotune.report.objective import ObjectiveInfo, metric_title
from autotune.report.panels.base import Panel
from autotune.report.style import (
    BEST_COLOR,
    figure,
    hover,
    layout,
    method_color,
    note,
    section,
)
from autotune.report.trials import (
    best_trial,
    complete_trials,
    pareto_numbers,
    trial_label,
    trial_method,
    trial_preset,
)


@dataclass
class Pareto:
    """`frame`: number, label, preset, method, x, y (the first two objective values),
    on_front, is_best; empty with a note for a single-objective study."""

    x_metric: str | None
    y_metric: str | None
    frame: pd.DataFrame
    note: str | None = None


def data(study: optuna.Study, objective: ObjectiveInfo) -> Pareto:
    """Every complete trial in the plane of the first two objectives, the front flagged."""
    columns = ["number", "label", "preset", "method", "x", "y", "on_front", "is_best"]
    if not objective.multi:
        return Pareto(None, None, pd.DataFrame(columns=columns),
                      "Single-objective study: no Pareto front.")
    front = pareto_numbers(study, objective)
    best = best_trial(study, objective)
    rows = [{"number": t.number, "label": trial_label(t), "preset": trial_preset(t),
             "method": trial_method(t), "x": t.values[0], "y": t.values[1],
             "on_front": t.number in front, "is_best": best is not None and t.number == best.number}
            for t in complete_trials(study)]
    text = None if rows else "No trial has completed yet."
    if rows and len(objective.metrics) > 2:
        text = f"{len(objective.metrics)} objectives: the plot shows the first two."
    return Pareto(objective.metrics[0], objective.metrics[1], pd.DataFrame(rows, columns=columns), text)


def render(p: Pareto) -> str:
    how = ("Each dot is a complete trial in the plane of the two objectives; the line joins the "
           "Pareto front (no trial is better on both).")
    if p.frame.empty:
        return section("pareto", "Pareto front", how, note(p.note))
    fig = go.Figure()
    off = p.frame[~p.frame["on_front"].astype(bool)]
    on = p.frame[p.frame["on_front"].astype(bool)].sort_values("x")
    if not off.empty:
        for method, part in off.groupby("method", sort=False):
            fig.add_trace(go.Scatter(x=part["x"], y=part["y"], mode="markers", name=f"{method}",
                                     text=hover(part), marker=dict(color=method_color(str(method)),
                                                                   size=7, opacity=0.45),
                                     hovertemplate="%{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>"))
    fig.add_trace(go.Scatter(x=on["x"], y=on["y"], mode="lines+markers", name="Pareto front",
                             text=hover(on), line=dict(color="#333", width=1.5),
                             marker=dict(color=[method_color(m) for m in on["method"]], size=10,
                                         line=dict(width=1, color="#333")),
                             hovertemplate="front: %{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>"))
    best = p.frame[p.frame["is_best"].astype(bool)]
    if not best.empty:
        fig.add_trace(go.Scatter(x=best["x"], y=best["y"], mode="markers", name="best", text=hover(best),
                                 marker=dict(symbol="star", size=16, color=BEST_COLOR,
                                             line=dict(width=1, color="black")),
                                 hovertemplate="best: %{text}<extra></extra>"))
    layout(fig, metric_title(p.x_metric or "x"), metric_title(p.y_metric or "y"))
    return section("pareto", "Pareto front", how, figure(fig, "fig-pareto") + note(p.note))


PANEL = Panel("pareto", lambda i: data(i.study, i.objective), render)
