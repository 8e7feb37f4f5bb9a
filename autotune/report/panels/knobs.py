"""Speedup against each knob: one scatter per searched knob (per-layer bits aside) and
per derived knob (layer and exit counts, a tree's width, depth and verified nodes), dots
coloured by method, the best trial a star."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    IntDistribution,
)

from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.style import (
    BEST_COLOR,
    SMALL_FIG_HEIGHT,
    esc,
    figure,
    layout,
    method_color,
    method_name,
    method_scatter,
    note,
    parity_line,
    section,
)
from autotune.report.trials import (
    best_trial,
    complete_trials,
    derived_titles,
    derived_values,
    is_bit,
    knob_order,
    leaf,
    response,
    response_metric,
    trial_label,
    trial_method,
    trial_preset,
)


@dataclass
class Knob:
    """One knob's scatter: `frame` columns number, label, preset, method, x, y, is_best."""

    name: str
    title: str
    categorical: bool
    frame: pd.DataFrame
    derived: bool = False
    integer: bool = False       # integer ticks (an IntDistribution or a derived count)
    log: bool = False           # a log-scaled search range: a log x axis


@dataclass
class Knobs:
    """One `Knob` per non-bit Optuna param and per derived knob, y = `y_metric`."""

    y_metric: str
    y_title: str
    knobs: list[Knob]
    note: str | None = None


def data(study: optuna.Study, objective: ObjectiveInfo) -> Knobs:
    """Speedup (or the objective) against every knob the complete trials set."""
    trials = complete_trials(study)
    metric, title = response_metric(trials, objective)
    best = best_trial(study, objective)
    dists: dict[str, BaseDistribution] = {}
    for t in trials:
        for name, dist in t.distributions.items():
            if not is_bit(name, dist):
                dists.setdefault(name, dist)
    # A derived knob per method that has it (`layer_skip.n_attn_skipped`,
    # `draft_model.tree_width`), unless the space already searches a knob of that name.
    searched = {(name.rsplit(".", 1)[0] if "." in name else "", leaf(name)) for name in dists}
    derived_present: dict[tuple[str, str], None] = {}
    for t in trials:
        for name in derived_values(t):
            derived_present.setdefault((trial_method(t), name), None)
    titles = derived_titles()
    order_of = {name: i for i, name in enumerate(titles)}
    derived = [(f"{method}.{name}", name, titles[name], method)
               for method, name in sorted(derived_present, key=lambda mn: (mn[0], order_of[mn[1]]))
               if (method, name) not in searched]
    order = knob_order(list(dists) + [full for full, *_ in derived])
    by_full = {full: (name, text) for full, name, text, _ in derived}
    out = []
    for full in order:
        rows = []
        for t in trials:
            if full in by_full:
                x = (derived_values(t).get(by_full[full][0])
                     if trial_method(t) == full.split(".")[0] else None)
            elif full == "method":
                x = trial_method(t)       # the AR baseline (no params) shows by its name
            else:
                x = t.params.get(full)
            y = response(t, metric, objective)
            if x is None or y is None:
                continue
            rows.append({"number": t.number, "label": trial_label(t), "preset": trial_preset(t),
                         "method": trial_method(t), "x": x, "y": y,
                         "is_best": best is not None and t.number == best.number})
        frame = pd.DataFrame(rows, columns=["number", "label", "preset", "method", "x", "y", "is_best"])
        if full in by_full:
            name, text = by_full[full]
            out.append(Knob(full, f"{text} ({full.split('.')[0]})", False, frame, derived=True,
                            integer=True))
        else:
            out.append(Knob(full, full, isinstance(dists[full], CategoricalDistribution), frame,
                            integer=isinstance(dists[full], IntDistribution),
                            log=bool(getattr(dists[full], "log", False))))
    text = None
    if not trials:
        text = "No trial has completed yet."
    elif not out:
        text = "The complete trials set no searched knob (only presets without params ran)."
    return Knobs(metric, title, out, text)


def _knob_figure(knob: Knob, knobs: Knobs, index: int) -> str:
    if knob.frame.empty:
        return f'<div class="cell"><h3>{esc(knob.title)}</h3>{note("No complete trial measured it.")}</div>'
    fig = go.Figure()
    method_scatter(fig, knob.frame, "x", "y", f"{esc(knobs.y_metric)} %{{y:.3f}}",
                   categorical=knob.categorical)
    parity_line(fig, knobs.y_metric)
    x_title = f"{knob.title.split(' (')[0]} (count)" if knob.derived else knob.name.split(".")[-1]
    # One legend for the whole grid (an HTML key above it) rather than one per figure.
    layout(fig, x_title, knobs.y_title, SMALL_FIG_HEIGHT, title=knob.title, legend=False)
    if knob.log:
        fig.update_xaxes(type="log")
    elif knob.integer and not knob.frame.empty:
        span = float(knob.frame["x"].max() - knob.frame["x"].min())
        fig.update_xaxes(tickformat="d", **({"dtick": 1} if span <= 12 else {}))
    return f'<div class="cell">{figure(fig, f"fig-knob-{index}")}</div>'


def render(k: Knobs) -> str:
    how = (f"One plot per knob: each dot is a complete trial, y is its {k.y_metric}; dots "
           "of a trial's method share a colour and the best trial is the star. Derived knobs "
           "count the layers or exits a config uses, or give a draft tree's width, depth and "
           "the nodes one verify pass checks.")
    if not k.knobs:
        return section("knobs", "Speedup against each knob", how, note(k.note))
    cells = [_knob_figure(knob, k, i) for i, knob in enumerate(k.knobs)]
    methods = list(dict.fromkeys(m for knob in k.knobs for m in knob.frame["method"]))
    key = "".join(f'<span><i style="color:{method_color(m)}">●</i> {esc(method_name(m))}</span>'
                  for m in methods)
    key += f'<span><i style="color:{BEST_COLOR}">★</i> best trial</span>'
    return section("knobs", "Speedup against each knob", how,
                   note(k.note) + f'<p class="key">{key}</p><div class="grid">{"".join(cells)}</div>')


PANEL = Panel("knobs", lambda i: data(i.study, i.objective), render)
