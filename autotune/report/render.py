"""Figures and the one self-contained HTML page of a report.

`render_report(data)` turns the panel data of `report.data` into one HTML file that
opens offline: plotly.js is inlined once in the head, every figure is a `<div>` plus the
`<script>` that draws it, and nothing refers to a URL (no CDN, fonts or MathJax). Each
panel is a `<section class="panel" id="panel-<name>">` with a heading, one sentence on
how to read it, and either its figures or a `<p class="note">` saying why there is none.
"""

from __future__ import annotations

import html
import math
from typing import Any, Callable

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from autotune.report.data import (FREE_TOLERANCE, PROFILE_FILE, Hardware, Header, History,
                                  Importance, Knob, Knobs, LayerHeatmap, Leviathan, Parallel,
                                  Pareto, PosAcc, ReportData, TimeSplit, TopTrials, TreePanel,
                                  metric_title)

# Panel ids in page order (`panel-<id>`); a test and the headless-browser check use them.
PANEL_IDS = ("header", "top", "history", "knobs", "parallel", "importance", "layers", "tree",
             "pos-acc", "time-split", "hardware", "leviathan", "pareto")

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
FIG_HEIGHT = 400
SMALL_FIG_HEIGHT = 340         # the two-per-row knob and importance grids

# One colour per method on every figure (colour-blind-safe Okabe-Ito order).
METHOD_COLORS = {
    "none": "#7f7f7f", "ngram": "#0072B2", "layer_skip": "#009E73", "sorted_exit": "#CC79A7",
    "draft_model": "#E69F00", "tree": "#D55E00",
}
_SPARE_COLORS = ("#56B4E9", "#F0E442", "#000000")
BEST_COLOR = "#D55E00"
PART_COLORS = {"draft": "#E69F00", "verify": "#0072B2", "other": "#BBBBBB"}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
       margin: 0; background: #f4f5f7; color: #1d2330; }
main { max-width: 1200px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 1.6em; margin: 8px 0 4px; }
h2 { font-size: 1.2em; margin: 0 0 4px; }
h3 { font-size: 1em; margin: 12px 0 4px; }
.panel { background: #fff; border: 1px solid #dde1e7; border-radius: 6px;
         padding: 14px 18px; margin: 14px 0; }
.how { color: #4a5263; margin: 0 0 8px; font-size: 0.93em; }
.note { color: #7a5b00; background: #fff8e1; border-left: 3px solid #e0b000;
        padding: 6px 10px; margin: 8px 0; font-size: 0.93em; }
.grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 8px 16px; }
.cell { min-width: 0; }
.summary { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 10px 24px; }
.summary dl { margin: 0; display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px;
              font-size: 0.92em; }
