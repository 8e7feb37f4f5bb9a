"""`autotune train-draft`'s arguments (run by `autotune.cli.train`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.parsers.options import add_model_args, add_workload_args
from autotune.models.drafter_folder import KINDS

if TYPE_CHECKING:
    import argparse

    from autotune.cli.parsers.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    """The workload is split as `search` splits it (same --validation and --seed), so a
    drafter never trains on the prompts a search holds out."""
    t = sub.add_parser("train-draft", help="distil a draft head (EAGLE, Medusa) or S2D exit "
                       "adapters from the model",
                       description="Distil a draft head from the target (its weights frozen) "
                       "on the search part of a workload, split as `autotune search` splits "
                       "it, from the target's own greedy continuations and features. Use the "
                       "folder with --draft in search, measure and generate.")
    add_model_args(t, draft=False)
    add_workload_args(t, max_new_tokens=None)
    t.add_argument("--kind", required=True, choices=KINDS,
                   help="eagle: a one-layer feature head (EAGLE-1); medusa: heads that each "
                        "guess one position further; exits: adapters that make the target's "
                        "early exits draft (method=sorted_exit)")
    t.add_argument("--minutes", type=float, default=10.0,
                   help="training time budget, summed over resumed runs (default 10)")
    t.add_argument("--out", required=True, metavar="DIR",
                   help="the drafter folder; an unfinished one is resumed")
    t.add_argument("--validation", default="0.4", metavar="FRACTION|FILE",
                   help="held out as `search` holds it out (same value and --seed): never "
                        "trained on")
    t.add_argument("--per-category", action="store_true",
                   help="one drafter per workload category (with at least 4 search-split "
                        "prompts) and one on all of them, each for --minutes, in one folder; "
                        "the search's `drafter` knob picks which drafts, or routes each "
                        "prompt to its category's")
    t.add_argument("--medusa-heads", type=int, default=4, metavar="N",
                   help="medusa: number of heads (default 4)")
    t.add_argument("--exit-layers", default=None, metavar="E1,E2,...",
                   help="exits: the layers (after how many of the target's layers) that get "
                        "an adapter (default every 3rd from n/4 to n-1)")
    t.add_argument("--exit-rank", type=int, default=None, metavar="R",
                   help="exits: each adapter's rank (default 64)")
    t.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="stop after N optimiser steps as well (per drafter): a run "
                        "that does not depend on the machine's speed")
    t.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    t.add_argument("--checkpoint-every", type=float, default=30.0, metavar="SECONDS",
                   help="write a resumable checkpoint this often (default 30)")
    t.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    """Run the command: its module is imported only now, so `--help` and an argument
    error load none of what it needs."""
    from autotune.cli.train import run_train_command
    return run_train_command(args)
