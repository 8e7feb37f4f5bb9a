"""`autotune report`'s arguments (run by `autotune.cli.report`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from autotune.cli.parsers.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    """A run folder in, its report.html out (the storage only when kept elsewhere)."""
    r = sub.add_parser("report", help="write the interactive HTML report of a run folder")
    r.add_argument("run_dir", help="a search's run folder (holds run.json)")
    r.add_argument("-o", "--output", default=None, help="default: RUN_DIR/report.html")
    r.add_argument("--storage", default=None,
                   help="the study's storage URL when it is not RUN_DIR/study.journal")
    r.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    """Run the command: its module is imported only now, so `--help` and an argument
    error load none of what it needs."""
    from autotune.cli.report import run_report_command
    return run_report_command(args)
