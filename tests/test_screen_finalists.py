"""Autotune's own finalists from its replay screen where its measured trials gave too few
(`search.screen_finalists`, issue 59): synthetic studies, no model."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from autotune.search.finalists import pick_finalists
from autotune.search.objectives import load_objective
from autotune.search.samplers import BASELINE, BASELINE_ATTR
from autotune.search.screen_finalists import screen_finalists
from autotune.search.study import counted_trials
from autotune.records.trial import TrialRecord

SPEEDUP = load_objective("speedup")
NAMES = ["baseline", "k2", "k3", "k4", "k5"]


def _add(study: optuna.Study, name: str, config: dict[str, Any], speedup: float,
         fidelity: str | None = None) -> None:
    attrs: dict[str, Any] = {"config": config, "metrics": {
        "speedup": speedup, **({"fidelity": fidelity} if fidelity else {})}}
    if name == "baseline":
        attrs[BASELINE_ATTR] = BASELINE
    study.add_trial(create_trial(params={"name": name},
                                 distributions={"name": CategoricalDistribution(NAMES)},
                                 value=speedup, user_attrs=attrs))


def _studies() -> tuple[optuna.Study, optuna.Study]:
    storage = optuna.storages.InMemoryStorage()
    screen = optuna.create_study(study_name="s.screen", storage=storage, direction="maximize")
    _add(screen, "baseline", {"method": "none"}, 1.0, "replay")
    for k, speedup in ((2, 1.05), (3, 1.20), (4, 1.15), (5, 0.90)):
        _add(screen, f"k{k}", {"method": "ngram", "k": k}, speedup, "replay")
    measured = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    _add(measured, "baseline", {"method": "none"}, 1.0)        # the trials' share held AR
    return measured, screen


def test_a_study_with_the_ar_baseline_alone_races_the_screen_best_two():
    measured, screen = _studies()
    assert pick_finalists(measured, SPEEDUP, 2) == []           # what stopped the answer
    taken = screen_finalists(measured, screen, SPEEDUP, 2)
    assert [f.params["k"] for f in taken] == [3, 4]
    assert [f.role for f in taken] == ["screen #1", "screen #2"]
    # Each is a trial of the measured study, marked as the screen's, its figures replay's,
    # and it does not count toward --trials.
    copies = [TrialRecord.of(measured.trials[f.trial]) for f in taken]
    assert all(r.from_screen and r.fidelity == "replay" for r in copies)
    assert [r.screen.rank for r in copies if r.screen] == [1, 2]
    assert len(counted_trials(measured.trials)) == 1
    # A rerun reuses the copies; a config a trial measured since is not taken again.
    assert [f.trial for f in screen_finalists(measured, screen, SPEEDUP, 2)] == [
        f.trial for f in taken]
    assert len(measured.trials) == 3


def test_measured_trials_come_first_and_a_measured_config_supersedes_its_copy():
    measured, screen = _studies()
    screen_finalists(measured, screen, SPEEDUP, 2)               # k3, k4 copied
    _add(measured, "k4", {"method": "ngram", "k": 4}, 1.02)     # k4 measured since
    chosen = pick_finalists(measured, SPEEDUP, 2)
    # The measured k4 first (though the copy of k3 predicts more), then the copy of k3.
    assert [(f.params["k"], TrialRecord.of(measured.trials[f.trial]).from_screen)
            for f in chosen] == [(4, False), (3, True)]
    # With a measured config beside it, the screen gives the next distinct one.
    again = screen_finalists(measured, screen, SPEEDUP, 1)
    assert [f.params["k"] for f in again] == [3]


def test_a_screen_ranked_at_the_target_engines_prices_gives_the_finalists_over_measured():
    """`--target ENGINE` priced at the engine's own costs (issue 60): the race's finalists
    are the screen's best in its order, whatever autotune's decoder measured. A config a
    trial measured is that trial, not a copy; the documented default follows."""
    from autotune.search.finalists import default_finalist
    from autotune.search.screen_finalists import screen_ranked_finalists

    measured, screen = _studies()
    # The decoder timed k5 (the screen's last) fastest, and the screen's first, k3, slow.
    _add(measured, "k5", {"method": "ngram", "k": 5}, 1.30)
    _add(measured, "k3", {"method": "ngram", "k": 3}, 0.95)
    assert [f.params["k"] for f in pick_finalists(measured, SPEEDUP, 2)] == [5, 3]
    chosen = screen_ranked_finalists(measured, screen, SPEEDUP, 2)
    assert [f.params["k"] for f in chosen] == [3, 4]
    assert [f.role for f in chosen] == ["screen #1", "screen #2"]
    records = [TrialRecord.of(measured.trials[f.trial]) for f in chosen]
    assert [r.from_screen for r in records] == [False, True]    # k3 measured, k4 a copy
    # A rerun takes the same trials and copies nothing more.
    count = len(measured.trials)
    assert [f.trial for f in screen_ranked_finalists(measured, screen, SPEEDUP, 2)] == [
        f.trial for f in chosen]
    assert len(measured.trials) == count
    # No documented default measured: none added.
    assert default_finalist(measured, SPEEDUP, chosen) == []
