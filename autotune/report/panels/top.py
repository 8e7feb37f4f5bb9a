"""The top trials as a table: the ten best complete trials in `autotune.records.ranking` order,
their objective values and the metrics a reader compares (no plotly). When the run was
validated, the finalists are marked (and listed even when they rank below ten) with their
validated speedup and its 90% interval beside the search's figure; the highlighted row is
the recommended config (`validation.answer`), not necessarily the first."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import optuna
import pandas as pd

from autotune.report.objective import ObjectiveInfo, metric_title
from autotune.report.panels.base import Panel
from autotune.report.style import esc, note, num, section
from autotune.report.trials import (
    metrics_of,
    pareto_numbers,
    ranked,
    trial_label,
    trial_preset,
)
from autotune.records.answer import answer

TOP_METRICS = ("speedup", "latency_ms_per_token", "baseline_latency_ms_per_token",
               "mean_accepted_tokens", "mean_verified_tokens", "acceptance_rate", "lossless",
               "near_ties")


@dataclass
class TopTrials:
    """`frame`: rank, number, label, preset, [finalist: its role], [pareto], one column
    per objective metric (`value.<metric>`), then the TOP_METRICS present in any row (None
    where missing), with `validated` and `validated_interval` (a finalist's validated
    speedup and its 90% `Interval`) right after the search's speedup when the run was validated.
    `best_number`: the recommended trial (`validation.answer`), highlighted; None for
    "do not speculate" without a baseline trial."""

    frame: pd.DataFrame
    note: str | None = None
    best_number: int | None = None


def data(study: optuna.Study, objective: ObjectiveInfo, n: int = 10) -> TopTrials:
    """The `n` best complete trials (the Pareto front first for several objectives), then
    the validated finalists and the recommended trial when they rank below them."""
    front = pareto_numbers(study, objective)
    order = ranked(study, objective)
    chosen = answer(study, objective)
    finalists = {f.trial: f for f in (chosen.record.finalists if chosen.record else [])}
    recommended = chosen.trial.number if chosen.trial is not None else None
    shown = [(rank, t) for rank, t in enumerate(order, start=1)
             if rank <= n or t.number in finalists or t.number == recommended]
    rows = []
    for rank, t in shown:
        m = metrics_of(t)
        row: dict[str, Any] = {"rank": rank, "number": t.number, "label": trial_label(t),
                               "preset": trial_preset(t)}
        if chosen.record is not None:
            own = finalists.get(t.number)
            row["finalist"] = own.role if own else None
            row["validated"] = own.speedup if own else None
            row["validated_interval"] = own.figures.interval if own else None
        if objective.multi:
            row["pareto"] = t.number in front
        for metric, value in zip(objective.metrics, t.values):
            row[f"value.{metric}"] = value
        for key in TOP_METRICS:
            if key not in objective.metrics:
                row[key] = m.figure(key)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        keep = [c for c in frame.columns if c in _ALWAYS or c.startswith("value.")
                or frame[c].notna().any()]
        frame = frame[_validated_beside_search(keep)]
    return TopTrials(frame, None if rows else "No trial has completed yet.", recommended)


# Columns kept even when empty: a validated run shows which rows were finalists.
_ALWAYS = ("rank", "number", "label", "preset", "pareto", "finalist", "validated",
           "validated_interval")
_VALIDATED = ("validated", "validated_interval")


def _validated_beside_search(columns: list[str]) -> list[str]:
    """Move the validated columns right after the search's speedup (an objective column
    or a metric), else after the objective columns."""
    rest = [c for c in columns if c not in _VALIDATED]
    moved = [c for c in _VALIDATED if c in columns]
    if not moved:
        return rest
    anchors = [i for i, c in enumerate(rest) if c in ("speedup", "value.speedup")]
    if not anchors:
        anchors = [i for i, c in enumerate(rest) if c.startswith("value.")] or [len(rest) - 1]
    at = anchors[-1] + 1
    return rest[:at] + moved + rest[at:]


_HEADS = {"rank": "#", "number": "trial", "label": "config", "preset": "preset",
          "pareto": "Pareto", "finalist": "finalist", "speedup": "speedup (× AR)",
          "validated": "validated speedup", "validated_interval": "90% interval",
          "latency_ms_per_token": "ms/token",
          "baseline_latency_ms_per_token": "AR ms/token",
          "mean_accepted_tokens": "τ (tokens/round)",
          "mean_verified_tokens": "verified (tokens/pass)", "acceptance_rate": "acceptance",
          "lossless": "lossless",
          # Prompt runs whose output left AR's at a near-tie (bf16 / fp16 rounding).
          "near_ties": "near-ties"}


def render(top: TopTrials) -> str:
    """The top trials as an HTML table (sortable by eye, copyable, no plotly)."""
    how = ("The ten best complete trials by the objective (★ marks objective columns); "
           "τ is tokens emitted per verify round.")
    if "finalist" in top.frame:
        how += (" Finalists were re-measured on held-out prompts: their validated speedup "
                "and its 90% interval stand beside the search's figure; the highlighted row "
                "is the recommended config.")
    if top.frame.empty:
        return section("top", "Top trials", how, note(top.note))
    text_cols = {"label", "preset", "finalist"}
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
                cls = {"label": "text label", "finalist": "text nowrap"}.get(col, "text")
                cells.append(f'<td class="{cls}">{esc(value) if isinstance(value, str) else ""}</td>')
            elif col in ("rank", "number"):
                cells.append(f"<td>{esc(value)}</td>")
            elif col == "pareto":
                cells.append(f"<td>{'★' if value else ''}</td>")
            elif col == "validated_interval":
                cells.append(f'<td class="nowrap">{esc(num(value, 2))}</td>')
            else:
                value = None if isinstance(value, float) and math.isnan(value) else value
                cells.append(f"<td>{esc(num(value))}</td>")
        cls = ' class="best"' if record["number"] == top.best_number else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    table = (f"<div class='table-wrap'><table><thead><tr>{''.join(heads)}</tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table></div>")
    return section("top", "Top trials", how, table + note(top.note))


PANEL = Panel("top", lambda i: data(i.study, i.objective), render)
