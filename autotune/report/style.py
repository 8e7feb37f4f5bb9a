"""The report's shared look: HTML escaping, number formatting, method colours and names,
the figure layout, and the section / note markup every panel is drawn in.

Each panel is a `<section class="panel" id="panel-<id>">` with a heading, one sentence on
how to read it, and either its figures or a `<p class="note">` saying why there is none.
A figure is a `<div>` plus the `<script>` that draws it, with no plotly.js, MathJax or
URL of its own: the page inlines plotly.js once (`report.page`).
"""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from autotune.common.interval import Interval
from autotune.schema.methods import find_method

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
FIG_HEIGHT = 400
SMALL_FIG_HEIGHT = 340         # the two-per-row knob and importance grids

# Methods the registry does not know (a plug-in not loaded here) take a spare colour,
# picked from the name so no state is kept; registered ones bring their own
# (colour-blind-safe Okabe-Ito order).
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
td.nowrap { white-space: nowrap; }
.key span { margin-right: 18px; font-size: 0.92em; }
.key i { font-style: normal; font-size: 1.2em; }
tr.best td { background: #fff3e8; font-weight: 600; }
p.evidence { margin: 0 0 4px; }
.summary.facts { grid-template-columns: 1fr; margin-top: 10px; }
ul.evidence { margin: 0 0 12px; padding-left: 22px; font-size: 0.93em; }
details { margin-top: 8px; font-size: 0.92em; }
code { font-size: 0.95em; }
"""


# ------------------------------------------------------------------ text
def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def num(value: Any, digits: int = 3) -> str:
    """A number for a table or the header; "–" for missing or non-finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if abs(value) < 1e4 else f"{value:.4g}"
    if isinstance(value, Interval):
        value = value.to_json()
    if isinstance(value, list):
        return "[" + ", ".join(num(v, digits) for v in value) + "]"
    return str(value)


def note(text: str | None) -> str:
    return f'<p class="note">{esc(text)}</p>' if text else ""


def section(panel: str, title: str, how: str, body: str) -> str:
    return (f'<section class="panel" id="panel-{panel}">\n<h2>{esc(title)}</h2>\n'
            f'<p class="how">{esc(how)}</p>\n{body}\n</section>')


# ------------------------------------------------------------------ methods
def method_color(method: str) -> str:
    """The colour of a method, stable across figures and runs: the registry's, or a
    spare picked from the name for a method it does not know."""
    spec = find_method(method)
    if spec is not None:
        return spec.color
    return _SPARE_COLORS[sum(map(ord, method)) % len(_SPARE_COLORS)]


def method_name(method: str) -> str:
    """Legend name of a method: the registry's label (the AR baseline's is `AR baseline`)."""
    spec = find_method(method)
    return spec.label if spec is not None else method


# ------------------------------------------------------------------ figures
def hover(frame: pd.DataFrame) -> list[str]:
    """`#12 ngram k=1 n=3..4 [vllm_ngram]` per row."""
    out = []
    for row in frame.itertuples(index=False):
        preset = getattr(row, "preset", None)
        tag = f" [{preset}]" if isinstance(preset, str) and preset else ""
        out.append(f"#{row.number} {row.label}{tag}")
    return out


def layout(fig: go.Figure, x_title: str, y_title: str, height: int = FIG_HEIGHT,
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


def figure(fig: go.Figure, div_id: str) -> str:
    """One figure as a div + script, with no plotly.js, MathJax or URL of its own."""
    return fig.to_html(full_html=False, include_plotlyjs=False, include_mathjax=False,
                       config=PLOTLY_CONFIG, div_id=div_id, default_width="100%",
                       default_height=f"{fig.layout.height or FIG_HEIGHT}px")


def method_scatter(fig: go.Figure, frame: pd.DataFrame, x: str, y: str, hover_y: str,
                   categorical: bool = False) -> None:
    """One trace per method (consistent colours, a legend by method), then the best
    trial as a larger star on top."""
    for method, part in frame.groupby("method", sort=False):
        color = method_color(str(method))
        text = hover(part)
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
            name="best", text=hover(best),
            marker=dict(symbol="star", size=16, color=BEST_COLOR, line=dict(width=1, color="black")),
            hovertemplate=f"best: %{{text}}<br>{hover_y}<extra></extra>"))
    if categorical:
        fig.update_layout(boxmode="overlay")
        fig.update_xaxes(type="category", tickangle=-30)


def parity_line(fig: go.Figure, y_metric: str) -> None:
    """The AR parity line at 1× on speedup axes: above it, speculation pays."""
    if y_metric == "speedup":
        fig.add_hline(y=1.0, line=dict(color="#888", dash="dash", width=1),
                      annotation_text="AR (1×)", annotation_position="bottom right")
