"""Parallel coordinates: one line per complete trial across its knobs and the objective,
each method's namespaced knobs merged by leaf name so one axis serves every method."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import optuna
import plotly.graph_objects as go
from optuna.distributions import CategoricalDistribution

from autotune.report.objective import ObjectiveInfo, metric_title
from autotune.space.entries import ParamValue
from autotune.report.panels.base import Panel
from autotune.report.style import FIG_HEIGHT, figure, note, section
from autotune.report.trials import (
    INDEXED,
    complete_trials,
    derived_values,
    knob_order,
    leaf,
    trial_method,
)


@dataclass
class Dimension:
    """One axis of the parallel-coordinates plot, already encoded as numbers.

    Categorical values become codes 0..n-1 (`ticktext` the choices); a trial that lacks
    the knob (another method's branch) gets a sentinel code below the range, ticked
    "n/a", so its line is still drawn rather than dropped."""

    label: str
    values: list[float]
    tickvals: list[float] | None = None
    ticktext: list[str] | None = None


@dataclass
class Parallel:
    """`dimensions` (knobs, then one per objective metric), `color` = the first objective's
    values per trial, `numbers` = trial numbers in the same order."""

    dimensions: list[Dimension]
    color: list[float]
    color_title: str
    reverse_scale: bool           # True when smaller is better, so "good" keeps one hue
    numbers: list[int]
    note: str | None = None


def encode_dimension(label: str, values: list[Any], categorical: bool,
                     choices: Iterable[Any] | None = None) -> Dimension:
    """Encode one column (None = missing) as numbers with explicit ticks."""
    present = [v for v in values if v is not None]
    if categorical:
        order = [c for c in (choices or []) if c in present] or []
        order += sorted({str(v) for v in present} - {str(c) for c in order})
        code = {str(c): float(i) for i, c in enumerate(order)}
        tickvals, ticktext = list(code.values()), [str(c) for c in order]
        missing = -1.0
        encoded = [code[str(v)] if v is not None else missing for v in values]
    else:
        numbers = [float(v) for v in present]
        lo, hi = min(numbers), max(numbers)
        distinct = sorted(set(numbers))
        if len(distinct) <= 8:
            tickvals = distinct
        else:
            tickvals = [lo + (hi - lo) * i / 4 for i in range(5)]
        ticktext = [f"{v:.3g}" for v in tickvals]
        missing = lo - max((hi - lo) * 0.15, 1.0 if all(v.is_integer() for v in numbers) else 1e-3)
        encoded = [float(v) if v is not None else missing for v in values]
    if any(v is None for v in values):
        tickvals, ticktext = [missing] + tickvals, ["n/a"] + ticktext
    return Dimension(label, encoded, tickvals, ticktext)


def data(study: optuna.Study, objective: ObjectiveInfo) -> Parallel:
    """One line per complete trial across its knobs and the objective.

    The joint space namespaces each method's knobs (`ngram.k`, `layer_skip.k`); they are
    merged by their leaf name (`k`) so one axis serves every method. Per-layer bits are
    left out (the derived counts stand for them); axes with a single value are dropped."""
    trials = complete_trials(study)
    columns: dict[str, list[Any]] = {}
    categorical: dict[str, bool] = {}
    choices: dict[str, list[Any]] = {}
    for i, t in enumerate(trials):
        values: dict[str, ParamValue] = {}
        for name, dist in t.distributions.items():
            if INDEXED.match(name):
                continue
            leaf_name = leaf(name)
            values[leaf_name] = t.params[name]
            is_cat = isinstance(dist, CategoricalDistribution)
            categorical[leaf_name] = categorical.get(leaf_name, False) or is_cat
            if is_cat:
                choices.setdefault(leaf_name, [])
                choices[leaf_name] += [c for c in dist.choices if c not in choices[leaf_name]]
        values.update(derived_values(t))
        values["method"] = trial_method(t)     # the baseline has no params: its name
        categorical["method"] = True
        for key, value in values.items():
            columns.setdefault(key, [None] * len(trials))[i] = value
    dims = []
    for key in knob_order(columns):
        present = {str(v) for v in columns[key] if v is not None}
        if len(present) < 2:
            continue          # one value (or only n/a): `method` already tells these apart
        dims.append(encode_dimension(key, columns[key], categorical.get(key, False), choices.get(key)))
    color = [t.values[0] for t in trials]
    text = None
    if len(trials) < 2:
        text = "Fewer than two trials completed: nothing to compare."
        dims = []
    elif not dims:
        text = "No knob varies across the complete trials."
    else:
        # Every objective gets an axis (the last ones); the colour follows the first.
        dims += [Dimension(objective.axis_title(i), [t.values[i] for t in trials])
                 for i in range(len(objective.metrics))]
    return Parallel(dims, color, objective.metrics[0], objective.sign(0) > 0,
                    [t.number for t in trials], text)


def render(p: Parallel) -> str:
    how = ("Each line is a complete trial across its knobs and the objective (right-most "
           "axis); drag along an axis to filter. 'n/a' marks knobs a trial's method lacks.")
    if not p.dimensions:
        return section("parallel", "Parallel coordinates", how, note(p.note))
    dims = [dict(label=d.label, values=d.values,
                 **({"tickvals": d.tickvals, "ticktext": d.ticktext} if d.tickvals is not None else {}))
            for d in p.dimensions]
    fig = go.Figure(go.Parcoords(
        line=dict(color=p.color, colorscale="Viridis", reversescale=p.reverse_scale, showscale=True,
                  colorbar=dict(title=dict(text=metric_title(p.color_title), side="right"), x=1.06)),
        dimensions=dims, labelangle=-20, labelside="top"))
    fig.update_layout(template="plotly_white", height=FIG_HEIGHT + 40,
                      margin=dict(l=70, r=110, t=90, b=30), font=dict(size=12))
    return section("parallel", "Parallel coordinates", how,
                   figure(fig, "fig-parallel") + note(p.note))


PANEL = Panel("parallel", lambda i: data(i.study, i.objective), render)
