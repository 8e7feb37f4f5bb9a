"""Expected vs measured speedup: Leviathan et al.'s analytic speedup for K draft tokens
per round at the best config's measured acceptance α and draft cost ratio c, with the
measured trials of the same method as dots."""

from __future__ import annotations

import math
from dataclasses import dataclass

import optuna
import pandas as pd
import plotly.graph_objects as go

from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.style import figure, layout, method_scatter, note, parity_line, section
from autotune.report.trials import (best_speculative, complete_trials, config_of, finite,
                                    metrics_of, trial_label, trial_method, trial_preset)

LEVIATHAN_MIN_K = 16


def leviathan_speedup(alpha: float, c: float, k: int | float) -> float:
    """Expected wall-time improvement of speculative decoding (Leviathan et al. 2023, Thm 3.8):
    S(K) = (1 - α^(K+1)) / ((1 - α)(K·c + 1)), with the α → 1 limit (K + 1) / (K·c + 1)."""
    if alpha >= 1.0 - 1e-12:
        return (k + 1) / (k * c + 1)
    return (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))


@dataclass
class Leviathan:
    """`curve`: k, speedup (analytic, for the best config's α and c); `points`: measured
    trials of the best config's method: number, label, preset, k, k_source, speedup, is_best."""

    method: str | None
    alpha: float | None
    alpha_source: str | None
    cost_ratio: float | None
    best_number: int | None
    curve: pd.DataFrame
    points: pd.DataFrame
    note: str | None = None


def data(study: optuna.Study, objective: ObjectiveInfo) -> Leviathan:
    """The analytic speedup-vs-K curve at the best config's measured α and c, with the
    measured speedups of the trials of its method (x: mean drafted tokens per round when
    recorded, else the config's k)."""
    curve_cols, point_cols = ["k", "speedup"], ["number", "label", "preset", "k", "k_source",
                                                "speedup", "is_best"]
    best, lead = best_speculative(study, objective)
    notes = [lead] if lead else []
    if best is None:
        return Leviathan(None, None, None, None, None, pd.DataFrame(columns=curve_cols),
                         pd.DataFrame(columns=point_cols), " ".join(notes) or "No trial completed.")
    method = trial_method(best)
    points = []
    for t in complete_trials(study):
        if trial_method(t) != method:
            continue
        speed = finite(metrics_of(t).get("speedup"))
        drafted = finite(metrics_of(t).get("mean_drafted_tokens"))
        k = drafted if drafted is not None else finite(config_of(t).get("k"))
        if speed is None or k is None:
            continue
        points.append({"number": t.number, "label": trial_label(t), "preset": trial_preset(t), "k": k,
                       "k_source": "mean_drafted_tokens" if drafted is not None else "k",
                       "speedup": speed, "is_best": t.number == best.number})
    m = metrics_of(best)
    alpha_source = "acceptance_alpha" if finite(m.get("acceptance_alpha")) is not None else (
        "acceptance_rate" if finite(m.get("acceptance_rate")) is not None else None)
    alpha = finite(m.get(alpha_source)) if alpha_source else None
    c = finite(m.get("cost_ratio"))
    curve = pd.DataFrame(columns=curve_cols)
    if alpha is None or c is None:
        missing = " and ".join(x for x, v in (("α", alpha), ("cost ratio c", c)) if v is None)
        notes.append(f"No analytic curve: trial #{best.number} has no measured {missing}.")
    else:
        k_max = max([LEVIATHAN_MIN_K] + [math.ceil(p["k"]) for p in points])
        curve = pd.DataFrame([{"k": k, "speedup": leviathan_speedup(alpha, c, k)}
                              for k in range(1, k_max + 1)], columns=curve_cols)
    if not points:
        notes.append(f"No measured speedup for the {method} trials.")
    return Leviathan(method, alpha, alpha_source, c, best.number, curve,
                     pd.DataFrame(points, columns=point_cols), " ".join(notes) or None)


def render(lev: Leviathan) -> str:
    how = ("The line is Leviathan et al.'s expected speedup for K draft tokens per round at the "
           "best config's measured acceptance α and draft cost ratio c; dots are measured trials "
           "of the same method. The model counts a verify pass as one target step and every "
           "round as a full K drafts: dots below the line are what that leaves out (verifying "
           "K+1 tokens costs more than one, rounds that draft fewer than K).")
    if lev.curve.empty and lev.points.empty:
        return section("leviathan", "Expected vs measured speedup", how, note(lev.note))
    fig = go.Figure()
    if not lev.curve.empty:
        fig.add_trace(go.Scatter(
            x=lev.curve["k"], y=lev.curve["speedup"], mode="lines", name="analytic S(K)",
            line=dict(color="#333", width=2),
            hovertemplate="K=%{x}<br>expected %{y:.3f}×<extra></extra>"))
    if not lev.points.empty:
        frame = lev.points.assign(method=lev.method)
        method_scatter(fig, frame, "k", "speedup", "measured %{y:.3f}× at K=%{x:.2f}")
    parity_line(fig, "speedup")
    title = None
    if lev.alpha is not None and lev.cost_ratio is not None:
        title = f"{lev.method}: α = {lev.alpha:.3f} ({lev.alpha_source}), c = {lev.cost_ratio:.3f}"
    layout(fig, "K (draft tokens per round; dots: mean drafted)", "speedup (× AR)", title=title)
    return section("leviathan", "Expected vs measured speedup", how,
                   figure(fig, "fig-leviathan") + note(lev.note))


PANEL = Panel("leviathan", lambda i: data(i.study, i.objective), render)
