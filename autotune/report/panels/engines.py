"""Every engine's answer side by side (`--target all` runs only).

One point per answer: autotune's own (the ceiling: our decoder under our rules) and each
engine's, chosen under that engine's drafting rules and raced against the same AR
baseline on the same held-out prompts: its held-out speedup with the 90% interval
(whiskers past the readable range clipped and marked, `report.whiskers`), coloured by
its verdict. An answer that does not speculate shows its best finalist's figure, hollow,
so what was on offer is seen beside the verdict. A table below names each config, its
τ, verdict, where its figure was measured (the engine itself, or autotune's decoder
and why: not installed, a GPU engine, skipped by the budget, failed) and reason; an
answer faster than its τ allows is marked suspect. An engine that ran here was raced
again in itself (`search.engine_races`): its point is that race's, and a dash beside it
marks what our decoder predicted for the same config. Absent from a run without
per-engine answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna
import plotly.graph_objects as go

from autotune.common.interval import Interval
from autotune.frozen.record import AnswerBasis
from autotune.report.panels.base import Panel
from autotune.report.style import esc, figure, layout, num, parity_line, section
from autotune.report.trials import finite
from autotune.report.whiskers import clip, clip_markers, readable_range
from autotune.records.validation import FinalistEntry, ValidationRecord
from autotune.records.answer import (
    OWN_ENGINE,
    SPECULATE,
    current_record,
    engine_names,
    engine_record,
)

OWN_LABEL = "autotune (ceiling)"
# Only a speculate answer is in colour: a figure an engine was told not to use (or could
# not decide on) is what was on offer, greyed and hollow, told apart by symbol and label.
VERDICT_STYLES = {"speculate": ("#0072B2", "circle"),
                  "do_not_speculate": ("#888888", "circle-open"),
                  "undecided": ("#888888", "diamond-open")}


@dataclass(frozen=True)
class EngineAnswer:
    """One answer as the panel shows it: the figure is the chosen config's (speculate)
    or the best finalist's (otherwise; `config` then names that finalist)."""

    engine: str                    # OWN_LABEL for autotune's own
    decision: str
    config: str | None
    speedup: float | None
    interval: Interval | None
    tau: float | None
    reason: str
    # Raced in the engine itself: where, and our decoder's prediction of the same
    # config (or of its best finalist) under the engine's rules, beside the measurement.
    measured_in: str | None = None
    predicted: float | None = None
    predicted_interval: Interval | None = None
    # What its figure is: measured (where) or predicted by autotune's decoder (why).
    basis: AnswerBasis | None = None
    # Its figure exceeds its τ (`ValidationRecord.implausible`): not to be trusted.
    suspect: bool = False


def _shown(part: ValidationRecord, trial: int | None = None) -> FinalistEntry | None:
    """The entry an answer is read by: the winner (speculate) or the one from `trial`,
    else its best measured finalist."""
    if part.decision == SPECULATE and trial is None:
        return part.winning_entry()
    if trial is not None and (entry := part.entry(trial)) is not None:
        return entry
    measured = [f for f in part.finalists if finite(f.speedup) is not None]
    return max(measured, key=lambda f: f.speedup or 0.0, default=None)


def _answer(name: str, part: ValidationRecord, basis: AnswerBasis,
            predicted: ValidationRecord | None = None) -> EngineAnswer:
    shown = _shown(part)
    if shown is None:
        return EngineAnswer(name, part.decision, None, None, None, None, part.reason,
                            basis=basis)
    guess = _shown(predicted, shown.trial) if predicted is not None else None
    return EngineAnswer(name, part.decision, shown.label, finite(shown.speedup),
                        shown.figures.interval, finite(shown.figures.mean_accepted_tokens),
                        part.reason,
                        measured_in=(part.measured_by_label or part.measured_by
                                     if predicted is not None else None),
                        predicted=finite(guess.speedup) if guess is not None else None,
                        predicted_interval=guess.figures.interval if guess is not None
                        else None,
                        basis=basis,
                        suspect=any(f.trial == shown.trial for f in part.implausible()))


def data(study: optuna.Study) -> list[EngineAnswer] | None:
    """autotune's answer, then each engine's, from the study's current validation record;
    None when it has no per-engine answers (the panel is left out)."""
    record = current_record(study)
    if record is None or not engine_names(record):
        return None
    own = engine_record(record, OWN_ENGINE)
    assert own is not None                    # a record always has its own part
    answers = [_answer(OWN_LABEL, own, record.basis(None))]
    for name in engine_names(record):
        part = engine_record(record, name)
        if part is not None:
            answers.append(_answer(name, part, record.basis(name),
                                   record.predicted_for(name)
                                   if name in record.engine_races else None))
    return answers


