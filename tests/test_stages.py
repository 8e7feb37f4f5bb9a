"""`run_stages`: the one loop that runs a search run's stages (`pipeline/run.py`'s table)
under the stops, the per-stage clock and the budget; and `NoBudget`, which stands in for
a run without --time-budget (the real run is driven by tests/test_search_cli.py)."""

from __future__ import annotations

from pathlib import Path

from autotune.pipeline.budget import NoBudget
from autotune.pipeline.interrupts import Stops
from autotune.pipeline.stages import Stage, run_stages


class _Budget:
    """The budget's calls the loop makes."""

    def __init__(self) -> None:
        self.done_stages: list[str] = []

    def done(self, stage: str) -> None:
        self.done_stages.append(stage)


class _Clock:
    def __init__(self) -> None:
        self.laps: list[str] = []

    def lap(self, stage: str) -> None:
        self.laps.append(stage)


def _ctrl_c() -> None:
    raise KeyboardInterrupt


def test_after_a_ctrl_c_only_the_run_files_run_and_every_stage_is_lapped(capsys):
    ran: list[str] = []
    stages = [
        Stage("screen", lambda: ran.append("screen"), stops="screen", budget="screen"),
        Stage(None, lambda: ran.append("record"), stops=None),
        Stage("skipped", lambda: ran.append("skipped"), stops="engines",
              when=lambda: False),
        Stage("race", _ctrl_c, stops="validation", budget="race"),
        Stage("schedule", lambda: ran.append("schedule"), stops="schedule"),
        Stage("files", lambda: ran.append("files"), stops="files", after_stop=True),
    ]
    stops, budget, clock = Stops(Path("r"), Path("r/best.json")), _Budget(), _Clock()
    run_stages(stages, stops, budget, clock)      # type: ignore[arg-type]
    assert ran == ["screen", "record", "files"] and stops.interrupted
    assert "interrupted while validating the finalists" in capsys.readouterr().err
    # A stage cut by Ctrl-C has still ended its budget stage; a skipped one has not.
    assert budget.done_stages == ["screen", "race"]
    # Every stage with a line is lapped (one that took no time drops out of the summary).
    assert clock.laps == ["screen", "skipped", "race", "schedule", "files"]


def test_a_stage_that_catches_ctrl_c_itself_is_run_bare():
    def study() -> None:
        stops.interrupted_by("interrupted")       # as the study runner reports it

    stops = Stops(Path("r"), Path("r/best.json"))
    ran: list[str] = []
    run_stages([Stage("trials", study, stops=None, budget="trials"),
                Stage("later", lambda: ran.append("later"), stops="schedule")],
               stops, NoBudget(), _Clock())      # type: ignore[arg-type]
    assert stops.interrupted and ran == []


def test_no_budget_is_falsy_and_silent():
    budget = NoBudget()
    assert not budget and budget.stop_at("trials") is None and budget.summary() == []
    budget.stopped_at("the race after 3 of 8 held-out prompts")
    budget.done("race")
    assert budget.summary() == []