.summary dt { color: #4a5263; }
.summary dd { margin: 0; overflow-wrap: anywhere; }
.headline { font-size: 1.15em; margin: 6px 0 12px; }
.headline b { font-size: 1.25em; }
table { border-collapse: collapse; width: 100%; font-size: 0.9em; }
th, td { border-bottom: 1px solid #e3e6eb; padding: 4px 6px; text-align: right; }
.table-wrap { overflow-x: auto; }
th { background: #f0f2f5; position: sticky; top: 0; }
td.text, th.text { text-align: left; }
td.label { min-width: 16em; }
.key span { margin-right: 18px; font-size: 0.92em; }
.key i { font-style: normal; font-size: 1.2em; }
tr.best td { background: #fff3e8; font-weight: 600; }
details { margin-top: 8px; font-size: 0.92em; }
code { font-size: 0.95em; }
"""


# ------------------------------------------------------------------ small helpers
def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any, digits: int = 3) -> str:
    """A number for a table or the header; "–" for missing or non-finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if abs(value) < 1e4 else f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_num(v, digits) for v in value) + "]"
    return str(value)


def method_color(method: str) -> str:
    """The colour of a method, stable across figures and runs (unknown methods take a
    spare picked from their name, so no state is kept)."""
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    return _SPARE_COLORS[sum(map(ord, method)) % len(_SPARE_COLORS)]


def _hover(frame: pd.DataFrame) -> list[str]:
    """`#12 ngram k=1 n=3..4 [vllm_ngram]` per row."""
    out = []
    for row in frame.itertuples(index=False):
        preset = getattr(row, "preset", None)
        tag = f" [{preset}]" if isinstance(preset, str) and preset else ""
        out.append(f"#{row.number} {row.label}{tag}")
    return out


def _layout(fig: go.Figure, x_title: str, y_title: str, height: int = FIG_HEIGHT,
            title: str | None = None, legend: bool = True) -> go.Figure:
    """The shared look: white template, titled axes with automargin (labels never
    overlap the plot), a horizontal legend under the title."""
    fig.update_layout(
        template="plotly_white", height=height, autosize=True,
        # A title and a legend both sit above the plot: the title on top, in its own room.
        margin=dict(l=60, r=20, t=(85 if legend else 50) if title else 30, b=50),
        title=dict(text=title, x=0.01, y=0.985, yref="container", yanchor="top",
                   font=dict(size=14)) if title else None,
        showlegend=legend, hovermode="closest",
        # Above the plot, from the left: clear of the data and of the modebar (top right).
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
        font=dict(family="system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif",
                  size=12))
    fig.update_xaxes(title_text=x_title, automargin=True)
    fig.update_yaxes(title_text=y_title, automargin=True)
    return fig


def _figure(fig: go.Figure, div_id: str) -> str:
    """One figure as a div + script, with no plotly.js, MathJax or URL of its own."""
    return fig.to_html(full_html=False, include_plotlyjs=False, include_mathjax=False,
                       config=PLOTLY_CONFIG, div_id=div_id, default_width="100%",
                       default_height=f"{fig.layout.height or FIG_HEIGHT}px")


def _note(text: str | None) -> str:
    return f'<p class="note">{_esc(text)}</p>' if text else ""


def _section(panel: str, title: str, how: str, body: str) -> str:
    return (f'<section class="panel" id="panel-{panel}">\n<h2>{_esc(title)}</h2>\n'
            f'<p class="how">{_esc(how)}</p>\n{body}\n</section>')


def method_name(method: str) -> str:
    """Legend name of a method (`none` is the AR baseline)."""
    return "AR baseline" if method == "none" else method


def _method_scatter(fig: go.Figure, frame: pd.DataFrame, x: str, y: str, hover_y: str,
                    categorical: bool = False) -> None:
    """One trace per method (consistent colours, a legend by method), then the best
    trial as a larger star on top."""
    for method, part in frame.groupby("method", sort=False):
        color = method_color(str(method))
        text = _hover(part)
        if categorical:
            # A strip: every point on its category, jittered, no box drawn.
            fig.add_trace(go.Box(
                x=part[x].astype(str), y=part[y], name=method_name(str(method)), boxpoints="all",
                jitter=0.5,
                pointpos=0, fillcolor="rgba(0,0,0,0)", line=dict(color="rgba(0,0,0,0)"),
                marker=dict(color=color, size=8, opacity=0.8), hoveron="points", text=text,
                hovertemplate=f"%{{text}}<br>{hover_y}<extra></extra>"))
        else:
            fig.add_trace(go.Scatter(
                x=part[x], y=part[y], mode="markers", name=method_name(str(method)), text=text,
                marker=dict(color=color, size=8, opacity=0.8, line=dict(width=0.5, color="white")),
                hovertemplate=f"%{{text}}<br>{hover_y}<extra></extra>"))
    best = frame[frame["is_best"].astype(bool)]
    if not best.empty:
        fig.add_trace(go.Scatter(
            x=best[x].astype(str) if categorical else best[x], y=best[y], mode="markers",
            name="best", text=_hover(best),
            marker=dict(symbol="star", size=16, color=BEST_COLOR, line=dict(width=1, color="black")),
            hovertemplate=f"best: %{{text}}<br>{hover_y}<extra></extra>"))
    if categorical:
        fig.update_layout(boxmode="overlay")
        fig.update_xaxes(type="category", tickangle=-30)


def _parity_line(fig: go.Figure, y_metric: str) -> None:
    """The AR parity line at 1× on speedup axes: above it, speculation pays."""
    if y_metric == "speedup":
        fig.add_hline(y=1.0, line=dict(color="#888", dash="dash", width=1),
                      annotation_text="AR (1×)", annotation_position="bottom right")


# ------------------------------------------------------------------ panels
def render_header(h: Header) -> str:
    """The summary block (HTML, no figure)."""
    headline = []
    if h.best_trial is not None:
        headline.append(f"Best config: <b>{_esc(h.best_label)}</b> (trial #{_esc(h.best_trial)}"
                        + (f", preset {_esc(h.best_preset)}" if h.best_preset else "") + ")")
        figures = []
        if h.speedup is not None:
            figures.append(f"<b>{h.speedup:.2f}×</b> the AR baseline")
        if h.latency_ms_per_token is not None:
            figures.append(f"{h.latency_ms_per_token:.2f} ms/token")
        if h.baseline_ms_per_token is not None:
            figures.append(f"AR baseline {h.baseline_ms_per_token:.2f} ms/token")
        if figures:
            headline.append(" · ".join(figures))
    blocks = [("Best config", {k: _num(v) for k, v in h.best_params.items()}),
              ("Objective", {"objective": h.objective,
                             **{m: _num(v, 4) for m, v in h.best_values.items()}}),
              ("Model", h.model), ("Hardware", h.hardware), ("Workload", h.workload),
              ("Search", {**h.search, **{f"trials {k}": str(v) for k, v in h.counts.items()}})]
    dls = []
    for title, items in blocks:
        rows = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in items.items())
        dls.append(f"<div><h3>{_esc(title)}</h3><dl>{rows or '<dd>–</dd>'}</dl></div>")
    body = ("".join(f'<p class="headline">{line}</p>' for line in headline)
            + _note(h.note) + f'<div class="summary">{"".join(dls)}</div>')
    # The page's title is this panel's heading.
    return (f'<section class="panel" id="panel-header">\n<h1>autotune report: {_esc(h.study)}</h1>\n'
            '<p class="how">The best configuration found, how much faster than plain '
            'autoregressive decoding it ran, and where it was measured.</p>\n'
            f'{body}\n</section>')


_TOP_HEADS = {"rank": "#", "number": "trial", "label": "config", "preset": "preset",
              "pareto": "Pareto", "speedup": "speedup (× AR)", "latency_ms_per_token": "ms/token",
              "baseline_latency_ms_per_token": "AR ms/token",
              "mean_accepted_tokens": "τ (tokens/round)",
              "mean_verified_tokens": "verified (tokens/pass)", "acceptance_rate": "acceptance",
              "lossless": "lossless"}


def render_top(top: TopTrials, best_number: int | None) -> str:
    """The top trials as an HTML table (sortable by eye, copyable, no plotly)."""
    how = ("The ten best complete trials by the objective (★ marks objective columns); "
           "τ is tokens emitted per verify round.")
    if top.frame.empty:
        return _section("top", "Top trials", how, _note(top.note))
    text_cols = {"label", "preset"}
    heads = []
    for col in top.frame.columns:
        name = (f"{metric_title(col[len('value.'):])} ★" if col.startswith("value.")
                else _TOP_HEADS.get(col, col))
        heads.append(f'<th class="{"text" if col in text_cols else ""}">{_esc(name)}</th>')
    rows = []
    for record in top.frame.to_dict("records"):
        cells = []
        for col, value in record.items():
            if col in text_cols:
                cls = "text label" if col == "label" else "text"
                cells.append(f'<td class="{cls}">{_esc(value) if isinstance(value, str) else ""}</td>')
            elif col in ("rank", "number"):
                cells.append(f"<td>{_esc(value)}</td>")
            elif col == "pareto":
                cells.append(f"<td>{'★' if value else ''}</td>")
            else:
                value = None if isinstance(value, float) and math.isnan(value) else value
                cells.append(f"<td>{_esc(_num(value))}</td>")
        cls = ' class="best"' if record["number"] == best_number else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    table = (f"<div class='table-wrap'><table><thead><tr>{''.join(heads)}</tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table></div>")
    return _section("top", "Top trials", how, table + _note(top.note))


def render_history(h: History) -> str:
    how = ("Each dot is a complete trial's objective value in the order it ran; the line is "
           f"the best so far ({'lower' if h.direction == 'minimize' else 'higher'} is better).")
    body = []
    if not h.frame.empty:
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=h.frame["number"], y=h.frame["best_so_far"], mode="lines",
                                 line=dict(shape="hv", color="#333", width=1.5), name="best so far",
                                 hovertemplate="best so far %{y:.4g}<extra></extra>"))
        _method_scatter(fig, h.frame, "number", "value", f"{_esc(h.metric)} %{{y:.4g}}")
        _layout(fig, "trial number", metric_title(h.metric))
        body.append(_figure(fig, "fig-history"))
    body.append(_note(h.note))
    if not h.other.empty:
        rows = "".join(f"<tr><td>{_esc(r.number)}</td><td class='text'>{_esc(r.state.lower())}</td>"
                       f"<td class='text'>{_esc(r.label)}</td><td class='text'>{_esc(r.reason)}</td></tr>"
                       for r in h.other.itertuples(index=False))
        body.append(f"<details><summary>{len(h.other)} trial(s) pruned, failed or unfinished "
                    "(not plotted)</summary><table><thead><tr><th>trial</th><th class='text'>state</th>"
                    "<th class='text'>config</th><th class='text'>reason</th></tr></thead>"
                    f"<tbody>{rows}</tbody></table></details>")
    return _section("history", "Optimisation history", how, "\n".join(body))


