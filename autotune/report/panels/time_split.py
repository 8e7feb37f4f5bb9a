"""Time per generated token split into drafting, the target's verify forward and the rest
of the loop, for the best config and the AR baseline measured beside it."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
import pandas as pd
import plotly.graph_objects as go

from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.style import PART_COLORS, figure, layout, note, section
from autotune.report.trials import best_speculative, finite, metrics_of

_PARTS = ("draft", "verify", "other")


@dataclass
class TimeSplit:
    """`frame`: config ("best #n …" / "AR baseline"), part (draft / verify / other),
    ms_per_token; the bars of one config add up to its latency per generated token."""

    frame: pd.DataFrame
    note: str | None = None


def data(study: optuna.Study, objective: ObjectiveInfo) -> TimeSplit:
    """Draft / verify / other milliseconds per generated token, best config vs AR baseline
    (the baseline measured interleaved with the best config in the same trial)."""
    columns = ["config", "part", "ms_per_token"]
    best, lead = best_speculative(study, objective)
    notes = [lead] if lead else []
    if best is None:
        if not notes:
            notes.append("No speculative trial completed.")
        return TimeSplit(pd.DataFrame(columns=columns), " ".join(notes))
    m = metrics_of(best)
    name = f"best #{best.number}"
    candidate = {"draft": finite(m.draft_ms_per_token), "verify": finite(m.verify_ms_per_token),
                 "other": finite(m.other_ms_per_token)}
    baseline = {"draft": 0.0, "verify": finite(m.baseline_verify_ms_per_token),
                "other": finite(m.baseline_other_ms_per_token)}
    rows = []
    if all(v is not None for v in candidate.values()):
        rows += [{"config": name, "part": p, "ms_per_token": v} for p, v in candidate.items()]
    else:
        notes.append(f"Trial #{best.number} has no draft / verify / other split "
                     "(measured before the split was recorded).")
    if rows and all(v is not None for v in baseline.values()):
        rows += [{"config": "AR baseline", "part": p, "ms_per_token": v} for p, v in baseline.items()]
    elif rows:
        notes.append("The baseline's split was not recorded.")
    return TimeSplit(pd.DataFrame(rows, columns=columns), " ".join(notes) or None)


def render(t: TimeSplit) -> str:
    how = ("Where each generated token's time goes: drafting, the target's verify forward, "
           "and the rest of the loop; the bar's length is the latency per token.")
    if t.frame.empty:
        return section("time-split", "Time per token: draft, verify, other", how, note(t.note))
    fig = go.Figure()
    for part in _PARTS:
        rows = t.frame[t.frame["part"] == part]
        fig.add_trace(go.Bar(y=rows["config"], x=rows["ms_per_token"], name=part, orientation="h",
                             marker_color=PART_COLORS[part],
                             hovertemplate=f"%{{y}}<br>{part}: %{{x:.2f}} ms/token<extra></extra>"))
    fig.update_layout(barmode="stack", legend_traceorder="normal")
    layout(fig, "time per generated token (ms/token)", "", 300)
    fig.update_yaxes(autorange="reversed")        # the best config on top, as listed
    return section("time-split", "Time per token: draft, verify, other", how,
                   figure(fig, "fig-time-split") + note(t.note))


PANEL = Panel("time-split", lambda i: data(i.study, i.objective), render)
