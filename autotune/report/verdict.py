"""What the run recommends, in words: the header's headline and the finalists' evidence.

`autotune.records.answer.answer` decides (the one rule `best.json` and the exports follow);
this module only says it. Four cases:
- validated: the winner's validated speedup with its 90% interval on the held-out
  prompts, beside the search's own figure for the same config;
- do not speculate: plainly, with the reason and every finalist as evidence;
- not validated (no record: an old run, or one stopped before its finalists ran): the
  search's own figure, called that;
- stale (a resumed search completed trials the record never judged): as not validated,
  saying why the record no longer counts.

Plain text only (the header escapes it); torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.common.interval import Interval
from autotune.report.documents import RunFacts
from autotune.report.objective import ObjectiveInfo
from autotune.report.trials import finite, metrics_of
from autotune.records import ranking
from autotune.records.answer import DO_NOT_SPECULATE, UNDECIDED, answer, stored_record
from autotune.records.validation import (
    FinalistEntry,
    FinalistFigures,
    ValidationRecord,
)

VALIDATED = "validated"
# The validated answers that recommend no speculative config.
NOT_SPECULATING = (DO_NOT_SPECULATE, UNDECIDED)
NOT_VALIDATED = "not_validated"
STALE = "stale"

__all__ = ["DO_NOT_SPECULATE", "NOT_SPECULATING", "NOT_VALIDATED", "STALE", "UNDECIDED",
           "VALIDATED", "Verdict", "figure_text",
           "plural", "search_speedup", "stale_reason", "verdict"]


@dataclass
class Verdict:
    """What the run recommends and the figures behind it.

    `status`: VALIDATED, DO_NOT_SPECULATE, UNDECIDED, NOT_VALIDATED or STALE. `trial`: the
    recommended trial (`answer().trial`; None for "do not speculate" without a baseline
    trial, or no complete trial). `headline`: one plain sentence; `emphasis`: the part of
    it drawn bold. `speedup` / `interval` / `latency_ms_per_token` /
    `baseline_ms_per_token`: the figures the headline states (validated ones when
    validated; the AR baseline's, speedup 1.0, for "do not speculate"). `search_*`: the
    search's own figure for the recommended config and how many prompts it ran on.
    `evidence`: one line per finalist (do not speculate). `record`: the validation record
    as stored (stale ones too; None when there is none).
    """

    status: str
    trial: FrozenTrial | None = None
    headline: str = ""
    emphasis: str = ""
    speedup: float | None = None
    interval: Interval | None = None
    latency_ms_per_token: float | None = None
    baseline_ms_per_token: float | None = None
    search_speedup: float | None = None
    search_prompts: int | None = None
    evidence: list[str] = field(default_factory=list)
    record: ValidationRecord | None = None

    @property
    def validated(self) -> bool:
        return self.status in (VALIDATED, *NOT_SPECULATING)


def search_speedup(f: FinalistEntry) -> float | None:
    """The search's own speedup of a finalist's config, as the record copied it."""
    return finite(f.search.get("speedup"))


def plural(n: Any, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def figure_text(speedup: float | None, interval: Interval | None,
                prompts: int | None = None) -> str:
    """`1.10× [1.05, 1.15]`; `1.10× (1 prompt: no interval)` when there is no interval."""
    value = finite(speedup)
    if value is None:
        return "–"
    if interval is not None:
        return f"{value:.2f}× [{interval.low:.2f}, {interval.high:.2f}]"
    why = f"{plural(prompts, 'prompt')}: no interval" if isinstance(prompts, int) else "no interval"
    return f"{value:.2f}× ({why})"


def stale_reason(study: optuna.Study) -> str | None:
    """Why a stored validation record no longer counts; None when there is none or it is
    current."""
    record = stored_record(study)
    if record is None:
        return None
    now = len(ranking.complete(study))
    judged = record.complete_trials
    if judged == now:
        return None
    return (f"the validation record judged {plural(judged, 'complete trial')}, the study now "
            f"has {now} (the search went on after it): its figures no longer count")


def _search_figures(trial: FrozenTrial | None, run: RunFacts) -> tuple[float | None, int | None]:
    """The search's own speedup of `trial` and the prompts it ran on (its measurement's
    distinct prompts, else the run's)."""
    if trial is None:
        return None, None
    metrics = metrics_of(trial)
    prompts = metrics.prompts if "prompts" in metrics.model_fields_set else run.prompts
    return finite(metrics.speedup), prompts


def _held_out(record: ValidationRecord) -> str:
    measured = (f"{plural(record.prompts, 'held-out prompt')} × "
                f"{plural(record.repeats, 'repeat')}")
    if record.pooled:
        return (f"{record.pool_prompts} held-out prompts, prediction-powered: the "
                f"replay tier's predictions corrected by {measured} measured")
    return measured


def _finalist_line(f: FinalistEntry) -> str:
    search = search_speedup(f)
    line = f"{f.role}: trial #{f.trial} {f.label}: {figure_text(f.speedup, f.figures.interval)}"
    if search is not None:
        line += f" (search {search:.2f}×)"
    if f.figures.lossless is False:
        line += ", not lossless"
    elif f.figures.near_tie_prompts:
        n = len(f.figures.near_tie_prompts)
        line += f", lossless up to {n} near-tie{'s' if n != 1 else ''}"
    return line


def verdict(study: optuna.Study, objective: ObjectiveInfo, run: RunFacts | None = None) -> Verdict:
    """The recommendation of `study` (by `validation.answer`) and how to say it."""
    run = run or RunFacts()
    chosen = answer(study, objective)
    trial, record = chosen.trial, chosen.record
    if record is None:
        search, prompts = _search_figures(trial, run)
        stale = stale_reason(study)
        out = Verdict(STALE if stale else NOT_VALIDATED, trial, speedup=search,
                      search_speedup=search, search_prompts=prompts,
                      record=stored_record(study) if stale else None)
        if trial is None:
            return out
        metrics = metrics_of(trial)
        out.latency_ms_per_token = finite(metrics.latency_ms_per_token)
        out.baseline_ms_per_token = finite(metrics.baseline_latency_ms_per_token)
        out.emphasis = "Not validated: the search's own figure"
        figure = (f"{search:.2f}× the AR baseline" if search is not None
                  else "no speedup measured")
        on = f" on {plural(prompts, 'prompt')}" if prompts is not None else ""
        out.headline = f"{out.emphasis}, {figure}{on}" + (f" ({stale})" if stale else "")
        return out

    if not chosen.speculate:
        baseline_ms = finite(record.baseline_ms)
        undecided = record.decision == UNDECIDED
        out = Verdict(UNDECIDED if undecided else DO_NOT_SPECULATE, trial, speedup=1.0,
                      latency_ms_per_token=baseline_ms, baseline_ms_per_token=baseline_ms,
                      record=record)
        out.emphasis = "Undecided" if undecided else "Do not speculate"
        out.headline = (f"{out.emphasis}: "
                        f"{record.reason or 'no finalist was shown faster'}")
        if record.finalists:
            out.evidence = [f"Finalists on {_held_out(record)} (90% intervals):",
                            *(_finalist_line(f) for f in record.finalists)]
        return out

    own = record.entry(trial.number) if trial is not None else None
    figures = own.figures if own is not None else FinalistFigures()
    search, prompts = _search_figures(trial, run)
    recorded = search_speedup(own) if own is not None else None
    search = recorded if recorded is not None else search
    out = Verdict(VALIDATED, trial, speedup=finite(figures.speedup),
                  interval=figures.interval,
                  latency_ms_per_token=finite(figures.latency_ms_per_token),
                  baseline_ms_per_token=finite(figures.baseline_latency_ms_per_token),
                  search_speedup=search, search_prompts=prompts, record=record)
    out.emphasis = figure_text(out.speedup, out.interval, record.prompts)
    on = f" on {plural(prompts, 'prompt')}" if prompts is not None else ""
    search_text = f"{search:.2f}×{on}" if search is not None else "not measured"
    out.headline = (f"Validated: {out.emphasis} (90% interval) on {_held_out(record)} "
                    f"(search: {search_text})")
    return out
