"""`autotune generate`'s arguments (run by `autotune.cli.generate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.parsers.options import add_config_arg, add_model_args, add_set_arg

if TYPE_CHECKING:
    import argparse

    from autotune.cli.parsers.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    """One prompt, no workload: the workload fields a frozen config fills are None."""
    g = sub.add_parser("generate", help="stream one prompt's continuation with a config")
    add_model_args(g, model=None)
    add_config_arg(g)
    g.add_argument("--prompt", required=True, help="the user message")
    add_set_arg(g, "k=3")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="default: the config's workload, else 128")
    g.add_argument("--seed", type=int, default=None)
    g.set_defaults(run=_run, workload=None,
                   categories=None, prompts=None)


def _run(args: argparse.Namespace) -> int:
    """Run the command: its module is imported only now, so `--help` and an argument
    error load none of what it needs."""
    from autotune.cli.generate import run_generate_command
    return run_generate_command(args)
