"""`autotune search`: arguments -> plan -> run -> summary.

The pipeline itself is `autotune.pipeline`: `plan_search` checks everything that can be
checked without a model first (a typo costs a second, not a model load), `run_search`
runs it (its module says what Ctrl-C leaves in each phase).
"""

from __future__ import annotations

import argparse
import sys

from autotune.common.memory import gb
from autotune.pipeline.plan import SearchRequest, plan_search
from autotune.pipeline.run import SearchOutcome, run_search
from autotune.runs.engine_exports import answers_table
from autotune.runs.folder import best_config, top_table, validation_table

# Why the study stopped, by StudyRunner.run's reason.
STOPPED = {"budget": "trial budget reached", "timeout": "--timeout reached",
           "interrupted": "interrupted (Ctrl-C); rerun the same command to resume",
           "infeasible": "the space kept yielding infeasible points",
           "grid": "the grid is exhausted",
           "deadline": "the trials' share of --time-budget spent",
           "covered": "every config of the space was tried"}


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
    best = best_config(outcome.study, outcome.objective)
    answers = best.engine_answers() if best is not None else {}
    if best is not None and answers:
        print("the answer for every engine (held-out prompts, one AR baseline):")
        print(answers_table(best) + "\n\nautotune's own search, in detail:\n")
    print(top_table(outcome.study, outcome.objective))
    print("\n" + validation_table(outcome.study, outcome.objective))
    for engine in answers:
        print(f"\n{engine}'s " + validation_table(outcome.study, outcome.objective, engine))
    print(f"\nrun folder: {outcome.run_dir} ({', '.join(outcome.files)})")
    if outcome.stages:
        # Each stage's peak resident set beside its time (none where not measured).
        peaks = ([f" (peak {gb(p)})" for p in outcome.peak_rss]
                 if len(outcome.peak_rss) == len(outcome.stages) else [""] * len(outcome.stages))
        print("time by stage: " + ", ".join(f"{stage} {seconds:.0f} s{peak}"
                                            for (stage, seconds), peak
                                            in zip(outcome.stages, peaks))
              + f" (total {sum(seconds for _, seconds in outcome.stages):.0f} s"
              + (f"; peak RSS {gb(max(outcome.peak_rss))}" if outcome.peak_rss else "")
              + (f"; with its engines {gb(max(outcome.peak_tree))} (its RSS and its "
                 "children's PSS, sampled each second)" if any(outcome.peak_tree) else "")
              + ")")
    for line in outcome.budget_lines:
        print(line)
