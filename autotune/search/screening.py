"""Multi-fidelity search: the replay tier screens many configs, measurement confirms the
best few.

The screen is an Optuna study of its own (`<study>.screen`, in the same storage, so it
resumes after `kill -9` without replaying finished configs and is shared by many
workers over PostgreSQL), over the same space and objective, with every timed metric
predicted by `autotune.replay` (`EvalContext.fidelity = "replay"`). The documented
defaults are screened like any config. The measured study then starts with the AR
baseline and the screen's best distinct configs (the best of each method x shape family
predicted faster than AR first, then the best of every other method, measured on every
prompt (never pruned), then by rank; the best-screened documented default among them,
so validation can compare against it), each carrying its prediction (`screen` user
attribute) for the report's predicted-against-measured panel.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import sys
from pathlib import Path
from typing import Any, Collection, Mapping

from optuna.trial import FrozenTrial

from autotune.common.files import write_atomically
from autotune.records.summary import MeasurementSummary
from autotune.records import ranking
from autotune.search.objectives import EvalContext, Objective
from autotune.search.study import SearchSettings, StudyRunner, TrialEvent
from autotune.search.trial_record import (
    BASELINE,
    SCREEN_ATTR,  # noqa: F401  (report/panels/predicted.py reads the key from here)
    QueuedTrial,
    ScreenNote,
    TrialRecord,
)
from autotune.space import BoundSpace

SCREEN_SUFFIX = ".screen"
SCREEN_FILE = "screen.csv"
# Prediction keys carried to a measured trial (the panel and trials.csv read them).
PREDICTED_KEYS = ("speedup", "latency_ms_per_token", "mean_accepted_tokens",
                  "replay_exact")


def screen_study_name(study_name: str) -> str:
    return study_name + SCREEN_SUFFIX


def _config_key(trial: FrozenTrial) -> str:
    """A trial's config as a comparable string, its workload's sampling left out."""
    config = TrialRecord.of(trial).config_json or {}
    return json.dumps({k: v for k, v in config.items()
                       if k not in ("temperature", "top_p")}, sort_keys=True)


def run_screen(settings: SearchSettings, trials: int, space: BoundSpace,
               objective: Objective, context: EvalContext, label: str = ""
               ) -> tuple[StudyRunner, str]:
    """Replay `trials` configs (finished ones count, as in any resumed study). Returns the
    screen's runner and why it stopped. `label` names whose configs they are in the
    progress line ("vllm's")."""
    replay_context = dataclasses.replace(context, fidelity="replay")
    screen_settings = dataclasses.replace(
        settings, study_name=screen_study_name(settings.study_name), trials=trials,
        prune=False, trial_timeout_s=None, distinct=True,
        # Replays are cheap: explore a quarter of the screen at random before TPE models
        # it, so every method and branch of the space is screened, not the first lucky one.
        # A replay is deterministic: each config is screened once (`distinct`; TPE kept
        # proposing its favourite, 230 of 400 screened configs were repeats).
        startup_trials=max(10, trials // 4),
        study_attrs={**settings.study_attrs, "fidelity": "replay"})
    runner = StudyRunner(screen_settings, space, objective, replay_context)
    done, _, _ = runner.progress()
    if done >= trials:
        return runner, "budget"
    print(f"autotune: screening {trials} {label + ' ' if label else ''}configs by replay "
          f"({done} done)",
          file=sys.stderr, flush=True)
    tty = sys.stderr.isatty()
    shown = {done}

    def progress(event: TrialEvent) -> None:
        # One line per 50 counted configs (an infeasible point does not count, so the
        # count can stand still for a few events).
        if event.finished in shown and not tty:
            return
        if event.finished % 50 == 0 or event.finished == event.budget or tty:
            shown.add(event.finished)
            best = ""
            if event.best is not None:
                best = f"; best predicted {event.best.values[0]:.4g} (screen trial {event.best.number})"
            end = "\r" if tty and event.finished < event.budget else "\n"
            print(f"  [{event.finished}/{event.budget}] screened{best}", end=end,
                  file=sys.stderr, flush=True)

    reason = runner.run(on_trial=progress)
    return runner, reason


def _family(trial: FrozenTrial) -> tuple[str, str]:
    """(method, chain or tree kind): configs of one family differ only in numbers."""
    from autotune.schema.config import shape_of_mapping

    record = TrialRecord.of(trial)
    shape = shape_of_mapping(record.config_json or {})
    return record.method, shape.kind if shape is not None else "?"


def _behaviour(trial: FrozenTrial) -> tuple[Any, ...] | None:
    """What replay saw a config do on the search prompts: its family and its predicted
    rounds (τ, drafted and verified per round, latency). Two configs alike in all of it
    (n-gram ranges that find the same matches, a K never reached) would only measure the
    same decoding twice. None when the figures are missing."""
    metrics = TrialRecord.of(trial).metrics
    if metrics is None:
        return None
    figures = (metrics.mean_accepted_tokens, metrics.mean_drafted_tokens,
               metrics.mean_verified_tokens, metrics.rounds, metrics.latency_ms_per_token)
    if any(not isinstance(value, (int, float)) for value in figures):
        return None
    return (_family(trial), *(round(float(value or 0), 6) for value in figures))


def params_key(params: Mapping[str, Any]) -> str:
    """One config's Optuna params as a comparable string (a screen trial and the measured
    trial queued from it share their params)."""
    return json.dumps(dict(params), sort_keys=True, default=str)


def ranked_candidates(screen: StudyRunner, objective: Objective
                       ) -> tuple[FrozenTrial | None, list[FrozenTrial]]:
    """The screen's AR baseline trial (None if it has none) and its speculative configs
    in rank order."""
    ranked = ranking.ranked(screen.study, objective)
    records = [TrialRecord.of(t) for t in ranked]
    baseline = next((r.trial for r in records if r.preset == BASELINE), None)
    order = [r.trial for r in records
             if r.config_json and r.preset != BASELINE and r.method != "none"]
    return baseline, order


def distinct_trials(order: list[FrozenTrial], taken: Collection[FrozenTrial] = ()
              ) -> list[FrozenTrial]:
    """`order` less repeats: a config already seen, or one replay saw decode like an
    earlier one (`_behaviour`) or like one of `taken` (already measured), is left out."""
    seen = {_config_key(t) for t in taken}
    behaviours = {_behaviour(t) for t in taken} - {None}
    distinct: list[FrozenTrial] = []
    for trial in order:
        key = _config_key(trial)
        behaviour = _behaviour(trial)
        if key not in seen and (behaviour is None or behaviour not in behaviours):
            seen.add(key)
            behaviours.add(behaviour)
            distinct.append(trial)
    return distinct


def _queued(trial: FrozenTrial, rank: int, unpruned: bool = False) -> QueuedTrial:
    """A screened config as the measured study queues it: its screen rank and prediction
    (and the documented default it is, if one)."""
    record = TrialRecord.of(trial)
    metrics = record.metrics or MeasurementSummary()
    note = ScreenNote(rank=rank, trial=trial.number,
                      predicted={k: metrics.figure(k) for k in PREDICTED_KEYS})
    return QueuedTrial(dict(trial.params), screen=note, preset=record.preset,
                       unpruned=unpruned)


def screened_queue(screen: StudyRunner, objective: Objective, n: int) -> list[QueuedTrial]:
    """Up to `n` screened configs to measure: first the best of
    each family (method x chain/tree) that replay predicts better than the AR baseline, so
    the measurement sees more than near-copies of one winner, then the best of each method
    not yet among them (even one predicted slower than AR), then the best of the rest by
    rank; the best-screened documented default always among them (it replaces the last).
    Configs that replay saw decode alike (`_behaviour`) are measured once."""
    baseline, order = ranked_candidates(screen, objective)
    sign = ranking.sign(objective, 0)
    distinct = distinct_trials(order)

    def beats_baseline(trial: FrozenTrial) -> bool:
        return baseline is None or sign * trial.values[0] < sign * baseline.values[0]

    picked: list[FrozenTrial] = []
    families: set[tuple[str, str]] = set()
    for trial in distinct:
        family = _family(trial)
        if family not in families and beats_baseline(trial):
            families.add(family)
            picked.append(trial)
    # Then the best of each method replay predicts slower than AR: measured once, so the
    # report sets every method of the space (a trained head too) beside the others on
    # measured figures, and replay's verdict on a loser is checked, not taken on trust.
    methods = {_family(t)[0] for t in picked}
    losers: list[FrozenTrial] = []
    for trial in distinct:
        method = _family(trial)[0]
        if method not in methods:
            methods.add(method)
            picked.append(trial)
            losers.append(trial)
    picked = picked[:n]
    representatives = list(picked)
    picked += [t for t in distinct if t not in picked][: n - len(picked)]
    default = next((t for t in distinct if TrialRecord.of(t).preset), None)
    if n > 0 and default is not None and default not in picked:
        # The default takes the place of the last config picked by rank alone, else of
        # the last representative.
        fillers = [t for t in picked if t not in representatives]
        picked.remove(fillers[-1] if fillers else picked[-1])
        picked.append(default)
    picked.sort(key=distinct.index)
    # A losing method's only config is measured on every prompt: pruning would leave a
    # method the report compares with a prompt or two.
    return [_queued(trial, distinct.index(trial) + 1, unpruned=trial in losers)
            for trial in picked]


def next_screened(screen: StudyRunner, objective: Objective, measured: Collection[str],
                  n: int) -> list[QueuedTrial]:
    """Up to `n` more screened configs for a resumed search with a
    larger budget: the screen's next configs by rank, leaving out those in the measured
    study already (`measured`: their `params_key`s) and any replay saw decode like one of
    them or like an earlier pick (one per behaviour, as in `screened_queue`)."""
    if n <= 0:
        return []
    _, order = ranked_candidates(screen, objective)
    taken = [t for t in order if params_key(t.params) in measured]
    fresh = distinct_trials([t for t in order if params_key(t.params) not in measured], taken)
    ranks = {t.number: i + 1 for i, t in enumerate(distinct_trials(order))}
    return [_queued(t, ranks.get(t.number, len(order))) for t in fresh[:n]]


def screen_failure(screen: StudyRunner) -> str:
    """The most common reason the screen's trials failed, for a warning."""
    from collections import Counter

    records = [TrialRecord.of(t) for t in screen.study.get_trials(deepcopy=False)]
    errors = Counter(r.error for r in records if r.error)
    if not errors:
        return "no trial failed"
    reason, count = errors.most_common(1)[0]
    return f"{count} failed: {reason}"


def write_screen_csv(run_dir: Path, screen: StudyRunner) -> None:
    """screen.csv: one row per screened config, its predicted metrics (fidelity replay)."""
    trials = ranking.complete(screen.study)
    keys: list[str] = []
    rows = []
    for trial in trials:
        stored = TrialRecord.of(trial).metrics or MeasurementSummary()
        metrics = {k: v for k, v in stored.to_json().items() if not isinstance(v, (list, dict))}
        for key in metrics:
            if key not in keys:
                keys.append(key)
        rows.append((trial, metrics))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["number", "fidelity", "preset", "config", *keys])
    for trial, metrics in rows:
        record = TrialRecord.of(trial)
        writer.writerow([trial.number, "replay", record.preset or "",
                         json.dumps(record.config_json or {}, sort_keys=True),
                         *[metrics.get(k, "") for k in keys]])
    write_atomically(run_dir / SCREEN_FILE, out.getvalue())
