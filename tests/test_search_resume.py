"""A rerun of a multi-fidelity search with another budget: a larger `--trials` measures
more (the screen's next distinct configs by rank, then the sampler's own) and judges the
finalists again; a larger `--screen` screens more; a smaller budget measures nothing and
says so. On the tiny model: counts only, nothing that depends on the machine's speed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_search_cli import _journal_study, _journal_trials
from tiny import llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)

from autotune.cli.main import main
from autotune.search.finalists import VALIDATION_ATTR
from autotune.search.study import counted_trials

# Six prompts, so that the search holds two out and judges its finalists on them.
WORKLOAD = ("t1 t2 t3 t4 t5 t1 t2 t3 t4 t5 t1 t2\nt7 t8 t9 t7 t8 t9 t7 t8\n"
            "t3 t4 t3 t4 t3 t4 t5 t3 t4\nt9 t1 t9 t1 t9 t1 t2 t9\n"
            "t5 t6 t5 t6 t5 t6 t7 t5\nt2 t8 t2 t8 t2 t8 t1 t2 t8\n")
SCREEN_SUFFIX = ".screen"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-resume")
    save_tiny(llama_model(seed=5, layers=4, scale=4.0), folder / "model")
    (folder / "prompts.txt").write_text(WORKLOAD)
    return folder


def _args(tiny_dir: Path, run: Path, *extra: str) -> list[str]:
    return ["search", "--model", str(tiny_dir / "model"), "--workload",
            str(tiny_dir / "prompts.txt"), "--max-new-tokens", "12",
            "--validation", "0.34", "--validation-prompts", "2", "--validation-repeats", "1",
            "--finalists", "1", "--out", str(run), "--study", "m", "--seed", "1", *extra]


def _measured(run: Path) -> list:
    return counted_trials(_journal_trials(run / "study.journal", "m"))


def _params(trials: list) -> list[str]:
    return [json.dumps(t.params, sort_keys=True) for t in trials]


def _validated_over(run: Path) -> int:
    """How many complete trials the stored validation record judged."""
    study = _journal_study(run / "study.journal", "m")
    return study.user_attrs[VALIDATION_ATTR]["complete_trials"]


def test_a_larger_trials_measures_the_next_screened_configs_and_judges_again(
        tiny_dir, tmp_path, cache, capsys):
    run = tmp_path / "run"
    assert main(_args(tiny_dir, run, "--screen", "24", "--trials", "3")) == 0
    capsys.readouterr()
    first = _measured(run)
    assert len(first) == 3 and _validated_over(run) == 3

    assert main(_args(tiny_dir, run, "--screen", "24", "--trials", "5")) == 0
    err = capsys.readouterr().err
    assert "screening" not in err                    # the screen is done: nothing replayed
    assert "--trials 5 extends the study's 3: 2 more screened configs" in err
    after = _measured(run)
    assert len(after) == 5
    assert _params(after)[:3] == _params(first)      # the old trials are kept as they were
    new = after[3:]
    assert all("screen" in t.user_attrs for t in new)
    assert len(set(_params(after))) == 5             # distinct configs, none measured twice
    # The screen's next configs by rank: ranked after the ones measured first.
    old_ranks = [t.user_attrs["screen"]["rank"] for t in first if "screen" in t.user_attrs]
    assert all(t.user_attrs["screen"]["rank"] > min(old_ranks) for t in new)
    assert _validated_over(run) == 5                 # the finalists judged again
    assert "5 of 5 trials finished" in err


def test_a_larger_screen_screens_more_and_a_smaller_budget_changes_nothing(
        tiny_dir, tmp_path, cache, capsys):
    run = tmp_path / "run"
    journal = run / "study.journal"
    assert main(_args(tiny_dir, run, "--screen", "12", "--trials", "3")) == 0
    capsys.readouterr()
    assert len(counted_trials(_journal_trials(journal, "m" + SCREEN_SUFFIX))) == 12
    measured = _params(_measured(run))

    assert main(_args(tiny_dir, run, "--screen", "24", "--trials", "3")) == 0
    err = capsys.readouterr().err
    assert "screening 24 configs by replay (12 done)" in err
    assert len(counted_trials(_journal_trials(journal, "m" + SCREEN_SUFFIX))) == 24
    assert _params(_measured(run)) == measured        # the budget was spent already

    all_trials = len(_journal_trials(journal, "m"))
    assert main(_args(tiny_dir, run, "--screen", "24", "--trials", "2")) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "nothing more is measured" in line]
    assert lines == ["autotune: 3 trials are finished already, more than --trials 2: "
                     "nothing more is measured"]
    assert len(_journal_trials(journal, "m")) == all_trials
    assert "racing" not in err                   # nor the finalists re-measured


def test_beyond_the_screens_distinct_configs_the_sampler_measures_the_rest(
        tiny_dir, tmp_path, cache, capsys):
    run = tmp_path / "run"
    # A screen of 3 n-gram configs holds at most 3 distinct ones.
    assert main(_args(tiny_dir, run, "--space", "ngram", "--screen", "3",
                      "--trials", "8")) == 0
    err = capsys.readouterr().err
    first = _measured(run)
    assert len(first) < 8 and "instead of 8" in err
    # The same command again says again why fewer than asked are measured.
    assert main(_args(tiny_dir, run, "--space", "ngram", "--screen", "3",
                      "--trials", "8")) == 0
    err = capsys.readouterr().err
    assert f"measuring {len(first)} trials (the AR baseline included) instead of 8" in err
    assert len(_measured(run)) == len(first)

    assert main(_args(tiny_dir, run, "--space", "ngram", "--screen", "3",
                      "--trials", "9")) == 0
    err = capsys.readouterr().err
    said = re.search(r"--trials 9 extends the study's (\d+): (\d+) more screened configs "
                     r"by the screen's rank, then (\d+) of the sampler's own", err)
    assert said, err
    after = _measured(run)
    assert len(after) == 9 and _params(after)[:len(first)] == _params(first)
    new = after[len(first):]
    screened = [t for t in new if "screen" in t.user_attrs]
    assert (int(said[1]), int(said[2]), int(said[3])) == (len(first), len(screened),
                                                          len(new) - len(screened))
