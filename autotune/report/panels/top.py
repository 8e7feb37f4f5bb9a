"""The top trials as a table: the ten best complete trials in `autotune.ranking` order,
their objective values and the metrics a reader compares (no plotly)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import optuna
import pandas as pd

from autotune.report.objective import ObjectiveInfo, metric_title
from autotune.report.panels.base import Panel
from autotune.report.style import esc, note, num, section
from autotune.report.trials import metrics_of, pareto_numbers, ranked, trial_label, trial_preset

TOP_METRICS = ("speedup", "latency_ms_per_token", "baseline_latency_ms_per_token",
               "mean_accepted_tokens", "mean_verified_tokens", "acceptance_rate", "lossless")


@dataclass
class TopTrials:
    """`frame`: rank, number, label, preset, [pareto], one column per objective metric
    (`value.<metric>`), then the TOP_METRICS present in any row (None where missing).
    `best_number`: the best trial (the first row), highlighted."""

    frame: pd.DataFrame
    note: str | None = None
    best_number: int | None = None


def data(study: optuna.Study, objective: ObjectiveInfo, n: int = 10) -> TopTrials:
    """The `n` best complete trials (the Pareto front first for several objectives)."""
    front = pareto_numbers(study, objective)
    order = ranked(study, objective)
    rows = []
    for rank, t in enumerate(order[:n], start=1):
        m = metrics_of(t)
        row: dict[str, Any] = {"rank": rank, "number": t.number, "label": trial_label(t),
                               "preset": trial_preset(t)}
        if objective.multi:
            row["pareto"] = t.number in front
        for metric, value in zip(objective.metrics, t.values):
            row[f"value.{metric}"] = value
        for key in TOP_METRICS:
            if key not in objective.metrics:
                row[key] = m.get(key)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        keep = [c for c in frame.columns if c in ("rank", "number", "label", "preset", "pareto")
                or c.startswith("value.") or frame[c].notna().any()]
        frame = frame[keep]
    return TopTrials(frame, None if rows else "No trial has completed yet.",
                     order[0].number if order else None)


_HEADS = {"rank": "#", "number": "trial", "label": "config", "preset": "preset",
          "pareto": "Pareto", "speedup": "speedup (× AR)", "latency_ms_per_token": "ms/token",
          "baseline_latency_ms_per_token": "AR ms/token",
          "mean_accepted_tokens": "τ (tokens/round)",
          "mean_verified_tokens": "verified (tokens/pass)", "acceptance_rate": "acceptance",
          "lossless": "lossless"}


def render(top: TopTrials) -> str:
    """The top trials as an HTML table (sortable by eye, copyable, no plotly)."""
    how = ("The ten best complete trials by the objective (★ marks objective columns); "
           "τ is tokens emitted per verify round.")
    if top.frame.empty:
        return section("top", "Top trials", how, note(top.note))
    text_cols = {"label", "preset"}
    heads = []
    for col in top.frame.columns:
        name = (f"{metric_title(col[len('value.'):])} ★" if col.startswith("value.")
                else _HEADS.get(col, col))
        heads.append(f'<th class="{"text" if col in text_cols else ""}">{esc(name)}</th>')
    rows = []
    for record in top.frame.to_dict("records"):
        cells = []
        for col, value in record.items():
            if col in text_cols:
                cls = "text label" if col == "label" else "text"
                cells.append(f'<td class="{cls}">{esc(value) if isinstance(value, str) else ""}</td>')
            elif col in ("rank", "number"):
                cells.append(f"<td>{esc(value)}</td>")
            elif col == "pareto":
                cells.append(f"<td>{'★' if value else ''}</td>")
            else:
                value = None if isinstance(value, float) and math.isnan(value) else value
                cells.append(f"<td>{esc(num(value))}</td>")
        cls = ' class="best"' if record["number"] == top.best_number else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    table = (f"<div class='table-wrap'><table><thead><tr>{''.join(heads)}</tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table></div>")
    return section("top", "Top trials", how, table + note(top.note))


PANEL = Panel("top", lambda i: data(i.study, i.objective), render)
