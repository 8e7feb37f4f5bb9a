"""Predicted vs measured speedup: how far the replay tier can be trusted on this run.

The replay tier (`autotune.replay`) predicts a config's speedup without decoding it:
greedy acceptance replayed exactly from the target's own outputs, time from a cost
model measured on this hardware. A point is a config that was both predicted and
measured:

- "screened then measured": a trial of the main study of a multi-fidelity search, queued
  from the screen with its prediction (`screen` user attribute), then measured;
- "validated finalist": a finalist of a `--fidelity replay` study (its trial's metrics are
  the prediction), measured on the held-out prompts by validation.

Summary statistics: the Spearman rank correlation of predicted against measured speedup
(what the screen relies on: the order, not the level) and the median relative error of
the predicted latency per token.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields
from typing import Any

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.trial import FrozenTrial

from autotune.records.summary import MeasurementSummary
from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.style import (
    esc,
    figure,
    layout,
    method_color,
    method_name,
    note,
    parity_line,
    section,
)
from autotune.report.trials import (
    complete_trials,
    finite,
    metrics_of,
    trial_label,
    trial_method,
)
from autotune.records.answer import current_record
from autotune.records.trial import TrialRecord
from autotune.records.validation import FinalistFigures

# `autotune.replay.run.FIDELITY`, spelled out: importing the replay tier loads torch.
REPLAY = "replay"
SCREENED = "screened then measured"
VALIDATED = "validated finalist"
SYMBOLS = {SCREENED: "circle", VALIDATED: "diamond"}


@dataclass
class Predicted:
    """`frame`: one row per point (COLUMNS; latencies NaN where not recorded, replay_exact
    None where unknown). `count`: the points; `spearman`: rank correlation of predicted
    and measured speedup; `median_latency_error`: median of |predicted - measured| /
    measured ms per token (both None below two points, or where undefined). `note`: why
    there are no points, or what the figures cannot say."""

    frame: pd.DataFrame
    count: int = 0
    spearman: float | None = None
    median_latency_error: float | None = None
    note: str | None = None


@dataclass(frozen=True)
class Point:
    """One config both predicted and measured (a row of `Predicted.frame`, COLUMNS)."""

    number: int
    method: str
    label: str
    source: str
    predicted_speedup: float
    measured_speedup: float
    predicted_latency_ms_per_token: float | None
    measured_latency_ms_per_token: float | None
    replay_exact: bool | None


COLUMNS = [f.name for f in fields(Point)]


def _point(t: FrozenTrial, source: str, predicted: MeasurementSummary,
           measured: MeasurementSummary | FinalistFigures) -> Point | None:
    """One point, or None when either speedup is missing (nothing to place)."""
    pred, meas = finite(predicted.speedup), finite(measured.speedup)
    if pred is None or meas is None:
        return None
    return Point(t.number, trial_method(t), trial_label(t), source, pred, meas,
                 finite(predicted.latency_ms_per_token), finite(measured.latency_ms_per_token),
                 predicted.replay_exact)


def _screened(study: optuna.Study) -> list[Point]:
    points = []
    for t in complete_trials(study):
        screen = TrialRecord.of(t).screen
        if screen is not None and screen.predicted is not None:
            # What replay predicted: a summary's scalars.
            prediction = MeasurementSummary.from_json(screen.predicted)
            points.append(_point(t, SCREENED, prediction, metrics_of(t)))
    return [p for p in points if p is not None]


def _validated(study: optuna.Study) -> list[Point]:
    """Finalists whose trial was predicted (a replay study's), against their held-out
    measurement. A measured study's finalists compare measurement with measurement: none."""
    record = current_record(study)
    if record is None:
        return []
    trials = {t.number: t for t in complete_trials(study)}
    points = []
    for f in record.finalists:
        t = trials.get(f.trial)
        if t is not None and metrics_of(t).fidelity == REPLAY:
            points.append(_point(t, VALIDATED, metrics_of(t), f.figures))
    return [p for p in points if p is not None]


def spearman(frame: pd.DataFrame) -> float | None:
    """Spearman's ρ of predicted against measured speedup: Pearson's r of their average
    ranks (what pandas computes, without needing scipy). None below two points or when
    either side is constant (undefined)."""
    if len(frame) < 2:
        return None
    ranks = frame[["predicted_speedup", "measured_speedup"]].rank()
    return finite(ranks["predicted_speedup"].corr(ranks["measured_speedup"]))


def median_latency_error(frame: pd.DataFrame) -> float | None:
    """Median |predicted - measured| / measured latency per token over the points that
    have both (None below two points, or when none has both)."""
    if len(frame) < 2:
        return None
    pred = pd.to_numeric(frame["predicted_latency_ms_per_token"], errors="coerce")
    meas = pd.to_numeric(frame["measured_latency_ms_per_token"], errors="coerce")
    ok = pred.notna() & meas.notna() & (meas > 0)
    if not ok.any():
        return None
    return finite(((pred[ok] - meas[ok]).abs() / meas[ok]).median())


def _why_none(study: optuna.Study) -> str:
    if any(TrialRecord.of(t).screen is not None for t in study.get_trials(deepcopy=False)):
        return "No screened config has completed its measurement yet."
    if study.user_attrs.get("fidelity") == REPLAY:
        return ("This run searched with --fidelity replay: its figures are predictions, "
                "compared with measurement once validation re-measures the finalists; no "
                "current validation record holds a predicted finalist.")
    return ("No replay predictions in this run (searched with --fidelity measure, or "
            "before the replay tier): every figure is measured.")


def data(study: optuna.Study, objective: ObjectiveInfo | None = None) -> Predicted:
    """The predicted-and-measured points of `study` and their statistics. `objective` is
    unused (a speedup is a speedup whatever the search ranked); taken so every panel is
    called alike."""
    points = _screened(study) + _validated(study)
    frame = pd.DataFrame([astuple(p) for p in points], columns=COLUMNS)
    if frame.empty:
        return Predicted(frame, note=_why_none(study))
    rho, error = spearman(frame), median_latency_error(frame)
    text = None
    if len(frame) < 2:
        text = "One point: no correlation to compute."
    elif rho is None:
        text = "Predicted or measured speedups are all equal: no rank correlation."
    return Predicted(frame, len(frame), rho, error, text)


# ------------------------------------------------------------------ drawing
def _ms(value: Any) -> str:
    v = finite(value)
    return f"{v:.2f}" if v is not None else "–"


def _hover(row: Any) -> str:
    exact = {True: " (acceptance exact)", False: " (acceptance approximate)"}.get(
        row.replay_exact, "")
    return (f"#{row.number} {row.label}<br>predicted {row.predicted_speedup:.3f}× · measured "
            f"{row.measured_speedup:.3f}×<br>ms/token predicted "
            f"{_ms(row.predicted_latency_ms_per_token)} · measured "
            f"{_ms(row.measured_latency_ms_per_token)}<br>{row.source}{exact}")


def _figure(frame: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for method, part in frame.groupby("method", sort=False):
        fig.add_trace(go.Scatter(
            x=part["predicted_speedup"], y=part["measured_speedup"], mode="markers",
            name=method_name(str(method)), text=[_hover(r) for r in part.itertuples()],
            hovertemplate="%{text}<extra></extra>",
            marker=dict(color=method_color(str(method)), size=10, opacity=0.85,
                        symbol=[SYMBOLS.get(s, "circle") for s in part["source"]],
                        line=dict(width=0.5, color="white"))))
    # Same range on both axes, 1.0 included: the diagonal then reads as "exact".
    values = [*frame["predicted_speedup"], *frame["measured_speedup"], 1.0]
    pad = max(0.05, 0.08 * (max(values) - min(values)))
    low, high = min(values) - pad, max(values) + pad
    fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="y = x",
                             line=dict(color="#333", dash="dash", width=1), hoverinfo="skip"))
    parity_line(fig, "speedup")
    layout(fig, "predicted speedup (× AR, replay)", "measured speedup (× AR)")
    fig.update_xaxes(range=[low, high])
    fig.update_yaxes(range=[low, high])
    return fig


