"""Option groups more than one command shares, and the torch-free name tables their
`choices` come from.

The engine tables are read from their registries (targets: autotune/search/targets.py
over autotune/schema/engines.py; backends: autotune/backends/registry.py; formats:
autotune/exports/__init__.py), each torch-free, so a new engine needs nothing here.
SAMPLERS restates `search.samplers.SAMPLERS`, which loads optuna, so that `--help` stays
fast; tests/test_cli.py fails when the two differ.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable

from autotune.backends import BACKENDS
from autotune.schema.engines import retirement
from autotune.exports import FORMATS
from autotune.search.targets import ALL_TARGETS, TARGETS
from autotune.workloads.prompts import TURNS

if TYPE_CHECKING:
    # The subparsers action `build_parser` hands each command's `add_parser`.
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
# A command's parser builder: adds its subparser, options and runner to `Subparsers`.
AddParser = Callable[["Subparsers"], None]

__all__ = ["ALL_TARGETS", "BACKENDS", "FORMATS", "SAMPLERS", "TARGETS", "AddParser",
           "add_config_arg", "add_model_args", "add_set_arg", "add_turns_arg",
           "add_workload_args", "engine_name"]

# TARGETS (`search --target`: "all", the default, or one engine), BACKENDS (`measure
# --in`: our decoder first) and FORMATS (`export --format`; `export` checks the name
# itself) are the registries' own, imported above. SAMPLERS restates samplers.SAMPLERS.
SAMPLERS = ("tpe", "gp", "cmaes", "random", "grid", "qmc", "nsga2", "bayes_opt")


def engine_name(value: str) -> str:
    """argparse `type` of --target, --in and --format: a retired engine's name is refused
    with the line naming its replacement (argparse checks `type` before `choices`, so it
    never reaches "invalid choice")."""
    retired = retirement(value)
    if retired is not None:
        raise argparse.ArgumentTypeError(retired)
    return value


def add_model_args(p: argparse.ArgumentParser, model: str | None = "default",
                   draft: bool = True) -> None:
    """`model` None: a frozen --config supplies the model when none is given. `draft`
    False: no --draft (a command about the target alone)."""
    p.add_argument("--model", default=model,
                   help="default | HF folder | hub id in the local HF cache | file.gguf"
                        + ("" if model else " (default: the --config's model, else default)"))
    if draft:
        p.add_argument("--draft", default=None,
                       help="a draft model (draft_model) or a train-draft folder (eagle, "
                            "medusa, sorted_exit adapters; a --per-category set)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow model code from the model folder (off by default)")


def add_workload_args(p: argparse.ArgumentParser, max_new_tokens: int | None,
                      from_config: bool = False) -> None:
    """`max_new_tokens` None: the objective's workload defaults fill what is not given.
    `from_config`: workload and seed default to None, filled from a frozen --config."""
    p.add_argument("--workload", default=None if from_config else "spec_bench",
                   help="builtin | spec_bench | copy_edit | Spec-Bench JSONL | JSONL with prompt/text "
                        "| text file")
    p.add_argument("--categories", default=None, help="comma-separated categories to keep")
    p.add_argument("--prompts", type=int, default=None,
                   help="number of prompts, taken round-robin across categories")
    p.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    p.add_argument("--seed", type=int, default=None if from_config else 0)


def add_turns_arg(p: argparse.ArgumentParser) -> None:
    """`--turns` (measure, search): which turns of multi-turn prompts are served."""
    p.add_argument("--turns", default="first", choices=TURNS,
                   help="multi-turn prompts (Spec-Bench's MT-bench questions): their first "
                        "user turn only (default), or every turn, each later turn right "
                        "after the one before it, with the model's own greedy answers as "
                        "the conversation so far")


def add_config_arg(p: argparse.ArgumentParser) -> None:
    """`--config` (measure, generate): a frozen config or a file of config keys."""
    p.add_argument("--config", default=None,
                   help="frozen config (best.json) or JSON/YAML file of config keys")


def add_set_arg(p: argparse.ArgumentParser, example: str) -> None:
    """`--set KEY=VALUE` (measure, generate), repeated; `example` is the help's one."""
    p.add_argument("--set", dest="assignments", action="append", default=[],
                   metavar="KEY=VALUE", help=f"config key, e.g. --set {example}")