def _knob_figure(knob: Knob, knobs: Knobs, index: int) -> str:
    if knob.frame.empty:
        return f'<div class="cell"><h3>{_esc(knob.title)}</h3>{_note("No complete trial measured it.")}</div>'
    fig = go.Figure()
    _method_scatter(fig, knob.frame, "x", "y", f"{_esc(knobs.y_metric)} %{{y:.3f}}",
                    categorical=knob.categorical)
    _parity_line(fig, knobs.y_metric)
    x_title = f"{knob.title.split(' (')[0]} (count)" if knob.derived else knob.name.split(".")[-1]
    # One legend for the whole grid (an HTML key above it) rather than one per figure.
    _layout(fig, x_title, knobs.y_title, SMALL_FIG_HEIGHT, title=knob.title, legend=False)
    if knob.log:
        fig.update_xaxes(type="log")
    elif knob.integer and not knob.frame.empty:
        span = float(knob.frame["x"].max() - knob.frame["x"].min())
        fig.update_xaxes(tickformat="d", **({"dtick": 1} if span <= 12 else {}))
    return f'<div class="cell">{_figure(fig, f"fig-knob-{index}")}</div>'


def render_knobs(k: Knobs) -> str:
    how = (f"One plot per knob: each dot is a complete trial, y is its {k.y_metric}; dots "
           "of a trial's method share a colour and the best trial is the star. Derived knobs "
           "count the layers or exits a config uses, or give a draft tree's width, depth and "
           "the nodes one verify pass checks.")
    if not k.knobs:
        return _section("knobs", "Speedup against each knob", how, _note(k.note))
    cells = [_knob_figure(knob, k, i) for i, knob in enumerate(k.knobs)]
    methods = list(dict.fromkeys(m for knob in k.knobs for m in knob.frame["method"]))
    key = "".join(f'<span><i style="color:{method_color(m)}">●</i> {_esc(method_name(m))}</span>'
                  for m in methods)
    key += f'<span><i style="color:{BEST_COLOR}">★</i> best trial</span>'
    return _section("knobs", "Speedup against each knob", how,
                    _note(k.note) + f'<p class="key">{key}</p><div class="grid">{"".join(cells)}</div>')


