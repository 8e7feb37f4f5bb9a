"""Layers skipped by the best drafts: per decoder layer, the share of the top trials of
the layer-skipping methods whose draft skips its attention or MLP, and the best one's own
mask (as in Draft & Verify, Fig. 6)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import optuna
import pandas as pd
import plotly.graph_objects as go

from autotune.frozen.record import FrozenConfig
from autotune.report.documents import RunFacts
from autotune.report.objective import ObjectiveInfo
from autotune.schema.config import KNOBS
from autotune.report.panels.base import Panel
from autotune.report.style import figure, layout, note, section
from autotune.report.trials import INDEXED, config_of, ranked, trial_label, trial_method

TOP_FRACTION = 0.10            # the top 10 % of the layer-skipping trials
# The per-layer skip sets the heatmap draws, one row pair each.
ATTN, MLP = "attn_skip", "mlp_skip"


def skip_methods() -> tuple[str, ...]:
    """The methods that read the skip sets (knob metadata names their owners)."""
    return tuple(dict.fromkeys(m for key in (ATTN, MLP) for m in KNOBS[key].methods))


@dataclass
class LayerHeatmap:
    """`frame`: one row per layer: layer, attn_fraction, mlp_fraction (share of the top
    trials skipping it), best_attn, best_mlp (the best such trial's mask, 0/1)."""

    n_layers: int | None
    frame: pd.DataFrame
    n_top: int = 0
    n_candidates: int = 0
    best_number: int | None = None
    best_label: str | None = None
    note: str | None = None


def n_layers_of(run: RunFacts | None, best: FrozenConfig | None,
                study: optuna.Study | None = None) -> int | None:
    """run.json `n_layers`, else best.json `model.n_layers`, else the largest layer index
    any trial's mask or bit param names, plus one."""
    model = best.model if best is not None else None
    for value in (run.n_layers if run is not None else None,
                  model.n_layers if model is not None else None):
        if value is not None and value > 0:
            return value
    if study is None:
        return None
    top = -1
    for t in study.get_trials(deepcopy=False):
        for key in (ATTN, MLP):
            top = max([top] + [int(i) for i in config_of(t).get(key) or []])
        for name in t.params:
            m = INDEXED.match(name)
            if m and m["base"].rsplit(".", 1)[-1] in (ATTN, MLP):
                top = max(top, int(m["index"]))
    return top + 1 if top >= 0 else None


def data(study: optuna.Study, objective: ObjectiveInfo, n_layers: int | None,
         top_fraction: float = TOP_FRACTION) -> LayerHeatmap:
    """Which layers the best layer-skipping drafts skip (as in Draft & Verify, Fig. 6).

    Among the top `top_fraction` (at least one) of the complete trials of the methods
    that skip layers, by the objective: per layer, the fraction skipping its attention
    and its MLP; plus the mask of the best of them."""
    columns = ["layer", "attn_fraction", "mlp_fraction", "best_attn", "best_mlp"]
    methods = skip_methods()
    candidates = [t for t in ranked(study, objective) if trial_method(t) in methods]
    if not candidates:
        return LayerHeatmap(n_layers, pd.DataFrame(columns=columns),
                            note=f"No {' or '.join(methods)} trial completed.")
    # round() first: 0.1 * 30 is 3.0000000000000004 in floating point, not 3.
    n_top = max(1, math.ceil(round(len(candidates) * top_fraction, 9)))
    top = candidates[:n_top]
    masks = [(set(config_of(t).get(ATTN) or []), set(config_of(t).get(MLP) or [])) for t in top]
    if n_layers is None:
        indices = [i for attn, mlp in masks for i in attn | mlp]
        n_layers = max(indices) + 1 if indices else 1
    best_attn, best_mlp = masks[0]
    rows = [{"layer": layer,
             "attn_fraction": sum(layer in attn for attn, _ in masks) / n_top,
             "mlp_fraction": sum(layer in mlp for _, mlp in masks) / n_top,
             "best_attn": int(layer in best_attn), "best_mlp": int(layer in best_mlp)}
            for layer in range(n_layers)]
    return LayerHeatmap(n_layers, pd.DataFrame(rows, columns=columns), n_top, len(candidates),
                        top[0].number, trial_label(top[0]))


def render(lh: LayerHeatmap) -> str:
    methods = " / ".join(skip_methods())
    how = (f"Per decoder layer (x), the share of the top {methods} trials whose draft skips its "
           f"attention or MLP, and the best {methods} trial's own mask (dark = skipped), as in "
           "Draft & Verify, Fig. 6.")
    if lh.frame.empty:
        return section("layers", "Layers skipped by the best drafts", how, note(lh.note))
    top = f"top {lh.n_top} of {lh.n_candidates}"
    rows = [("attention, " + top, "attn_fraction"), ("MLP, " + top, "mlp_fraction"),
            (f"best #{lh.best_number}: attention", "best_attn"), (f"best #{lh.best_number}: MLP", "best_mlp")]
    z = [lh.frame[col].tolist() for _, col in rows][::-1]
    names = [name for name, _ in rows][::-1]
    fig = go.Figure(go.Heatmap(
        z=z, x=lh.frame["layer"], y=names, zmin=0, zmax=1, colorscale="Blues", xgap=1, ygap=2,
        colorbar=dict(title=dict(text="share skipping", side="right")),
        hovertemplate="layer %{x}<br>%{y}: %{z:.2f}<extra></extra>"))
    layout(fig, "decoder layer", "", 320, legend=False)
    fig.update_xaxes(dtick=1 if (lh.n_layers or 0) <= 40 else 4, tickangle=0)
    return section("layers", "Layers skipped by the best drafts", how,
                   figure(fig, "fig-layers") + note(lh.note))


PANEL = Panel("layers", lambda i: data(i.study, i.objective, n_layers_of(i.run, i.best, i.study)),
              render)
