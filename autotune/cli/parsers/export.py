"""`autotune export`'s arguments (run by `autotune.cli.export`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.parsers.options import FORMATS, engine_name

if TYPE_CHECKING:
    import argparse

    from autotune.cli.parsers.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    """--format takes any name (no `choices`): `export` refuses an unknown one itself."""
    e = sub.add_parser("export", help="write a frozen config in a server's format")
    e.add_argument("config", help="frozen config (best.json)")
    e.add_argument("--format", required=True, type=engine_name,
                   help=" | ".join(FORMATS) + "; a best.json holding that engine's own "
                        "answer (engines.<format>, from search --target all) exports it, "
                        "and refuses when it is not to speculate or undecided")
    e.add_argument("-o", "--output", default=None, help="file to write (default: stdout)")
    e.add_argument("--lossy", action="store_true",
                   help="drop knobs the format cannot express (each is listed) "
                        "instead of failing")
    e.add_argument("--draft-tp", type=int, default=None, metavar="N",
                   help="vllm: draft_tensor_parallel_size")
    e.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    """Run the command: its module is imported only now, so `--help` and an argument
    error load none of what it needs."""
    from autotune.cli.export import run_export_command
    return run_export_command(args)