def _figure(answers: list[EngineAnswer]) -> go.Figure:
    fig = go.Figure()
    bounds = readable_range([a.speedup for a in answers])
    for decision, (color, symbol) in VERDICT_STYLES.items():
        shown = [a for a in answers if a.decision == decision and a.speedup is not None]
        if not shown:
            continue
        whiskers = clip([a.speedup for a in shown],
                        [a.interval.low if a.interval else None for a in shown],
                        [a.interval.high if a.interval else None for a in shown], bounds)
        fig.add_trace(go.Scatter(
            x=[a.engine for a in shown], y=[a.speedup for a in shown], mode="markers+text",
            name=decision.replace("_", " "),
            # The verdict beside each point: it is the answer, the figure only its support.
            text=[decision.replace("_", " ") + _suspect(a) for a in shown],
            textposition="middle right",
            textfont=dict(color=color, size=11), cliponaxis=False,
            hovertext=[_hover(a) for a in shown], hovertemplate="%{hovertext}<extra></extra>",
            marker=dict(color=color, size=12, symbol=symbol, line=dict(width=2, color=color)),
            error_y=dict(type="data", symmetric=False, array=whiskers.up,
                         arrayminus=whiskers.down, thickness=1.5, width=5, color=color)))
        clip_markers(fig, [a.engine for a in shown], whiskers,
                     [(a.interval.low, a.interval.high) if a.interval else None for a in shown],
                     color)
    guessed = [a for a in answers if a.predicted is not None]
    if guessed:
        # Raced in the engine itself: our decoder's prediction of the same config, a dash
        # beside the engine's own figure (not clipped: the engine's figure sets the range).
        fig.add_trace(go.Scatter(
            x=[a.engine for a in guessed], y=[a.predicted for a in guessed], mode="markers",
            name="predicted by autotune's decoder",
            hovertext=[f"{esc(a.engine)}: autotune's decoder under its rules predicted "
                       f"{a.predicted:.3f}× {a.predicted_interval or ''}; measured in "
                       f"{esc(a.measured_in or '?')}: {num(a.speedup)}×" for a in guessed],
            hovertemplate="%{hovertext}<extra></extra>",
            marker=dict(color="#D55E00", size=16, symbol="line-ew-open",
                        line=dict(width=3, color="#D55E00"))))
    layout(fig, "engine (its answer, under its own drafting rules)", "held-out speedup (× AR)")
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=[a.engine for a in answers])
    fig.update_yaxes(range=list(bounds))
    parity_line(fig, "speedup")
    return fig


def _hover(a: EngineAnswer) -> str:
    figure_text = (f"{a.speedup:.3f}× {a.interval}" if a.interval else f"{a.speedup:.3f}×")
    which = "answer" if a.decision == SPECULATE else "best finalist"
    return (f"{esc(a.engine)}: {esc(a.decision.replace('_', ' '))}{_suspect(a)}<br>{which}: "
            f"{esc(a.config or '-')}<br>{figure_text}"
            + (f" · τ {a.tau:.2f}" if a.tau is not None else "")
            + (f"<br>{esc(a.basis.text())}" if a.basis is not None else "")
            + f"<br>{esc(a.reason)}")


def _suspect(a: EngineAnswer) -> str:
    """`, suspect` for an answer whose figure is faster than its τ allows."""
    return ", suspect" if a.suspect else ""


def _table(answers: list[EngineAnswer]) -> str:
    heads: tuple[str, ...] = ("engine", "verdict", "config (or best finalist)",
                              "held-out speedup", "90% interval", "τ", "reason")
    in_engines = any(a.measured_in for a in answers)
    heads = (*heads[:6], "measured in",
             *(("autotune's decoder predicted",) if in_engines else ()), heads[6])
    rows = []
    for a in answers:
        cells = [f'<td class="text nowrap">{esc(a.engine)}</td>',
                 f'<td class="text nowrap">{esc(a.decision.replace("_", " "))}'
                 f'{esc(_suspect(a))}</td>',
                 f'<td class="text label">{esc(a.config or "-")}</td>',
                 f"<td>{esc(num(a.speedup))}</td>",
                 f'<td class="nowrap">{esc(str(a.interval) if a.interval else "-")}</td>',
                 f"<td>{esc(num(a.tau))}</td>"]
        # Where its figure was measured: the engine itself (its label), or autotune's
        # decoder, and for an engine's answer why that is a prediction.
        where = (a.measured_in if a.measured_in and a.basis is not None
                 and not a.basis.predicted else a.basis.short() if a.basis is not None
                 else "autotune's decoder")
        cells.append(f'<td class="text">{esc(where)}</td>')
        if in_engines:
            guess = (f"{num(a.predicted)} {a.predicted_interval or ''}".strip()
                     if a.predicted is not None else "-")
            cells.append(f'<td class="nowrap">{esc(guess)}</td>')
        cells.append(f'<td class="text">{esc(a.reason)}</td>')
        cls = ' class="best"' if a.decision == SPECULATE else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    head = "".join(f'<th class="text">{esc(h)}</th>' for h in heads)
    return (f"<div class='table-wrap'><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def render(answers: list[EngineAnswer]) -> str:
    how = ("Each engine's own answer, chosen under that engine's drafting rules and raced "
           "against the same AR baseline on the same held-out prompts, beside autotune's "
           "own (the ceiling): held-out speedup with its 90% interval; filled: speculate, "
           "grey and hollow: the best finalist of an engine told not to speculate (circle) or "
           "undecided (diamond), its verdict beside it. A whisker past the plot's range is clipped at the edge "
           "and marked with a triangle (its hover gives the whole interval). The table says "
           "where each figure was measured: in the engine itself, or in autotune's decoder "
           "under the engine's rules (a prediction) and why; \"suspect\" marks a figure "
           "faster than its τ allows (its baseline ran slower than its own decoding "
           "explains).")
    return section("engines", "Every engine's answer", how,
                   figure(_figure(answers), "fig-engines") + _table(answers))


PANEL = Panel("engines", lambda i: data(i.study), render, optional=True)