def render_parallel(p: Parallel) -> str:
    how = ("Each line is a complete trial across its knobs and the objective (right-most "
           "axis); drag along an axis to filter. 'n/a' marks knobs a trial's method lacks.")
    if not p.dimensions:
        return _section("parallel", "Parallel coordinates", how, _note(p.note))
    dims = [dict(label=d.label, values=d.values,
                 **({"tickvals": d.tickvals, "ticktext": d.ticktext} if d.tickvals is not None else {}))
            for d in p.dimensions]
    fig = go.Figure(go.Parcoords(
        line=dict(color=p.color, colorscale="Viridis", reversescale=p.reverse_scale, showscale=True,
                  colorbar=dict(title=dict(text=metric_title(p.color_title), side="right"), x=1.06)),
        dimensions=dims, labelangle=-20, labelside="top"))
    fig.update_layout(template="plotly_white", height=FIG_HEIGHT + 40,
                      margin=dict(l=70, r=110, t=90, b=30), font=dict(size=12))
    return _section("parallel", "Parallel coordinates", how,
                    _figure(fig, "fig-parallel") + _note(p.note))


def render_importance(imp: Importance) -> str:
    how = ("Share of the objective's variance each knob explains (fANOVA), within all methods "
           "and within each method; per-layer bits are summarised by the number of layers skipped.")
    cells = []
    for i, group in enumerate(imp.groups):
        head = f"{group.scope} ({group.n_trials} trials)"
        if group.frame.empty:
            cells.append(f'<div class="cell"><h3>{_esc(head)}</h3>{_note(group.note)}</div>')
            continue
        frame = group.frame.iloc[::-1]      # largest on top of a horizontal bar chart
        color = method_color(group.scope) if group.scope in METHOD_COLORS else "#555"
        fig = go.Figure(go.Bar(x=frame["importance"], y=frame["param"], orientation="h",
                               marker_color=color,
                               hovertemplate="%{y}: %{x:.2f}<extra></extra>"))
        _layout(fig, f"importance for {imp.metric} (share, fANOVA)", "", SMALL_FIG_HEIGHT,
                title=head, legend=False)
        fig.update_xaxes(range=[0, 1])
        cells.append(f'<div class="cell">{_figure(fig, f"fig-importance-{i}")}{_note(group.note)}</div>')
    body = _note(imp.note)
    if any(not g.frame.empty for g in imp.groups):
        body += f'<div class="grid">{"".join(cells)}</div>'
    elif not imp.note:
        body += _note("Too few trials to estimate importance.")
    return _section("importance", "Parameter importance", how, body)


