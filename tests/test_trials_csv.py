"""`trials.csv`: a pruned trial's partial value has a column of its own, so no reader
takes it for a measurement of the config."""

from __future__ import annotations

import math

import optuna
import pandas as pd

from autotune.runs.folder import TRIALS_FILE, trials_frame, write_run_files
from autotune.search.objectives import load_objective


def _study() -> optuna.Study:
    """Trial 0 completes (5.0); trial 1 reports 7.0 and 6.5 after two prompts and is
    pruned; trial 2 is pruned before it measured anything (an infeasible point)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="minimize")

    def objective(trial: optuna.Trial) -> float:
        if trial.number == 0:
            return 5.0
        if trial.number == 1:
            trial.report(7.0, 0)
            trial.report(6.5, 1)
        raise optuna.TrialPruned()

    study.optimize(objective, n_trials=3)
    return study


def test_a_pruned_trials_partial_value_is_not_a_value(tmp_path):
    study = _study()
    # What Optuna keeps: the pruned trial's value is its last intermediate one.
    assert study.trials[1].values == [6.5]
    objective = load_objective("latency")
    frame = trials_frame(study, objective).set_index("number")
    value, partial = "value.latency_ms_per_token", "partial.latency_ms_per_token"
    assert list(frame["state"]) == ["COMPLETE", "PRUNED", "PRUNED"]
    assert frame.loc[0, value] == 5.0 and math.isnan(frame.loc[0, partial])
    assert math.isnan(frame.loc[1, value]) and frame.loc[1, partial] == 6.5
    assert frame.loc[1, "partial.prompts_measured"] == 2
    assert math.isnan(frame.loc[2, value]) and math.isnan(frame.loc[2, partial])
    # The same in the file a user opens.
    write_run_files(tmp_path, study, objective)
    csv = pd.read_csv(tmp_path / TRIALS_FILE).set_index("number")
    assert csv[value].dropna().to_dict() == {0: 5.0}
    assert csv[partial].dropna().to_dict() == {1: 6.5}


def test_no_partial_columns_without_a_pruned_measurement():
    study = optuna.create_study(direction="minimize")
    study.optimize(lambda trial: 1.0, n_trials=2)
    frame = trials_frame(study, load_objective("latency"))
    assert not [c for c in frame.columns if c.startswith("partial.")]
    assert list(frame["value.latency_ms_per_token"]) == [1.0, 1.0]
