"""The typed trial reader (records/trial.py) and the measurement summary record
(records/summary.py): what a trial stores reads back typed, and writes back as stored."""

from __future__ import annotations

import json

import optuna
import pytest

from autotune.common.interval import Interval
from autotune.records.summary import MeasurementSummary
from autotune.schema.config import DecodeConfig
from autotune.search.objectives import Constraint
from autotune.records.trial import BASELINE, TrialRecord

# A measured trial's user attributes as a study of this release stores them.
CONFIG = DecodeConfig(method="ngram", k=3).to_dict()
METRICS = {"model": "tiny", "prompts": 4, "speedup": 1.25, "speedup_ci90": [1.1, 1.4],
           "mean_accepted_tokens": 2.5, "lossless": True, "near_ties": 0,
           "speedup_by_category": {"code": 1.3}, "repeats": 1, "fidelity": "measure"}


def _trial(params: dict | None = None, **attrs: object) -> optuna.trial.FrozenTrial:
    distributions = {"k": optuna.distributions.IntDistribution(1, 8)} if params else {}
    return optuna.trial.create_trial(value=1.0, params=params or {},
                                     distributions=distributions, user_attrs=attrs)


def test_a_measured_trial_reads_typed() -> None:
    record = TrialRecord.of(_trial({"k": 3}, config=CONFIG, metrics=METRICS, preset="vllm",
                                   worker="host:1",
                                   screen={"rank": 2, "trial": 7,
                                           "predicted": {"speedup": 1.3, "replay_exact": True}}))
    assert record.config == DecodeConfig(method="ngram", k=3)
    assert record.method == "ngram" and record.speculates and not record.is_baseline
    assert record.metrics is not None and record.metrics.speedup == 1.25
    assert record.metrics.ci90 == Interval(1.1, 1.4)
    assert record.metrics.speedup_by_category == {"code": 1.3}
    assert record.fidelity == "measure" and record.preset == "vllm" and record.worker == "host:1"
    assert record.screen is not None and record.screen.rank == 2 and record.screen.trial == 7
    assert record.screen.predicted == {"speedup": 1.3, "replay_exact": True}
    assert (record.error, record.infeasible, record.retry_of, record.repeat_of) == (None,) * 4
    assert not record.interrupted and not record.unpruned
    # What it read writes back as stored, key for key.
    assert json.dumps(record.metrics.to_json()) == json.dumps(METRICS)


def test_trials_without_figures_or_from_older_studies() -> None:
    never_ran = TrialRecord.of(_trial(preset=BASELINE))
    assert never_ran.config is None and never_ran.metrics is None and never_ran.fidelity is None
    assert never_ran.is_baseline and never_ran.method == "none" and not never_ran.speculates
    # An older study's figures carry no `fidelity`: they were measured.
    older = TrialRecord.of(_trial(config=CONFIG, metrics={"speedup": 1.1}))
    assert older.fidelity == "measure" and older.metrics is not None
    assert older.metrics.ci90 is None
    # Malformed attributes (a hand-edited storage) are ignored, not a traceback.
    odd = TrialRecord.of(_trial(config="ngram", metrics=[1], screen={"rank": "x"},
                                retry_of="3", interrupted=1, error="interrupted: Ctrl-C"))
    assert (odd.config_json, odd.metrics, odd.screen, odd.retry_of) == (None, None, None, None)
    assert odd.interrupted and odd.error == "interrupted: Ctrl-C"
    # Figures of the wrong type (a speedup written as text) are ignored too: one bad
    # trial must not stop the run folder or the report with a pydantic traceback.
    typo = TrialRecord.of(_trial(config=CONFIG, metrics={"speedup": "1.2x"}))
    assert typo.metrics is None and typo.fidelity is None and typo.config is not None


def test_stored_metrics_keep_the_scalars_in_order() -> None:
    summary = MeasurementSummary.from_json({
        "config": CONFIG, "speedup": 1.2, "speedup_ci90": [1.0, 1.5], "prefill_ms": float("nan"),
        "pos_acc": list(range(80)), "lossless_tier": "near-tie (bfloat16)",
        "divergences": {"exact": 3, "near_tie": 1, "real": 0},
        "near_tie_baseline": {"exact": 4, "near_tie": 0, "real": 0},
        "by_category": {"chat": {"speedup": 1.1, "ci90": None, "prompts": 1}}})
    stored = summary.stored_json()
    assert list(stored) == ["speedup", "speedup_ci90", "prefill_ms", "pos_acc", "lossless_tier",
                            "near_ties", "real_divergences", "speedup_by_category"]
    assert stored["prefill_ms"] is None and len(stored["pos_acc"]) == 64
    assert (stored["near_ties"], stored["real_divergences"]) == (1, 0)
    assert stored["speedup_by_category"] == {"chat": 1.1}
    # The AR baseline's figures: speedup 1 by definition, its own kept apart, added last.
    baseline = summary.with_figures(self_speedup=summary.speedup, speedup=1.0, ci90=None)
    assert list(baseline.stored_json())[-1] == "self_speedup"
    assert baseline.stored_json()["speedup_ci90"] is None


def test_objectives_read_a_summary_or_its_json() -> None:
    lossless = Constraint("lossless", equals=True)
    greedy = DecodeConfig()
    replayed = MeasurementSummary.from_json({"lossless": None, "fidelity": "replay"})
    assert lossless.violation(replayed, greedy) is None
    assert lossless.violation({"lossless": False}, greedy) == "lossless is False, must be True"
    assert MeasurementSummary.from_json({"agreement": 0.5}).figure("agreement") == 0.5
    assert MeasurementSummary.from_json({"plugin_metric": 3}).figure("plugin_metric") == 3
    assert MeasurementSummary().figure("speedup") is None


@pytest.mark.parametrize("value", [[1.0], [1.0, "x"], [1.0, float("inf")], "1-2"])
def test_a_malformed_interval_reads_as_none(value: object) -> None:
    assert MeasurementSummary.from_json({"speedup_ci90": value}).ci90 is None
