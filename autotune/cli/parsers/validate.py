"""`autotune validate`'s arguments (run by `autotune.cli.validate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from autotune.cli.parsers.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    """Files of any kind the command recognises; --layers only bounds a space's layers."""
    v = sub.add_parser("validate", help="check a frozen config, space, objective or config")
    v.add_argument("files", nargs="+", metavar="FILE")
    v.add_argument("--layers", type=int, default=32,
                   help="layer count a space is checked against (default 32)")
    v.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    """Run the command: its module is imported only now, so `--help` and an argument
    error load none of what it needs."""
    from autotune.cli.validate import run_validate_command
    return run_validate_command(args)
