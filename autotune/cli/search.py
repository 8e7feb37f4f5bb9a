"""`autotune search`: arguments -> plan -> run -> summary.

The pipeline itself is `autotune.pipeline`: `plan_search` checks everything that can be
checked without a model first (a typo costs a second, not a model load), `run_search`
runs it (its module says what Ctrl-C leaves in each phase).
"""

from __future__ import annotations

import argparse
import sys

from autotune.pipeline.plan import SearchRequest, plan_search
from autotune.pipeline.run import SearchOutcome, run_search
from autotune.runs.folder import top_table, validation_table

# Why the study stopped, by StudyRunner.run's reason.
STOPPED = {"budget": "trial budget reached", "timeout": "--timeout reached",
           "interrupted": "interrupted (Ctrl-C); rerun the same command to resume",
           "infeasible": "the space kept yielding infeasible points",
           "grid": "the grid is exhausted"}


def run_search_command(args: argparse.Namespace) -> int:
    outcome = run_search(plan_search(SearchRequest.from_mapping(vars(args))))
    print_summary(outcome)
    return outcome.exit_code


def print_summary(outcome: SearchOutcome) -> None:
    """Why it stopped (stderr), then the top configs, the validated answer and the run
    folder's files (stdout). Nothing when it stopped before the measured study (Ctrl-C
    while screening: the run said so)."""
    if outcome.study is None:
        return
    print(f"\n{STOPPED[outcome.reason]}: {outcome.finished} of {outcome.budget} trials "
          f"finished ({outcome.seconds:.0f} s this run)\n", file=sys.stderr)
    print(top_table(outcome.study, outcome.objective))
    print("\n" + validation_table(outcome.study, outcome.objective))
    print(f"\nrun folder: {outcome.run_dir} ({', '.join(outcome.files)})")
