"""`Stops`: the one place a search run turns Ctrl-C into a clean stop of its stage
(the CLI's own Ctrl-C tests, tests/test_search_cli.py, drive a real run to each phase)."""

from __future__ import annotations

from pathlib import Path

from autotune.pipeline.interrupts import INTERRUPTED, STOP_LINES, Stops


def _ctrl_c() -> None:
    raise KeyboardInterrupt


def test_a_stage_cut_by_ctrl_c_says_what_it_left_and_later_stages_are_skipped(capsys):
    stops = Stops(Path("runs/x"), Path("runs/x/best.json"))
    assert stops.run("engines", lambda: {"vllm": 1}) == {"vllm": 1} and stops.going
    assert stops.run("validation", _ctrl_c) is None and stops.interrupted
    assert "interrupted while validating the finalists" in capsys.readouterr().err
    ran: list[str] = []
    assert stops.run("schedule", lambda: ran.append("schedule")) is None
    assert ran == []                                       # skipped after the stop
    # The run files are written after a stop in any earlier stage.
    assert stops.run("files", lambda: ["best.json"], after_stop=True) == ["best.json"]


def test_ctrl_c_while_writing_names_the_commands_that_redo_the_files(capsys):
    stops = Stops(Path("runs/x"), Path("runs/x/best.json"))
    assert stops.run("files", _ctrl_c, after_stop=True) is None
    err = capsys.readouterr().err
    assert "autotune report runs/x;" in err and "autotune export runs/x/best.json" in err


def test_a_study_stopped_by_ctrl_c_interrupts_the_run():
    stops = Stops(Path("r"), Path("r/best.json"))
    stops.interrupted_by("deadline")
    assert stops.going
    stops.interrupted_by(INTERRUPTED)
    stops.interrupted_by("budget")                         # stays interrupted
    assert stops.interrupted


def test_every_stage_has_its_line():
    assert set(STOP_LINES) == {"screen", "engines", "validation", "schedule", "files"}