def render_layers(lh: LayerHeatmap) -> str:
    how = ("Per decoder layer (x), the share of the top layer_skip trials whose draft skips its "
           "attention or MLP, and the best layer_skip trial's own mask (dark = skipped), as in "
           "Draft & Verify, Fig. 6.")
    if lh.frame.empty:
        return _section("layers", "Layers skipped by the best drafts", how, _note(lh.note))
    top = f"top {lh.n_top} of {lh.n_candidates}"
    rows = [("attention, " + top, "attn_fraction"), ("MLP, " + top, "mlp_fraction"),
            (f"best #{lh.best_number}: attention", "best_attn"), (f"best #{lh.best_number}: MLP", "best_mlp")]
    z = [lh.frame[col].tolist() for _, col in rows][::-1]
    names = [name for name, _ in rows][::-1]
    fig = go.Figure(go.Heatmap(
        z=z, x=lh.frame["layer"], y=names, zmin=0, zmax=1, colorscale="Blues", xgap=1, ygap=2,
        colorbar=dict(title=dict(text="share skipping", side="right")),
        hovertemplate="layer %{x}<br>%{y}: %{z:.2f}<extra></extra>"))
    _layout(fig, "decoder layer", "", 320, legend=False)
    fig.update_xaxes(dtick=1 if (lh.n_layers or 0) <= 40 else 4, tickangle=0)
    return _section("layers", "Layers skipped by the best drafts", how,
                    _figure(fig, "fig-layers") + _note(lh.note))


