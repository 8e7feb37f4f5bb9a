"""`autotune profile`'s arguments (run by `autotune.cli.profile`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.parsers.options import add_model_args

if TYPE_CHECKING:
    import argparse

    from autotune.cli.parsers.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    """The target alone (no --draft): its forward's cost by new tokens, and by rows."""
    pr = sub.add_parser("profile", help="time the target's forward for 1..128 new tokens",
                        description="Time the target's forward over n new tokens after a "
                        "prefilled context (n = 1 ... 128, as Sequoia profiles): where "
                        "verifying more draft tokens stops being nearly free on this "
                        "hardware. `autotune search` stores the same curve in its run "
                        "folder (hardware_profile.json).")
    add_model_args(pr, draft=False)
    pr.add_argument("--sizes", default=None, metavar="N,N,...",
                    help="token counts to time (default 1,2,3,4,5,6,8,...,96,128)")
    pr.add_argument("--context", type=int, default=None, metavar="N",
                    help="context tokens prefilled before each timed forward (default 128)")
    pr.add_argument("--repeats", type=int, default=None, metavar="N",
                    help="round-robin passes over the sizes; median and min (default 3)")
    pr.add_argument("--batch-sizes", default=None, metavar="B,B,...",
                    help="also time one batched verify pass over B rows x n tokens per row "
                         "(n: --sizes, default 1,2,3,4,5,6,8,10,12,16; B=1 and n=1 always "
                         "added as the reference) and print it as a second table; the "
                         "compact Llama-family forward only")
    pr.add_argument("-o", "--output", default=None, metavar="FILE",
                    help="also write the profile as JSON (with --batch-sizes, under "
                         "\"batch\" as a search stores it)")
    pr.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    """Run the command: its module is imported only now, so `--help` and an argument
    error load none of what it needs."""
    from autotune.cli.profile import run_profile_command
    return run_profile_command(args)