def _summary(p: Predicted) -> str:
    counts = p.frame["source"].value_counts()
    parts = [f"{n} {source}{'s' if n != 1 and source == VALIDATED else ''}"
             for source, n in counts.items()]
    text = f"{p.count} point{'s' if p.count != 1 else ''} ({', '.join(parts)})"
    if p.spearman is not None:
        text += f"; Spearman ρ = {p.spearman:.2f} between predicted and measured speedup"
    if p.median_latency_error is not None:
        text += (f"; median latency error {100 * p.median_latency_error:.1f}% "
                 "(|predicted − measured| / measured ms per token)")
    return f'<p class="evidence">{esc(text)}.</p>'


def render(p: Predicted) -> str:
    how = ("Speedups predicted by the replay tier (exact greedy acceptance replayed from the "
           "target's own outputs, plus a cost model measured on this hardware; nothing "
           "decoded) against the same configs measured for real: screened configs measured "
           "in the search, or a replay search's finalists measured on held-out prompts. On "
           "the dashed diagonal the prediction is exact; above the line at measured 1.0 "
           "speculation pays. The screen relies on the order (Spearman ρ), not the level.")
    title = "Predicted vs measured speedup"
    if p.frame.empty:
        return section("predicted", title, how, note(p.note))
    return section("predicted", title, how,
                   _summary(p) + figure(_figure(p.frame), "fig-predicted") + note(p.note))


PANEL = Panel("predicted", lambda i: data(i.study, i.objective), render)
