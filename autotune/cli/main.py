"""Command line: a table of subcommands, each parsed by its module in
`autotune.cli.parsers` and run by its own module in `autotune.cli`.

Every bad input ends in one line on stderr and exit code 2; no traceback reaches the
user for anything they can fix. A subcommand's parser sets its runner (`args.run`), a
function whose import of the command's module happens only when that command runs, so
`--help` and argument errors load neither torch nor optuna.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from autotune.cli.parsers import COMMANDS

# The name tables `--help` restates from heavier registries, under the names
# tests/test_cli.py checks against those registries.
from autotune.cli.parsers.options import BACKENDS as _BACKENDS
from autotune.cli.parsers.options import FORMATS as _FORMATS
from autotune.cli.parsers.options import SAMPLERS as _SAMPLERS
from autotune.cli.parsers.options import TARGETS as _TARGETS
from autotune.common.errors import EXIT_USAGE, AutotuneError

__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "build_parser", "main"]

EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line with exit code 2 (its default code too)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise AutotuneError(message)


def build_parser() -> argparse.ArgumentParser:
    """The top parser and one subparser per command, each built by its own module in
    `autotune.cli.parsers` (so a command's options sit in one short file)."""
    parser = _Parser(prog="autotune",
                     description="Offline auto-tuner for LLM speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add_parser in COMMANDS:
        add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.run(args)
    except AutotuneError as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
