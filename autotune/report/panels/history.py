"""Optimisation history: each complete trial's objective value in the order it ran, the
best so far, and the trials that did not complete (pruned, failed, unfinished) listed
apart with the reason."""

from __future__ import annotations

import math
from dataclasses import dataclass

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.trial import FrozenTrial, TrialState

from autotune.report.objective import ObjectiveInfo, metric_title
from autotune.report.panels.base import Panel
from autotune.report.style import esc, figure, layout, method_scatter, note, section
from autotune.report.trials import (
    best_trial,
    complete_trials,
    trial_label,
    trial_method,
    trial_preset,
)


@dataclass
class History:
    """`frame`: one row per complete trial: number, label, preset, method, value,
    best_so_far, is_best (value of the first metric). `other`: pruned / failed / running
    trials: number, state, label, reason."""

    metric: str
    direction: str
    frame: pd.DataFrame
    other: pd.DataFrame
    note: str | None = None


def _reason(t: FrozenTrial) -> str:
    for key in ("infeasible", "error", "interrupted"):
        if t.user_attrs.get(key):
            return str(t.user_attrs[key])
    if t.state == TrialState.PRUNED:
        steps = len(t.intermediate_values)
        return f"pruned after {steps} prompt{'s' if steps != 1 else ''}" if steps else "pruned"
    return t.state.name.lower()


def data(study: optuna.Study, objective: ObjectiveInfo) -> History:
    """The objective per complete trial and the best so far, in trial order."""
    sign = objective.sign(0)
    rows, best_so_far = [], math.inf
    best = best_trial(study, objective)
    for t in complete_trials(study):
        best_so_far = min(best_so_far, sign * t.values[0])
        rows.append({"number": t.number, "label": trial_label(t), "preset": trial_preset(t),
                     "method": trial_method(t), "value": t.values[0],
                     "best_so_far": sign * best_so_far,
                     "is_best": best is not None and t.number == best.number})
    other = [{"number": t.number, "state": t.state.name, "label": trial_label(t), "reason": _reason(t)}
             for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
             if t.state != TrialState.COMPLETE]
    frame = pd.DataFrame(rows, columns=["number", "label", "preset", "method", "value",
                                        "best_so_far", "is_best"])
    text = None
    if frame.empty:
        text = "No trial has completed yet."
    elif objective.multi:
        text = f"Several objectives: the history follows the first, {objective.metrics[0]}."
    return History(objective.metrics[0], objective.directions[0], frame,
                   pd.DataFrame(other, columns=["number", "state", "label", "reason"]), text)


def render(h: History) -> str:
    how = ("Each dot is a complete trial's objective value in the order it ran; the line is "
           f"the best so far ({'lower' if h.direction == 'minimize' else 'higher'} is better).")
    body = []
    if not h.frame.empty:
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=h.frame["number"], y=h.frame["best_so_far"], mode="lines",
                                 line=dict(shape="hv", color="#333", width=1.5), name="best so far",
                                 hovertemplate="best so far %{y:.4g}<extra></extra>"))
        method_scatter(fig, h.frame, "number", "value", f"{esc(h.metric)} %{{y:.4g}}")
        layout(fig, "trial number", metric_title(h.metric))
        body.append(figure(fig, "fig-history"))
    body.append(note(h.note))
    if not h.other.empty:
        rows = "".join(f"<tr><td>{esc(r.number)}</td><td class='text'>{esc(r.state.lower())}</td>"
                       f"<td class='text'>{esc(r.label)}</td><td class='text'>{esc(r.reason)}</td></tr>"
                       for r in h.other.itertuples(index=False))
        body.append(f"<details><summary>{len(h.other)} trial(s) pruned, failed or unfinished "
                    "(not plotted)</summary><table><thead><tr><th>trial</th><th class='text'>state</th>"
                    "<th class='text'>config</th><th class='text'>reason</th></tr></thead>"
                    f"<tbody>{rows}</tbody></table></details>")
    return section("history", "Optimisation history", how, "\n".join(body))


PANEL = Panel("history", lambda i: data(i.study, i.objective), render)
