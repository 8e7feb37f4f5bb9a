"""The report's per-engine panel (`--target all` runs) and readable intervals: each
engine's answer side by side, whiskers past the readable range clipped and marked, and no
panel for a run without per-engine answers (hand-built studies, no model)."""

from __future__ import annotations

import copy

import optuna
import pytest
from test_report_validation import validated

from autotune.report import panels as P
from autotune.report.schedule import read_schedule
from autotune.report.whiskers import MIN_PAD, clip, readable_range
from autotune.search.finalists import DO_NOT_SPECULATE, SPECULATE, VALIDATION_ATTR

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _entry(trial: int, label: str, speedup: float, ci: list[float], engine: str) -> dict:
    return {"trial": trial, "label": label, "role": f"{engine} #1", "preset": None,
            "params": {"method": "ngram", "engine": engine}, "search": {}, "engine": engine,
            "speedup": speedup, "ci90": ci, "mean_accepted_tokens": 1.5, "lossless": True}


def with_engines() -> optuna.Study:
    """A validated study whose record answers for vllm (speculate, an interval reaching
    far above the rest) and sglang (do not speculate)."""
    study = validated()
    record = copy.deepcopy(study.user_attrs[VALIDATION_ATTR])
    record["engine_finalists"] = {
        "sglang": [_entry(3, "sglang_ngram k=4", 0.7, [0.6, 0.8], "sglang")],
        "vllm": [_entry(7, "ngram k=5 n=5..5", 1.09, [1.02, 9.0], "vllm")]}
    record["engines"] = {
        "sglang": {"decision": DO_NOT_SPECULATE, "winner": None, "reason": "no gain"},
        "vllm": {"decision": SPECULATE, "winner": 7, "reason": "above 1"}}
    study.set_user_attr(VALIDATION_ATTR, record)
    return study


def test_the_panel_shows_every_engines_answer_with_its_verdict():
    answers = P.engines.data(with_engines())
    assert answers is not None
    assert [a.engine for a in answers] == [P.engines.OWN_LABEL, "sglang", "vllm"]
    own, sglang, vllm = answers
    assert own.decision == SPECULATE and own.speedup == 1.12 and own.config == "ngram k=5 n=5..5"
    # Not speculating: the figure is its best finalist's, named as such.
    assert (sglang.decision, sglang.config, sglang.speedup) == (DO_NOT_SPECULATE,
                                                                "sglang_ngram k=4", 0.7)
    assert vllm.decision == SPECULATE and vllm.interval.high == 9.0
    fig = P.engines._figure(answers)
    points = {t.name: t for t in fig.data if t.name in ("speculate", "do not speculate")}
    assert list(points["speculate"].x) == [P.engines.OWN_LABEL, "vllm"]
    assert list(points["do not speculate"].x) == ["sglang"]
    assert list(points["do not speculate"].y) == [0.7]
    # Greyed, hollow, with its verdict written beside it.
    grey = points["do not speculate"]
    assert grey.marker.color == "#888888" and grey.marker.symbol.endswith("-open")
    assert list(grey.text) == ["do not speculate"] and "sglang_ngram k=4" in grey.hovertext[0]
    assert points["speculate"].marker.color != grey.marker.color
    page = P.engines.render(answers)
    assert 'id="panel-engines"' in page and "do not speculate" in page
    assert "sglang_ngram k=4" in page and "[1.020, 9.000]" in page


def test_a_run_without_engine_answers_has_no_engine_panel():
    assert P.engines.data(validated()) is None
    assert "engines" not in P.PANEL_IDS and "engines" in P.OPTIONAL_PANEL_IDS


def test_a_wide_whisker_is_clipped_at_the_readable_range_and_marked():
    answers = P.engines.data(with_engines())
    fig = P.engines._figure(answers)
    low, high = fig.layout.yaxis.range
    # The range is the point estimates' (0.7 .. 1.12, and 1.0), not the 9.0 whisker's.
    assert (low, high) == readable_range([0.7, 1.12, 1.09])
    assert high < 2.0
    speculate = next(t for t in fig.data if t.name == "speculate")
    tops = [s + up for s, up in zip(speculate.y, speculate.error_y.array)]
    assert max(tops) <= high + 1e-9
    marks = [t for t in fig.data if t.marker.symbol == "triangle-up"]
    assert len(marks) == 1 and marks[0].y[0] == high
    assert "interval clipped: [1.020, 9.000]" in marks[0].text[0]


def test_the_finalists_chart_clips_a_few_prompts_category_interval_too():
    study = validated()
    record = copy.deepcopy(study.user_attrs[VALIDATION_ATTR])
    record["finalists"][0]["by_category"]["code"]["ci90"] = [0.01, 1000.0]
    study.set_user_attr(VALIDATION_ATTR, record)
    f = P.finalists.data(study)
    fig = P.finalists._figure(f.frame)
    low, high = fig.layout.yaxis.range
    assert high < 3.0 and low >= 0.0
    assert any(t.marker.symbol == "triangle-up" for t in fig.data)
    assert any(t.marker.symbol == "triangle-down" for t in fig.data)


def test_clipping_rules():
    assert readable_range([1.0]) == (1.0 - MIN_PAD, 1.0 + MIN_PAD)
    assert readable_range([0.5, 1.5, None, float("nan")]) == (0.0, 2.0)
    w = clip([1.1, 1.0, None], [1.0, 0.2, None], [1.2, 5.0, None], (0.85, 1.3))
    assert w.up[0] == pytest.approx(0.1) and w.clipped_high == [None, 1.3, None]
    assert w.clipped_low == [None, 0.85, None] and w.up[2] is None and w.any_clipped
    assert not clip([1.1], [1.0], [1.2], (0.85, 1.3)).any_clipped


def test_the_batch_size_chart_clips_a_held_out_interval_too():
    from test_report_schedule import schedule_doc

    doc = schedule_doc()
    held = next(p for p in doc["points"] if p["split"] == "held_out" and p["batch_size"] == 2)
    held["ci90"] = [0.05, 40.0]
    fig = P.batch_size.figure_of(P.batch_size.data(read_schedule({"schedule": doc})))
    low, high = fig.layout.yaxis.range
    assert high < 2.0 and low > 0.05                  # the points' range, not the interval's
    points = next(t for t in fig.data if t.name == P.batch_size.HELD_OUT_TRACE)
    assert points.y[1] + points.error_y.array[1] == pytest.approx(high)
    assert points.y[1] - points.error_y.arrayminus[1] == pytest.approx(low)
    marks = {t.marker.symbol: t for t in fig.data if t.name == "interval clipped"}
    assert set(marks) == {"triangle-up", "triangle-down"}
    assert list(marks["triangle-up"].x) == [2] and marks["triangle-up"].y[0] == high
    assert "interval clipped: [0.050, 40.000]" in marks["triangle-down"].text[0]
