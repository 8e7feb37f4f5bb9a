"""The predicted-vs-measured panel on hand-built studies: screened-then-measured trials of a
multi-fidelity search, validated finalists of a replay search, the empty case, and the
rendered section (no model, no timing)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from test_report_data import add, baseline, config
from test_report_render import parse
from test_report_validation import validated

from autotune.schema.label import describe
from autotune.report import collect, render_report
from autotune.report import panels as P
from autotune.report.objective import ObjectiveInfo
from autotune.report.style import method_color
from autotune.search.finalists import VALIDATION_ATTR, Finalist, judge
from autotune.records.validation import FinalistEntry

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPEEDUP = ObjectiveInfo("speedup", ("speedup",), ("maximize",))


def prediction(speedup: float | None, latency: float | None, exact: bool = True) -> dict[str, Any]:
    """A `screen` attribute as `screening.screened_queue` writes it."""
    return {"rank": 1, "trial": 7, "predicted": {"speedup": speedup, "latency_ms_per_token": latency,
                                                 "mean_accepted_tokens": 2.0,
                                                 "replay_exact": exact}}


def measured(study: optuna.Study, cfg: dict[str, Any], speedup: float, latency: float,
             screen: dict[str, Any] | None, state: TrialState = TrialState.COMPLETE) -> None:
    attrs = {"screen": screen} if screen is not None else {}
    add(study, speedup, cfg, {"speedup": speedup, "latency_ms_per_token": latency,
                              "mean_accepted_tokens": 1.9, "fidelity": "measure"},
        state=state, **attrs)


def screened_study() -> optuna.Study:
    """Trial 0 the AR baseline (no prediction); 1-4 screened and measured; 5 screened but
    its prediction has no speedup; 6 screened and pruned."""
    study = optuna.create_study(directions=["maximize"])
    baseline(study)
    # predicted speedup / measured speedup / predicted ms / measured ms
    measured(study, config("ngram", k=3), 1.3, 12.5, prediction(1.5, 10.0))
    measured(study, config("ngram", k=4), 1.4, 16.0, prediction(1.2, 16.0, exact=False))
    measured(study, config("layer_skip", attn_skip=[2]), 1.6, 10.0, prediction(2.0, 8.0))
    measured(study, config("ngram", k=2), 0.9, 16.0, prediction(1.1, 20.0))
    measured(study, config("ngram", k=5), 1.0, 20.0, prediction(None, 18.0))
    measured(study, config("ngram", k=6), 1.0, 20.0, prediction(1.3, 15.0), state=TrialState.PRUNED)
    return study


def test_screened_then_measured_points_and_statistics() -> None:
    pred = P.predicted.data(screened_study(), SPEEDUP)
    frame = pred.frame
    assert frame["number"].tolist() == [1, 2, 3, 4]
    assert set(frame["source"]) == {P.predicted.SCREENED}
    assert frame["method"].tolist() == ["ngram", "ngram", "layer_skip", "ngram"]
    assert frame["label"].tolist()[0] == describe(config("ngram", k=3))
    assert frame["predicted_speedup"].tolist() == [1.5, 1.2, 2.0, 1.1]
    assert frame["measured_speedup"].tolist() == [1.3, 1.4, 1.6, 0.9]
    assert frame["predicted_latency_ms_per_token"].tolist() == [10.0, 16.0, 8.0, 20.0]
    assert frame["measured_latency_ms_per_token"].tolist() == [12.5, 16.0, 10.0, 16.0]
    assert frame["replay_exact"].tolist() == [True, False, True, True]
    assert pred.count == 4 and pred.note is None
    # Ranks: predicted 3 2 4 1, measured 2 3 4 1: Σd² = 2, ρ = 1 - 6·2 / (4·(16 - 1)) = 0.8.
    assert pred.spearman == pytest.approx(0.8)
    # |pred - meas| / meas: 2.5/12.5, 0/16, 2/10, 4/16 = 0.2, 0, 0.2, 0.25: median 0.2.
    assert pred.median_latency_error == pytest.approx(0.2)


def test_spearman_matches_pandas_and_handles_ties() -> None:
    study = optuna.create_study(directions=["maximize"])
    for pred, meas in ((1.1, 1.0), (1.1, 1.2), (1.4, 1.1), (1.6, 1.3), (1.2, 1.3)):
        measured(study, config("ngram", k=2), meas, 20.0 / meas, prediction(pred, 20.0 / pred))
    frame = P.predicted.data(study, SPEEDUP).frame
    expected = frame["predicted_speedup"].corr(frame["measured_speedup"], method="spearman")
    assert P.predicted.spearman(frame) == pytest.approx(expected)


def test_one_point_has_no_statistics() -> None:
    study = optuna.create_study(directions=["maximize"])
    measured(study, config("ngram", k=3), 1.3, 12.5, prediction(1.5, 10.0))
    pred = P.predicted.data(study, SPEEDUP)
    assert pred.count == 1 and pred.spearman is None and pred.median_latency_error is None
    assert "One point" in pred.note
    assert "fig-predicted" in P.predicted.render(pred)


# ------------------------------------------------------------------ replay fidelity
def replay_study(stale: bool = False) -> optuna.Study:
    """A `--fidelity replay` study: trial 0 the AR baseline, 1-3 predicted ngram trials;
    finalists 1 and 2 re-measured on held-out prompts (3 is not a finalist)."""
    study = optuna.create_study(directions=["maximize"])
    study.set_user_attr("fidelity", "replay")
    add(study, 1.0, config(), {"speedup": 1.0, "latency_ms_per_token": 30.0,
                               "fidelity": "replay"}, preset="baseline")
    for k, speedup, latency in ((3, 1.5, 20.0), (4, 1.3, 22.0), (2, 1.1, 27.0)):
        add(study, speedup, config("ngram", k=k),
            {"speedup": speedup, "latency_ms_per_token": latency, "mean_accepted_tokens": 2.0,
             "fidelity": "replay", "replay_exact": True, "replay_notes": []})
    finalists = []
    for number, speedup, latency in ((1, 1.2, 25.0), (2, 1.25, 24.0)):
        t = study.trials[number]
        cfg, metrics = t.user_attrs["config"], t.user_attrs["metrics"]
        f = Finalist(trial=number, label=describe(cfg), role=f"search #{number}", preset=None,
                     params=cfg, search={k: metrics.get(k) for k in
                                         ("speedup", "latency_ms_per_token", "mean_accepted_tokens")})
        # As `validation.measure_finalists` stores one: the finalist, then its figures.
        finalists.append({**asdict(f), "speedup": speedup, "latency_ms_per_token": latency,
                          "baseline_latency_ms_per_token": 30.0, "mean_accepted_tokens": 1.9,
                          "acceptance_rate": 0.5, "lossless": True, "mismatched_prompts": [],
                          "by_category": {}, "ci90": [speedup - 0.05, speedup + 0.05]})
    decision, winner, reason = judge([FinalistEntry.from_json(f) for f in finalists])
    complete = len(study.get_trials(states=(TrialState.COMPLETE,)))
    study.set_user_attr(VALIDATION_ATTR, {
        "statistic": "AR / candidate", "level": 0.9, "source": "held out", "prompts": 6,
        "prompt_ids": [f"p{i}" for i in range(6)], "categories": {"code": 6},
        "workload_sha256": "0" * 64, "repeats": 1, "max_new_tokens": 32,
        "complete_trials": complete + (1 if stale else 0), "created": "2025-01-01T00:00:00+00:00",
        "finalists": finalists, "baseline": {"latency_ms_per_token": 30.0},
        "decision": decision, "winner": winner, "reason": reason})
    return study


def test_replay_study_finalists_against_their_held_out_measurement() -> None:
    pred = P.predicted.data(replay_study(), SPEEDUP)
    frame = pred.frame
    assert frame["number"].tolist() == [1, 2]
    assert set(frame["source"]) == {P.predicted.VALIDATED}
    assert frame["predicted_speedup"].tolist() == [1.5, 1.3]          # the trials' own metrics
    assert frame["measured_speedup"].tolist() == [1.2, 1.25]          # the record's figures
    assert frame["predicted_latency_ms_per_token"].tolist() == [20.0, 22.0]
    assert frame["measured_latency_ms_per_token"].tolist() == [25.0, 24.0]
    assert pred.spearman == pytest.approx(-1.0)                       # order reversed
    assert pred.median_latency_error == pytest.approx((5 / 25 + 2 / 24) / 2)


def test_replay_study_without_a_current_record_says_why() -> None:
    pred = P.predicted.data(replay_study(stale=True), SPEEDUP)
    assert pred.frame.empty and pred.count == 0 and pred.spearman is None
    assert "--fidelity replay" in pred.note


# ------------------------------------------------------------------ nothing predicted
def test_measured_run_has_no_points_even_when_validated() -> None:
    # Finalists of a measured study compare measurement with measurement: not a prediction.
    pred = P.predicted.data(validated(), SPEEDUP)
    assert pred.frame.empty and pred.spearman is None and pred.median_latency_error is None
    assert pred.note == ("No replay predictions in this run (searched with --fidelity measure, "
                         "or before the replay tier): every figure is measured.")
    html = P.predicted.render(pred)
    assert 'class="note"' in html and "No replay predictions" in html
    assert "plotly-graph-div" not in html


def test_screened_trials_not_yet_measured_say_so() -> None:
    study = optuna.create_study(directions=["maximize"])
    measured(study, config("ngram", k=6), 1.0, 20.0, prediction(1.3, 15.0), state=TrialState.PRUNED)
    assert "No screened config" in P.predicted.data(study, SPEEDUP).note


# ------------------------------------------------------------------ drawing
def test_render_draws_the_scatter_with_the_statistics() -> None:
    pred = P.predicted.data(screened_study(), SPEEDUP)
    html = P.predicted.render(pred)
    sections = parse(html)
    assert sections.sections == ["panel-predicted"]
    assert sections.figures == {"panel-predicted": 1}
    assert "panel-predicted" not in sections.notes
    assert "Spearman ρ = 0.80" in html and "median latency error 20.0%" in html
    assert "4 points (4 screened then measured)" in html
    assert "replay tier" in html
    for method in ("ngram", "layer_skip"):
        assert method_color(method) in html                   # the registry's colours
    assert '"name":"y = x"' in html and '"dash":"dash"' in html
    assert "AR (1×)" in html or "AR (1\\u00d7)" in html     # the line at measured 1.0
    assert describe(config("ngram", k=3)) in html          # hover: the label


def test_panel_is_on_the_page_in_leviathans_place() -> None:
    study = screened_study()
    data = collect(study, {"study": "s", "objective": "speedup"}, None)
    assert data.predicted.count == 4
    ids = list(P.PANEL_IDS)
    assert "leviathan" not in ids and ids.index("predicted") == ids.index("pareto") - 1
    sections = parse(render_report(data))
    assert sections.figures.get("panel-predicted") == 1
