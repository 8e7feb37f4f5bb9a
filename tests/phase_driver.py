"""Run the `autotune` CLI with one phase made to wait for the test, so process-level
tests (Ctrl-C, kill -9) know exactly where the process is when they signal it.

    python tests/phase_driver.py PHASE N MARKER autotune-args...

The N-th time the process reaches PHASE it writes the file MARKER and waits there
(sleeping, so a SIGINT raises KeyboardInterrupt at that very point). The test waits for
MARKER, then signals, or lets it go on by creating MARKER.go. Nothing depends on how
fast trials run.

Phases, each a real function of the search patched here and nowhere else:
  profile  the hardware profile before the study (`profile.forward_cost_profile`)
  trial    inside a trial's measurement (`evaluation.evaluate`)
  between  the run files rewritten after a trial (`run_folder.write_run_files`)
  validation  measuring the finalists on the held-out prompts
           (`validation.measure_finalists`)
  report   rendering the report after the study (`report.render_report`)
  exports  the exports written aside after the report, about to replace the run's
           exports/ folder (`exporting.swap_in`; reached whatever the exports hold,
           so also when no trial beat the AR baseline)
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

# Long enough for any test, short enough that a test that never signals still ends.
WAIT_S = 600.0


def release_file(marker: Path) -> Path:
    """The file a test creates to let a parked process go on, for MARKER."""
    return marker.with_name(marker.name + ".go")


def _park(marker: Path) -> None:
    """Say where we are (atomically: the test never reads half a marker), then wait for
    a signal, or for the test to create `release_file(marker)`."""
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, marker)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if release_file(marker).exists():
            return
        time.sleep(0.05)
    raise RuntimeError(f"phase_driver: no signal came within {WAIT_S:g} s")


def _wait_on_call(owner: Any, name: str, nth: int, marker: Path) -> None:
    original: Callable[..., Any] = getattr(owner, name)
    calls = {"n": 0}

    @functools.wraps(original)
    def waiting(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == nth:
            _park(marker)
        return original(*args, **kwargs)

    setattr(owner, name, waiting)


def _install(phase: str, nth: int, marker: Path) -> None:
    if phase == "profile":
        import autotune.measure.profile as module
        _wait_on_call(module, "forward_cost_profile", nth, marker)
    elif phase == "trial":
        import autotune.search.evaluation as module
        _wait_on_call(module, "evaluate", nth, marker)
    elif phase == "between":
        import autotune.runs.folder as module
        _wait_on_call(module, "write_run_files", nth, marker)
    elif phase == "validation":
        import autotune.search.finalists as module
        _wait_on_call(module, "measure_finalists", nth, marker)
    elif phase == "report":
        import autotune.report as module
        _wait_on_call(module, "render_report", nth, marker)
    elif phase == "exports":
        import autotune.runs.exports_folder as module
        _wait_on_call(module, "swap_in", nth, marker)
    else:
        raise SystemExit(f"phase_driver: unknown phase {phase!r}")


if __name__ == "__main__":
    # The test plays a user pressing Ctrl-C at a terminal. A process started in the
    # background by a shell without job control (a CI script, `cmd &`) inherits SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler: put it back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    phase, nth, marker, *cli_args = sys.argv[1:]
    _install(phase, int(nth), Path(marker))
    from autotune.cli.main import main
    sys.exit(main(cli_args))
