"""Autotune's own finalists from its replay screen, where its measured trials could not
run enough of them (issue 59).

The race, not the measured study, decides the answer: it measures every finalist on
held-out prompts against AR timed beside it. Measured trials pick finalists better than
the screen's predictions do, but on a slow machine under a time budget they may not run
at all (at 83 ms/token the trials' share held the AR baseline alone, and autotune's own
group had no finalist while every engine's group raced its screen's picks). So, as the
engines' groups always do, autotune's own group takes the screen's best distinct configs
that no measured trial holds, up to the two a decision needs.

Each is copied into the measured study as a complete trial (Optuna's public
`create_trial` / `add_trial`) carrying the screen's config and its replay figures,
marked `screen_finalist` and with its screen rank (`ScreenNote`): so the race's winner
is a trial of the study as any other, best.json, the report and the exports read it as
they read a measured one, and the trials table says where its figures came from (its
metrics' fidelity is `replay`: predicted, never measured in the search). A copy does
not count toward `--trials` (`study.counted_trials`), and a rerun that measures the
same config ranks the measured trial in its place (`finalists.pick_finalists`).
"""

from __future__ import annotations

import json

import optuna
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune.records import ranking
from autotune.search.finalists import Finalist, finalist_of
from autotune.search.screening import PREDICTED_KEYS, distinct_trials
from autotune.records.trial import (BASELINE_ATTR, CONFIG_ATTR, METRICS_ATTR,
                                          SCREEN_ATTR, SCREEN_FINALIST_ATTR, ScreenNote,
                                          TrialRecord)
from autotune.records.summary import MeasurementSummary

__all__ = ["screen_finalists", "screen_ranked_finalists"]


def _key(record: TrialRecord) -> str:
    return json.dumps(record.config_json, sort_keys=True, default=str)


def screen_finalists(study: optuna.Study, screen: optuna.Study,
                     objective: ranking.Directions, need: int) -> list[Finalist]:
    """Up to `need` of `screen`'s best distinct speculative configs that no complete
    trial of `study` holds, each as a complete trial of `study` (an earlier run's copy
    reused), as finalists "screen #k" in the screen's rank order."""
    return _screen_picks(study, screen, objective, need, measured_too=False)


def screen_ranked_finalists(study: optuna.Study, screen: optuna.Study,
                            objective: ranking.Directions, n: int) -> list[Finalist]:
    """The screen's best `n` distinct speculative configs as finalists "screen #k", in its
    rank order: where the screen priced them at the --target engine's own costs and the
    measured trials timed them in autotune's decoder (issue 60: vLLM's prices and ours
    ranked its configs in opposite orders, ρ -0.88), the race in the engine decides
    among the screen's picks. A config a measured trial holds is that trial; the others
    are copies (as `screen_finalists`)."""
    return _screen_picks(study, screen, objective, n, measured_too=True)


def _screen_picks(study: optuna.Study, screen: optuna.Study, objective: ranking.Directions,
                  n: int, measured_too: bool) -> list[Finalist]:
    """Up to `n` of `screen`'s best distinct speculative configs, in its rank order, each
    as a trial of `study`: the measured trial holding it (`measured_too`; else configs
    a measured trial holds, or decodes like, are passed over), else a copy (an earlier
    run's reused)."""
    if n <= 0:
        return []
    held = [TrialRecord.of(t) for t in ranking.complete(study)]
    held = [r for r in held if r.speculates]
    copies = {_key(r): r.trial for r in held if r.from_screen}
    measured = {_key(r): r.trial for r in held if not r.from_screen}
    order = [t for t in ranking.ranked(screen, objective)
             if TrialRecord.of(t).speculates and t.state == TrialState.COMPLETE]
    taken = () if measured_too else list(measured.values())
    chosen: list[Finalist] = []
    for rank, trial in enumerate(distinct_trials(order, taken=taken), start=1):
        if len(chosen) >= n:
            break
        key = _key(TrialRecord.of(trial))
        kept = measured.get(key) or copies.get(key) or _copy(study, trial, rank)
        copies[key] = kept
        chosen.append(finalist_of(kept, f"screen #{rank}"))
    return chosen


def _copy(study: optuna.Study, trial: FrozenTrial, rank: int) -> FrozenTrial:
    """`trial` of the screen added to `study` as a complete trial marked as the
    screen's; returns it as `study` numbered it."""
    record = TrialRecord.of(trial)
    metrics = record.metrics or MeasurementSummary()
    note = ScreenNote(rank=rank, trial=trial.number,
                      predicted={k: metrics.figure(k) for k in PREDICTED_KEYS})
    # Its config, figures and documented default's name; not the screen's bookkeeping.
    attrs = {key: trial.user_attrs[key] for key in (CONFIG_ATTR, METRICS_ATTR, BASELINE_ATTR)
             if key in trial.user_attrs}
    attrs.update({SCREEN_ATTR: note.to_json(), SCREEN_FINALIST_ATTR: True})
    study.add_trial(create_trial(state=TrialState.COMPLETE, params=dict(trial.params),
                                 distributions=dict(trial.distributions),
                                 values=list(trial.values), user_attrs=attrs))
    key = _key(record)
    return next(t for t in reversed(ranking.complete(study))
                if TrialRecord.of(t).from_screen and _key(TrialRecord.of(t)) == key)
