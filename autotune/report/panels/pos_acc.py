"""Position-wise acceptance: the probability that the draft token at position i is
accepted given that the one before it was, for the best config and each completed
documented default."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.trial import FrozenTrial

from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.style import esc, figure, layout, method_color, note, section
from autotune.report.trials import (
    best_speculative,
    complete_trials,
    finite,
    metrics_of,
    trial_label,
    trial_method,
    trial_preset,
)
from autotune.records.trial import BASELINE

_DASHES = ("dash", "dot", "dashdot", "longdash", "longdashdot")


@dataclass
class PosAcc:
    """`frame`: number, label, method, role ("best" or the preset's name), position
    (1-based draft position), acceptance (P(token i accepted | token i-1 accepted))."""

    frame: pd.DataFrame
    note: str | None = None


def data(study: optuna.Study, objective: ObjectiveInfo) -> PosAcc:
    """Position-wise acceptance of the best config and of each completed documented default."""
    columns = ["number", "label", "method", "role", "position", "acceptance"]
    best, lead = best_speculative(study, objective)
    shown: list[tuple[FrozenTrial, str]] = [(best, "best")] if best is not None else []
    for t in complete_trials(study):
        preset = trial_preset(t)
        if preset and preset != BASELINE and (best is None or t.number != best.number):
            shown.append((t, preset))
    rows, missing = [], []
    for t, role in shown:
        values = metrics_of(t).pos_acc
        if not isinstance(values, list) or not values:
            missing.append(f"#{t.number}")
            continue
        rows += [{"number": t.number, "label": trial_label(t), "method": trial_method(t),
                  "role": role, "position": i + 1,
                  "acceptance": finite(v)} for i, v in enumerate(values) if finite(v) is not None]
    notes = [lead] if lead else []
    if not shown:
        notes.append("No speculative trial completed.")
    elif missing:
        notes.append(f"No position-wise acceptance measured for {', '.join(missing)}.")
    return PosAcc(pd.DataFrame(rows, columns=columns), " ".join(notes) or None)


def render(p: PosAcc) -> str:
    how = ("Probability that the draft token at position i is accepted given that the one "
           "before it was: higher and flatter means longer accepted runs.")
    if p.frame.empty:
        return section("pos-acc", "Position-wise acceptance", how, note(p.note))
    fig = go.Figure()
    roles = list(dict.fromkeys(p.frame["role"]))
    for i, role in enumerate(roles):
        part = p.frame[p.frame["role"] == role]
        best = role == "best"
        method = str(part["method"].iloc[0])
        fig.add_trace(go.Scatter(
            x=part["position"], y=part["acceptance"], mode="lines+markers",
            name=f"{role}: #{part['number'].iloc[0]} {part['label'].iloc[0]}",
            line=dict(color=method_color(method), width=3 if best else 1.5,
                      dash="solid" if best else _DASHES[i % len(_DASHES)]),
            marker=dict(symbol="star" if best else "circle", size=10 if best else 6),
            hovertemplate=f"{esc(role)}: position %{{x}}<br>acceptance %{{y:.2f}}<extra></extra>"))
    layout(fig, "draft position i (tokens)", "P(accepted | previous accepted)")
    # Long labels: a legend under the axis title stays clear of the modebar (top right).
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0),
                      margin=dict(t=30, b=110))
    fig.update_yaxes(range=[0, 1.05])
    fig.update_xaxes(dtick=1)
    return section("pos-acc", "Position-wise acceptance", how, figure(fig, "fig-pos-acc") + note(p.note))


PANEL = Panel("pos-acc", lambda i: data(i.study, i.objective), render)