def _cell_text(row: Any, unit: str, best: bool) -> str:
    """What a tree cell prints: its value and token budget (nodes for a static tree)."""
    value = f"{'★ ' if best else ''}{row.value:.2f}{unit}"
    if row.column == "chain":
        return value
    if row.column == "static":
        return f"{value}<br>{row.nodes} nodes"
    return f"{value}<br>t={'all' if row.tokens == 0 else row.tokens}"


def _cell_hover(row: Any, metric: str) -> str:
    if row.column == "chain":
        shape = f"chain, k={row.depth}"
    elif row.column == "static":
        shape = f"static tree (tree_choices): {row.nodes} nodes, depth {row.depth}"
    else:
        shape = (f"tree width {row.column}, depth {row.depth}, "
                 f"tree_tokens {'all' if row.tokens == 0 else row.tokens} ({row.nodes} nodes)")
    lines = [f"#{row.number} {row.method}: {shape}", f"{metric} {row.value:.3f}",
             _esc(row.label)]
    if row.budgets:
        lines.append(f"budgets tried here: {row.budgets}")
    lines.append(f"{row.n_trials} trial{'s' if row.n_trials != 1 else ''} of this shape")
    return "<br>".join(lines)


def render_tree(tp: TreePanel) -> str:
    how = ("The best trial per draft-tree shape: x is the tree width (children expanded per "
           "node), y the depth (levels drafted); each cell shows its best "
           f"{tp.metric} and the token budget t that gave it (★: the best cell). "
           "Hover for the trial. Where recorded, the right plot shows how often the accepted "
           "path reached each depth.")
    title = "Draft trees: width × depth"
    if tp.cells.empty:
        return _section("tree", title, how, _note(tp.note))
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
        scale: dict[str, Any] = dict(colorscale="RdBu", zmid=1.0)
    else:
        scale = dict(colorscale="Viridis", reversescale=not tp.higher_better)
    ticks = {"chain": "chain (k)", "static": "static"}
    fig = go.Figure(go.Heatmap(
        z=z, x=tp.columns, y=rows_y, text=text, texttemplate="%{text}", hovertext=hover,
        hovertemplate="%{hovertext}<extra></extra>", xgap=2, ygap=2, hoverongaps=False,
        colorbar=dict(title=dict(text=tp.metric_title, side="right")), **scale))
    _layout(fig, "tree width (children per node)", "tree depth (levels; chain: k)",
            max(300, 60 + 48 * len(depths)), legend=False)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=tp.columns,
                     tickvals=tp.columns, ticktext=[ticks.get(c, c) for c in tp.columns])
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=rows_y)
    heat = _figure(fig, "fig-tree")
    if tp.depth_acc.empty:
        return _section("tree", title, how, heat + _note(tp.note))
    acc = go.Figure()
    for role, part in tp.depth_acc.groupby("role", sort=False):
        tree = role == "best tree"
        acc.add_trace(go.Scatter(
            x=part["depth"], y=part["share"], mode="lines+markers",
            name=f"{role}: #{part['number'].iloc[0]}",
            line=dict(color=method_color(str(part["method"].iloc[0])), width=2.5 if tree else 1.5,
                      dash="solid" if tree else "dash"),
            marker=dict(symbol="star" if tree else "circle", size=9 if tree else 6),
            hovertemplate=f"{_esc(role)} #{part['number'].iloc[0]}: depth %{{x}}<br>"
                          "reached in %{y:.2f} of the rounds that drafted it<extra></extra>"))
    _layout(acc, "depth d", "share of rounds reaching depth d", max(300, 60 + 48 * len(depths)))
    acc.update_yaxes(range=[0, 1.05])
    acc.update_xaxes(dtick=1)
    body = (f'<div class="grid"><div class="cell">{heat}</div>'
            f'<div class="cell">{_figure(acc, "fig-tree-depth")}</div></div>')
    return _section("tree", title, how, body + _note(tp.note))


