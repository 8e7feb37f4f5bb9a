"""One ranking for every consumer: best.json, the exports' fallbacks, the terminal's top
table and the report's header and top table name the same best trial, ties included."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend
from test_report_data import add, config

from autotune.report import collect
from autotune.runs.folder import best_document, best_trial, ranked_documents, top_table
from autotune.records import ranking
from autotune.search.objectives import Objective, load_objective

optuna.logging.set_verbosity(optuna.logging.WARNING)

THREE = Objective(name="three", path="", sha256="", description="",
                  metrics=("latency_ms_per_token", "peak_memory_mb", "prefill_ms"))


def journal_study(tmp_path: Path, directions: list[str]) -> optuna.Study:
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "study.journal")))
    return optuna.create_study(study_name="ties", storage=storage, directions=directions)


def every_best(study: optuna.Study, objective: Objective) -> dict[str, int | None]:
    """The best trial's number as each consumer names it."""
    best_doc = best_document(study, objective)
    report = collect(study, {"study": "ties"}, best_doc)
    table = top_table(study, objective).splitlines()
    return {"best.json": best_doc["provenance"]["trial"],
            "run_folder.best_trial": best_trial(study, objective).number,
            "exports' first fallback": ranked_documents(study, objective)[0]["provenance"]["trial"],
            "top table": int(table[1].split()[0]),
            "report header": report.header.best_trial,
            "report top table": int(report.top.frame["number"].iloc[0]),
            "report highlighted row": report.top.best_number,
            "report history star": int(report.history.frame.query("is_best")["number"].iloc[0])}


@pytest.mark.parametrize("name, values, best", [
    ("latency", [12.0, 9.0, 15.0, 9.0, 9.0], 1),          # minimise: the first 9.0 wins
    ("speedup", [1.2, 1.8, 1.8, 0.9], 1),                 # maximise: the first 1.8 wins
])
def test_one_objective_ties_name_the_same_best_everywhere(tmp_path, name, values, best):
    objective = load_objective(name)
    study = journal_study(tmp_path, objective.directions)
    for value in values:
        add(study, value, config("ngram", k=2), {objective.metrics[0]: value})
    assert set(every_best(study, objective).values()) == {best}
    assert study.best_trial.number == best       # what Optuna itself says on this storage


def test_a_tie_on_the_first_objective_of_a_front_names_the_same_best_everywhere(tmp_path):
    """#1 and #2 share the best latency and are both on the front (each wins on another
    objective): the lower trial number ranks first for every consumer."""
    study = journal_study(tmp_path, THREE.directions)
    for values in ([12.0, 400.0, 3.0], [9.0, 600.0, 2.0], [9.0, 500.0, 4.0], [13.0, 700.0, 9.0]):
        add(study, values, config("ngram", k=2), dict(zip(THREE.metrics, values)))
    assert ranking.pareto_numbers(study, THREE) == {0, 1, 2}
    assert set(every_best(study, THREE).values()) == {1}
    assert [t.number for t in ranking.ranked(study, THREE)] == [1, 2, 0, 3]


def test_no_complete_trial_has_no_best():
    study = optuna.create_study()
    objective = load_objective("latency")
    assert ranking.best_trial(study, objective) is None and ranking.ranked(study, objective) == []
    assert best_document(study, objective) is None
