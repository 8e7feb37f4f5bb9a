"""`autotune validate`'s arguments (run by `autotune.cli.validate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.cli.parsers.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    """Files of any kind the command recognises; --layers only bounds a space's layers."""
    v = sub.add_parser("validate", help="check a frozen config, space, objective or config")
    v.add_argument("files", nargs="+", metavar="FILE")
    v.add_argument("--layers", type=int, default=32,
                   help="layer count a space is checked against (default 32)")
    v.set_defaults(run="autotune.cli.validate:run_validate_command")
