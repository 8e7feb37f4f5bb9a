"""The report shows the validated answer: the header's headline for each outcome
(speculate / do not speculate / not validated or stale), the finalists panel's data, the
top-trials table's marks, and the page with the panel (hand-built studies, no model)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend
from test_report_data import add, config
from test_report_render import STUDY, check_page, make_run

from autotune.schema.label import describe
from autotune.report import build_report, render_report, write_report
from autotune.report import panels as P
from autotune.common.interval import Interval
from autotune.report.documents import RunFacts
from autotune.report.objective import ObjectiveInfo
from autotune.report.trials import best_speculative
from autotune.search.finalists import DO_NOT_SPECULATE, SPECULATE, UNDECIDED, VALIDATION_ATTR

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPEEDUP = ObjectiveInfo("speedup", ("speedup",), ("maximize",))
SEARCH_PROMPTS = 8


def speculative(study: optuna.Study, speedup: float, k: int, preset: str | None = None,
                ngram_max: int = 3) -> None:
    """A complete ngram trial as a paired-speedup search records it."""
    add(study, speedup, config("ngram", k=k, ngram_min=ngram_max, ngram_max=ngram_max),
        {"speedup": speedup, "latency_ms_per_token": 30.0 / speedup,
         "baseline_latency_ms_per_token": 30.0, "mean_accepted_tokens": 1.8,
         "prompts": SEARCH_PROMPTS, "lossless": True}, preset=preset)


def searched(with_baseline: bool = True) -> optuna.Study:
    """Trial 0 the AR baseline (or a failed trial), 1-3 the search's best three, 4 vLLM's
    default n-gram (ranked last of the speculative ones)."""
    study = optuna.create_study(directions=["maximize"])
    if with_baseline:
        add(study, 1.0, config(), {"speedup": 1.0, "latency_ms_per_token": 30.0,
                                   "baseline_latency_ms_per_token": 30.0,
                                   "prompts": SEARCH_PROMPTS}, preset="baseline")
    else:
        add(study, None, config("ngram", k=9), state=optuna.trial.TrialState.FAIL,
            error="out of memory")
    speculative(study, 1.28, k=3)
    speculative(study, 1.25, k=4)
    speculative(study, 1.10, k=2)
    speculative(study, 1.05, k=5, preset="vllm_ngram", ngram_max=5)
    return study


def finalist(study: optuna.Study, trial: int, role: str, speedup: float,
             ci: list[float] | None, categories: dict[str, Any]) -> dict[str, Any]:
    t = study.trials[trial]
    return {"trial": trial, "label": describe(t.user_attrs["config"]), "role": role,
            "preset": t.user_attrs.get("preset"), "params": t.user_attrs["config"],
            "search": {"speedup": t.user_attrs["metrics"]["speedup"],
                       "latency_ms_per_token": t.user_attrs["metrics"]["latency_ms_per_token"],
                       "mean_accepted_tokens": 1.8},
            "speedup": speedup, "ci90": ci, "latency_ms_per_token": 30.0 / speedup,
            "baseline_latency_ms_per_token": 30.0, "mean_accepted_tokens": 2.0,
            "acceptance_rate": 0.5, "lossless": True, "mismatched_prompts": [],
            "by_category": categories}


def record(study: optuna.Study, speculate: bool) -> dict[str, Any]:
    """A validation record of finalists 1, 2 and the default 4 on 12 held-out prompts.
    speculate: the default (trial 4, not the search's best) wins on validation; else every
    interval holds 1.0."""
    if speculate:
        figures = {1: (1.10, [1.05, 1.15]), 2: (1.04, [0.98, 1.09]), 4: (1.12, [1.06, 1.18])}
    else:
        figures = {1: (1.02, [0.97, 1.06]), 2: (0.99, [0.94, 1.03]), 4: (1.01, [0.96, 1.05])}
    roles = {1: "search #1", 2: "search #2", 4: "default vllm_ngram"}
    finalists = [finalist(study, n, roles[n], *figures[n],
                          {"code": {"speedup": figures[n][0] + 0.2, "ci90": [1.2, 1.4],
                                    "mean_accepted_tokens": 2.1, "prompts": 11},
                           "rewriting": {"speedup": 0.9, "ci90": None,
                                         "mean_accepted_tokens": 1.1, "prompts": 1}})
                 for n in (1, 2, 4)]
    return {"statistic": "AR / candidate decode time per generated token", "level": 0.9,
            "source": "40% of builtin held out (seed 0)", "prompts": 12,
            "prompt_ids": [f"p{i}" for i in range(12)], "categories": {"code": 11, "rewriting": 1},
            "workload_sha256": "0" * 64, "repeats": 2, "max_new_tokens": 64,
            "complete_trials": len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))),
            "created": "2025-01-01T00:00:00+00:00", "baseline": {"latency_ms_per_token": 30.0},
            "finalists": finalists, "decision": SPECULATE if speculate else DO_NOT_SPECULATE,
            "winner": 4 if speculate else None,
            "reason": ("trial 4 (ngram k=5) 1.120x [1.060, 1.180]: the highest validated speedup"
                       if speculate else "no finalist's 90% interval lies above 1.0 (best trial 1 "
                       "(ngram k=3) 1.020x [0.970, 1.060])")}


def validated(speculate: bool = True, with_baseline: bool = True) -> optuna.Study:
    study = searched(with_baseline)
    study.set_user_attr(VALIDATION_ATTR, record(study, speculate))
    return study


# ------------------------------------------------------------------ header
def test_header_of_a_validated_run_states_the_validated_figure_beside_the_search() -> None:
    head = P.header.data(validated(), SPEEDUP, RunFacts(prompts=20))
    assert head.verdict is not None
    assert head.verdict.headline == ("Validated: 1.12× [1.06, 1.18] (90% interval) on 12 "
                                     "held-out prompts × 2 repeats (search: 1.05× on 8 prompts)")
    # The recommendation is the validated winner, not the search's best (trial 1).
    assert head.best_trial == 4 and head.best_preset == "vllm_ngram"
    assert head.speedup == 1.12 and head.latency_ms_per_token == pytest.approx(30.0 / 1.12)
    assert head.validation["status"] == "current" and head.validation["decision"] == "speculate"
    page = P.header.render(head)
    assert "<b>1.12× [1.06, 1.18]</b>" in page
    assert "Recommended config: <b>ngram k=5 n=5..5</b>" in page
    assert "finalist default vllm_ngram" in page


def test_header_says_do_not_speculate_with_the_finalists_as_evidence() -> None:
    head = P.header.data(validated(speculate=False), SPEEDUP)
    assert head.verdict is not None
    assert head.verdict.headline.startswith("Do not speculate: no finalist's 90% interval")
    assert head.best_trial == 0 and head.best_label == "baseline (AR)"
    assert head.best_params == {"method": "none"} and head.speedup == 1.0
    assert head.baseline_ms_per_token == 30.0 and head.note is None
    assert head.verdict.evidence[0] == ("Finalists on 12 held-out prompts × 2 repeats "
                                        "(90% intervals):")
    assert head.verdict.evidence[1:] == [
        "search #1: trial #1 ngram k=3 n=3..3: 1.02× [0.97, 1.06] (search 1.28×)",
        "search #2: trial #2 ngram k=4 n=3..3: 0.99× [0.94, 1.03] (search 1.25×)",
        "default vllm_ngram: trial #4 ngram k=5 n=5..5: 1.01× [0.96, 1.05] (search 1.05×)"]
    page = P.header.render(head)
    assert "<b>Do not speculate</b>: no finalist" in page
    assert page.count("<li>") == 3 and "Recommended config: <b>baseline (AR)</b>" in page
    assert "<p class=\"headline\">AR baseline 30.00 ms/token</p>" in page


def test_header_says_undecided_and_recommends_the_baseline() -> None:
    study = searched(True)
    undecided = {**record(study, speculate=False), "decision": UNDECIDED, "min_gain": 0.05,
                 "reason": "likely trial 1 (ngram k=3) 1.020x [0.970, 1.060], not shown"}
    study.set_user_attr(VALIDATION_ATTR, undecided)
    head = P.header.data(study, SPEEDUP)
    assert head.verdict is not None and head.verdict.status == "undecided"
    assert head.verdict.headline == ("Undecided: likely trial 1 (ngram k=3) 1.020x "
                                     "[0.970, 1.060], not shown")
    assert head.best_trial == 0 and head.best_label == "baseline (AR)" and head.speedup == 1.0
    page = P.header.render(head)
    assert "<b>Undecided</b>: likely trial 1" in page
    assert "Recommended config: <b>baseline (AR)</b>" in page


def test_do_not_speculate_without_a_baseline_trial_still_recommends_the_baseline() -> None:
    head = P.header.data(validated(speculate=False, with_baseline=False), SPEEDUP)
    assert head.best_trial is None and head.best_label == "baseline (AR)"
    assert head.note is None and head.verdict is not None
    assert head.verdict.headline.startswith("Do not speculate")
    assert "Recommended config: <b>baseline (AR)</b>" in P.header.render(head)


def test_header_without_validation_calls_the_figure_the_searchs_own() -> None:
    head = P.header.data(searched(), SPEEDUP)
    assert head.verdict is not None and head.best_trial == 1
    assert head.verdict.headline == ("Not validated: the search's own figure, 1.28× the AR "
                                     "baseline on 8 prompts")
    assert head.validation == {}
    assert "Best config (search): <b>ngram k=3 n=3..3</b>" in P.header.render(head)


def test_a_stale_record_is_not_used() -> None:
    """A resumed search completed one more trial: the record's winner no longer counts."""
    study = validated()
    speculative(study, 1.01, k=6)
    head = P.header.data(study, SPEEDUP)
    assert head.best_trial == 1 and head.speedup == 1.28
    assert head.verdict is not None and head.verdict.headline.startswith(
        "Not validated: the search's own figure, 1.28× the AR baseline on 8 prompts (the "
        "validation record judged 5 complete trials, the study now has 6")
    assert head.validation["status"] == "stale: not used"
    fin = P.finalists.data(study, SPEEDUP)
    assert fin.frame.empty and fin.table == [] and "judged 5 complete trials" in fin.note


# ------------------------------------------------------------------ finalists panel
def test_finalist_rows_put_the_search_figure_beside_the_validated_one() -> None:
    fin = P.finalists.data(validated(), SPEEDUP)
    assert fin.note is None
    assert [(r.trial, r.role, r.search_speedup, r.speedup, r.interval, r.chosen)
            for r in fin.table] == [
        (1, "search #1", 1.28, 1.10, Interval(1.05, 1.15), False),
        (2, "search #2", 1.25, 1.04, Interval(0.98, 1.09), False),
        (4, "default vllm_ngram", 1.05, 1.12, Interval(1.06, 1.18), True)]
    assert all(r.tau == 2.0 and r.lossless is True for r in fin.table)
    assert fin.facts["prompts"] == "12 held-out prompts × 2 repeats"


def test_finalists_per_category_all_first_and_no_bar_for_one_prompt() -> None:
    frame = P.finalists.data(validated(), SPEEDUP).frame
    assert frame["group"].tolist() == ["all", "code", "rewriting"] * 3
    assert frame["trial"].tolist() == [1, 1, 1, 2, 2, 2, 4, 4, 4]
    first = frame[frame["trial"] == 1].set_index("group")
    assert first.loc["all", "speedup"] == 1.10 and first.loc["all", "prompts"] == 12
    assert (first.loc["all", "ci_low"], first.loc["all", "ci_high"]) == (1.05, 1.15)
    assert first.loc["code", "speedup"] == pytest.approx(1.30)
    assert math.isnan(first.loc["rewriting", "ci_low"]) and math.isnan(first.loc["rewriting", "ci_high"])
    assert "1 prompt: no interval" in first.loc["rewriting", "hover"]
    assert "no interval" not in first.loc["code", "hover"]
    assert frame[frame["chosen"]]["legend"].unique().tolist() == [
        "ngram k=5 n=5..5 (default vllm_ngram) ✓ chosen"]


def test_finalists_panel_without_a_record_is_a_note() -> None:
    fin = P.finalists.data(searched(), SPEEDUP)
    assert fin.frame.empty and fin.table == []
    assert fin.note is not None and fin.note.startswith("Not validated")
    assert 'class="note"' in P.finalists.render(fin)


# ------------------------------------------------------------------ top trials and the rest
def test_top_trials_mark_finalists_and_highlight_the_validated_winner() -> None:
    top = P.top.data(validated(), SPEEDUP, n=2)
    # The two best, then the finalist ranked below them (the default, trial 4).
    assert top.frame["number"].tolist() == [1, 2, 4]
    assert top.frame["rank"].tolist() == [1, 2, 4]
    assert top.frame["finalist"].tolist() == ["search #1", "search #2", "default vllm_ngram"]
    assert top.frame["validated"].tolist() == [1.10, 1.04, 1.12]
    columns = top.frame.columns.tolist()
    assert columns.index("validated") == columns.index("value.speedup") + 1
    assert top.best_number == 4
    page = P.top.render(top)
    assert '<tr class="best"><td>4</td><td>4</td>' in page and "<td class=\"nowrap\">[1.06, 1.18]</td>" in page


def test_top_trials_without_validation_have_no_finalist_columns() -> None:
    top = P.top.data(searched(), SPEEDUP)
    assert "finalist" not in top.frame and "validated" not in top.frame
    assert top.best_number == 1


def test_do_not_speculate_highlights_the_baseline_and_drafting_panels_say_why() -> None:
    study = validated(speculate=False)
    assert P.top.data(study, SPEEDUP).best_number == 0
    history = P.history.data(study, SPEEDUP)
    assert history.frame[history.frame["is_best"]]["number"].tolist() == [0]
    acc = P.pos_acc.data(study, SPEEDUP)
    assert acc.note is not None and acc.note.startswith("Validation says do not speculate")


def test_every_panel_that_marks_a_best_follows_the_validated_winner() -> None:
    study = validated()
    history = P.history.data(study, SPEEDUP)
    assert history.frame[history.frame["is_best"]]["number"].tolist() == [4]
    best, why = best_speculative(study, SPEEDUP)
    assert best is not None and best.number == 4 and why is None


# ------------------------------------------------------------------ the page
def test_the_page_of_a_validated_run_draws_the_finalists(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(run_dir / "study.journal")))
    study = optuna.load_study(study_name=STUDY, storage=storage)
    rec = record(study, speculate=True)
    rec["winner"] = 1                       # in this run trial 4 is a plain search trial
    rec["finalists"][2]["role"] = "search #3"
    study.set_user_attr(VALIDATION_ATTR, rec)
    page = write_report(run_dir).read_text(encoding="utf-8")
    sections = check_page(page)
    assert sections.figures.get("panel-finalists") == 1
    assert sections.tables.get("panel-finalists") == 1
    assert "panel-finalists" not in sections.notes
    assert sections.sections.index("panel-finalists") == 1          # right after the header
    assert "Validated: <b>1.10× [1.05, 1.15]</b>" in page
    data = build_report(run_dir)
    assert data.header.best_trial == 1 and data.top.best_number == 1
    assert render_report(data) == page


def test_held_out_prompts_of_one_category_plot_all_only() -> None:
    study = searched()
    rec = record(study, speculate=True)
    rec["categories"] = {"code": 12}
    for f in rec["finalists"]:
        f["by_category"] = {"code": {"speedup": f["speedup"], "ci90": f["ci90"],
                                     "mean_accepted_tokens": 2.0, "prompts": 12}}
    study.set_user_attr(VALIDATION_ATTR, rec)
    fin = P.finalists.data(study, SPEEDUP)
    assert fin.frame["group"].tolist() == ["all"] * 3
    assert fin.note is not None and "one category (code)" in fin.note