def render_hardware(hw: Hardware) -> str:
    how = ("What one forward of the target costs against the number of tokens it verifies "
           "in that pass (left: ms per pass, median and fastest; right: ms per token). Where "
           "the left curve is flat, extra draft tokens ride along almost for free: the shaded "
           f"range stays within {FREE_TOLERANCE:.0%} of the 1-token cost.")
    title = "Verify cost on this hardware"
    if hw.frame.empty:
        return _section("hardware", title, how, _note(hw.note))
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
    _layout(cost, "tokens verified in one pass", "ms per target forward", SMALL_FIG_HEIGHT,
            title="cost of one verify pass")
    cost.update_yaxes(rangemode="tozero")
    _layout(per, "tokens verified in one pass", "ms per verified token (log)", SMALL_FIG_HEIGHT,
            title="cost per verified token", legend=False)
    per.update_yaxes(type="log")
    info = hw.info
    measured = ", ".join(x for x in (
        info.get("model"), f"on {info['device']}" if info.get("device") else None, info.get("dtype"),
        f"context {info['context_tokens']} tokens" if info.get("context_tokens") else None,
        f"median of {info['repeats']} repeats" if info.get("repeats") else None) if x)
    head = f'<p class="how">Measured: {_esc(measured)} ({_esc(PROFILE_FILE)}).</p>' if measured else ""
    body = (head + f'<div class="grid"><div class="cell">{_figure(cost, "fig-hardware")}</div>'
            f'<div class="cell">{_figure(per, "fig-hardware-per-token")}</div></div>')
    return _section("hardware", title, how, body + _note(hw.note))


_DASHES = ("dash", "dot", "dashdot", "longdash", "longdashdot")


def render_pos_acc(p: PosAcc) -> str:
    how = ("Probability that the draft token at position i is accepted given that the one "
           "before it was: higher and flatter means longer accepted runs.")
    if p.frame.empty:
        return _section("pos-acc", "Position-wise acceptance", how, _note(p.note))
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
            hovertemplate=f"{_esc(role)}: position %{{x}}<br>acceptance %{{y:.2f}}<extra></extra>"))
    _layout(fig, "draft position i (tokens)", "P(accepted | previous accepted)")
    # Long labels: a legend under the axis title stays clear of the modebar (top right).
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0),
                      margin=dict(t=30, b=110))
    fig.update_yaxes(range=[0, 1.05])
    fig.update_xaxes(dtick=1)
    return _section("pos-acc", "Position-wise acceptance", how, _figure(fig, "fig-pos-acc") + _note(p.note))


def render_time_split(t: TimeSplit) -> str:
    how = ("Where each generated token's time goes: drafting, the target's verify forward, "
           "and the rest of the loop; the bar's length is the latency per token.")
    if t.frame.empty:
        return _section("time-split", "Time per token: draft, verify, other", how, _note(t.note))
    fig = go.Figure()
    for part in ("draft", "verify", "other"):
        rows = t.frame[t.frame["part"] == part]
        fig.add_trace(go.Bar(y=rows["config"], x=rows["ms_per_token"], name=part, orientation="h",
                             marker_color=PART_COLORS[part],
                             hovertemplate=f"%{{y}}<br>{part}: %{{x:.2f}} ms/token<extra></extra>"))
    fig.update_layout(barmode="stack", legend_traceorder="normal")
    _layout(fig, "time per generated token (ms/token)", "", 300)
    fig.update_yaxes(autorange="reversed")        # the best config on top, as listed
    return _section("time-split", "Time per token: draft, verify, other", how,
                    _figure(fig, "fig-time-split") + _note(t.note))


