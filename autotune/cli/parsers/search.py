"""`autotune search`'s arguments (run by `autotune.cli.search`), in groups: what is
tuned for, the held-out validation, what the answer must show, the trial budget, the
batch-size schedule and the study itself. `--help` lists them in this order."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from autotune.cli.parsers.options import (
    ALL_TARGETS,
    SAMPLERS,
    TARGETS,
    add_model_args,
    add_turns_arg,
    add_workload_args,
    engine_name,
)
from autotune.pipeline.budget import DEFAULT_TIME_BUDGET
from autotune.workloads.split import DEFAULT_POOL

if TYPE_CHECKING:
    from autotune.cli.parsers.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    """The command and its option groups, in `--help` order."""
    s = sub.add_parser("search", help="search the joint space for the fastest config")
    add_model_args(s)
    add_workload_args(s, max_new_tokens=None)
    _add_target_args(s)
    _add_validation_args(s)
    add_turns_arg(s)
    _add_decision_args(s)
    _add_budget_args(s)
    _add_schedule_args(s)
    _add_study_args(s)
    s.set_defaults(run=_run)


def _add_target_args(s: argparse.ArgumentParser) -> None:
    """What the search tunes for: the engine, the space and the objective."""
    s.add_argument("--target", default=ALL_TARGETS, type=engine_name, choices=TARGETS,
                   help="the engine the config will run on: the space is cut to what it "
                        "expresses and every candidate is measured under its drafting "
                        "rules, so the winner exports to it exactly; autotune: every knob "
                        "of our decoder; all (the default): autotune's search plus an "
                        "answer, validated and exported, for every engine whose rules "
                        "autotune reproduces")
    s.add_argument("--space", default=None,
                   help="a shipped space name or a YAML file (default: joint, or "
                        "engine_<target> with --target)")
    s.add_argument("--objective", default="speedup",
                   help="a shipped objective name or a YAML file (default: speedup, "
                        "paired against the AR baseline)")


def _add_validation_args(s: argparse.ArgumentParser) -> None:
    """The held-out prompts and how the finalists are raced on them."""
    s.add_argument("--validation", default="0.4", metavar="FRACTION|FILE",
                   help="held-out prompts the search never measures: a fraction of the "
                        "workload (split by category, seeded) or a prompt file; 0: none")
    s.add_argument("--validation-pool", type=int, default=DEFAULT_POOL, metavar="N",
                   help="held-out prompts the answer holds for: the replay tier predicts "
                        "the finalists on all of them (prediction-powered validation)")
    s.add_argument("--validation-prompts", type=int, default=16, metavar="N",
                   help="of the pool, prompts the finalists are measured on (a random "
                        "sample; it corrects the predictions)")
    s.add_argument("--validation-repeats", type=int, default=1, metavar="N",
                   help="passes over the measured held-out prompts, pooled")
    s.add_argument("--validation-budget", type=float, default=None, metavar="SECONDS",
                   help="time for racing the finalists: no look starts that would pass "
                        "it (default: the whole --validation-prompts sample); a rerun "
                        "resumes a race it left undecided")


def _add_decision_args(s: argparse.ArgumentParser) -> None:
    """What the answer must show, and how many configs compete for it."""
    s.add_argument("--min-gain", type=float, default=0.05, metavar="G",
                   help="the smallest speedup worth having, as a fraction (0.05: 5%%): "
                        "no finalist's interval reaching 1+G is 'do not speculate'; "
                        "one reaching it but not shown faster is 'undecided'")
    s.add_argument("--finalists", type=int, default=2, metavar="N",
                   help="top distinct configs re-measured on the held-out prompts (plus "
                        "the strongest documented default)")


def _add_budget_args(s: argparse.ArgumentParser) -> None:
    """How many trials, and at which fidelity each is evaluated."""
    s.add_argument("--trials", type=int, default=None,
                   help="trials to finish in the study (finished ones count on resume); "
                        "default 30 measured (--fidelity measure), 6 measured after the "
                        "screen (multi), 500 replayed (replay), 16 in the engine (engine)")
    s.add_argument("--fidelity", default="multi",
                   choices=("multi", "measure", "replay", "engine"),
                   help="multi: replay screens --screen configs, the best --trials are "
                        "measured; measure: every trial decodes; replay: every trial is "
                        "predicted (greedy only); engine: every trial runs in the --target "
                        "engine itself (hf; llama_server: its default). "
                        "Finalists are always measured, in the --target engine itself "
                        "where it runs here")


def _add_schedule_args(s: argparse.ArgumentParser) -> None:
    """The deployment beyond one request: batch sizes and concurrent requests."""
    s.add_argument("--batch-sizes", default=None, metavar="B,B,...",
                   help="after the search, tune the winner's draft length per batch size "
                        "(K=0: off), measured with the batched decoder against batched AR "
                        "and confirmed on the held-out prompts; best.json gets a schedule "
                        "that exports to vLLM and TensorRT-LLM")
    s.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="requests served side by side (--target llama_server: the server "
                        "runs -np N slots and every timed request is served beside N-1 "
                        "others); the export writes -np N. One search per deployment")
    s.add_argument("--schedule-k", default=None, metavar="K,K,...",
                   help="draft lengths tried per batch size (default 1,2,3,4,6,8 up to the "
                        "space's largest K, plus the winner's own)")


def _add_study_args(s: argparse.ArgumentParser) -> None:
    """The study itself: screen size, time limits, sampler, storage and run folder."""
    s.add_argument("--screen", type=int, default=220, metavar="N",
                   help="configs the replay tier screens before measuring (multi)")
    s.add_argument("--screen-prompts", type=int, default=None, metavar="N",
                   help="search prompts the replay screens rank configs on: the measured "
                        "--prompts and more of the search part, never held-out ones "
                        "(default 3 x --prompts; each costs one reference decode)")
    s.add_argument("--time-budget", default=DEFAULT_TIME_BUDGET, metavar="DURATION",
                   help="wall clock for the whole run (10m, 600s, 1h; none: no budget): "
                        "the machine's AR speed is measured first, the screen, trials, "
                        "engines' screens, held-out pool and race are sized to fit (each "
                        "count flag an upper bound) and each stage stops at its share; a "
                        f"rerun with a larger budget extends (default {DEFAULT_TIME_BUDGET})")
    s.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="stop starting trials after S seconds")
    s.add_argument("--trial-timeout", type=float, default=None, metavar="S",
                   help="fail a trial that runs longer than S seconds")
    s.add_argument("--sampler", default="tpe", help=f"one of {', '.join(SAMPLERS)}")
    s.add_argument("--no-prune", dest="prune", action="store_false",
                   help="evaluate every trial on every prompt (no median pruning)")
    s.add_argument("--storage", default=None,
                   help="Optuna storage URL (postgresql://...) or journal file; "
                        "default: study.journal in the run folder")
    s.add_argument("--study", default=None, help="study name (default: model-space-objective)")
    s.add_argument("--out", default=None, help="run folder (default: reports/<study>/)")
    s.add_argument("--enqueue", default=None, metavar="FILE",
                   help="JSON/YAML config (or list of configs) to try first")


def _run(args: argparse.Namespace) -> int:
    """Run the command: its module is imported only now, so `--help` and an argument
    error load none of what it needs."""
    from autotune.cli.search import run_search_command
    return run_search_command(args)