def render_leviathan(lev: Leviathan) -> str:
    how = ("The line is Leviathan et al.'s expected speedup for K draft tokens per round at the "
           "best config's measured acceptance α and draft cost ratio c; dots are measured trials "
           "of the same method. The model counts a verify pass as one target step and every "
           "round as a full K drafts: dots below the line are what that leaves out (verifying "
           "K+1 tokens costs more than one, rounds that draft fewer than K).")
    if lev.curve.empty and lev.points.empty:
        return _section("leviathan", "Expected vs measured speedup", how, _note(lev.note))
    fig = go.Figure()
    if not lev.curve.empty:
        fig.add_trace(go.Scatter(
            x=lev.curve["k"], y=lev.curve["speedup"], mode="lines", name="analytic S(K)",
            line=dict(color="#333", width=2),
            hovertemplate="K=%{x}<br>expected %{y:.3f}×<extra></extra>"))
    if not lev.points.empty:
        frame = lev.points.assign(method=lev.method)
        _method_scatter(fig, frame, "k", "speedup", "measured %{y:.3f}× at K=%{x:.2f}")
    _parity_line(fig, "speedup")
    title = None
    if lev.alpha is not None and lev.cost_ratio is not None:
        title = f"{lev.method}: α = {lev.alpha:.3f} ({lev.alpha_source}), c = {lev.cost_ratio:.3f}"
    _layout(fig, "K (draft tokens per round; dots: mean drafted)", "speedup (× AR)", title=title)
    return _section("leviathan", "Expected vs measured speedup", how,
                    _figure(fig, "fig-leviathan") + _note(lev.note))


def render_pareto(p: Pareto) -> str:
    how = ("Each dot is a complete trial in the plane of the two objectives; the line joins the "
           "Pareto front (no trial is better on both).")
    if p.frame.empty:
        return _section("pareto", "Pareto front", how, _note(p.note))
    fig = go.Figure()
    off = p.frame[~p.frame["on_front"].astype(bool)]
    on = p.frame[p.frame["on_front"].astype(bool)].sort_values("x")
    if not off.empty:
        for method, part in off.groupby("method", sort=False):
            fig.add_trace(go.Scatter(x=part["x"], y=part["y"], mode="markers", name=f"{method}",
                                     text=_hover(part), marker=dict(color=method_color(str(method)),
                                                                    size=7, opacity=0.45),
                                     hovertemplate="%{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>"))
    fig.add_trace(go.Scatter(x=on["x"], y=on["y"], mode="lines+markers", name="Pareto front",
                             text=_hover(on), line=dict(color="#333", width=1.5),
                             marker=dict(color=[method_color(m) for m in on["method"]], size=10,
                                         line=dict(width=1, color="#333")),
                             hovertemplate="front: %{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>"))
    best = p.frame[p.frame["is_best"].astype(bool)]
    if not best.empty:
        fig.add_trace(go.Scatter(x=best["x"], y=best["y"], mode="markers", name="best", text=_hover(best),
                                 marker=dict(symbol="star", size=16, color=BEST_COLOR,
                                             line=dict(width=1, color="black")),
                                 hovertemplate="best: %{text}<extra></extra>"))
    _layout(fig, metric_title(p.x_metric or "x"), metric_title(p.y_metric or "y"))
    return _section("pareto", "Pareto front", how, _figure(fig, "fig-pareto") + _note(p.note))


# ------------------------------------------------------------------ the page
def render_report(data: ReportData) -> str:
    """The whole report as one self-contained HTML page (plotly.js inlined once)."""
    best = data.header.best_trial
    panels: list[Callable[[], str]] = [
        lambda: render_header(data.header),
        lambda: render_top(data.top, best),
        lambda: render_history(data.history),
        lambda: render_knobs(data.knobs),
        lambda: render_parallel(data.parallel),
        lambda: render_importance(data.importance),
        lambda: render_layers(data.layers),
        lambda: render_tree(data.tree),
        lambda: render_pos_acc(data.pos_acc),
        lambda: render_time_split(data.time_split),
        lambda: render_hardware(data.hardware),
        lambda: render_leviathan(data.leviathan),
        lambda: render_pareto(data.pareto),
    ]
    body = "\n".join(panel() for panel in panels)
    title = f"autotune report: {data.header.study}"
    # PlotlyConfig before plotly.js keeps it from looking for MathJax anywhere.
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{_esc(title)}</title>\n<style>{CSS}</style>\n"
            "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>\n"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script>\n"
            f"</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n")
