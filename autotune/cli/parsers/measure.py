"""`autotune measure`'s arguments (run by `autotune.cli.measure`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.parsers.options import (
    BACKENDS,
    add_config_arg,
    add_model_args,
    add_set_arg,
    add_turns_arg,
    add_workload_args,
    engine_name,
)

if TYPE_CHECKING:
    import argparse

    from autotune.cli.parsers.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    """A frozen --config fills the model, workload and seed, so their defaults are None."""
    m = sub.add_parser("measure", help="time one decoding config against the AR baseline",
                       description="Time one config against the AR baseline. With a frozen "
                       "config (best.json) it re-measures it with its model, workload and "
                       "objective and prints recorded vs now; flags override those.")
    add_model_args(m, model=None)
    add_workload_args(m, max_new_tokens=None, from_config=True)
    add_config_arg(m)
    add_set_arg(m, "attn_skip=12,17")
    m.add_argument("--json", action="store_true", help="one JSON object on stdout")
    m.add_argument("--replay", action="store_true",
                   help="predict instead of decoding: the replay tier's figures (greedy), "
                        "marked fidelity replay")
    m.add_argument("--trace", default=None, metavar="FILE",
                   help="write the per-round traces of every prompt as JSON")
    m.add_argument("--in", dest="measure_in", default="autotune", type=engine_name,
                   choices=BACKENDS,
                   help="where to decode both arms: autotune's decoder (default), or the "
                        "engine itself (hf: transformers' generate() with the config's HF "
                        "export; llama_server: llama.cpp's server on the GGUF --model). "
                        "A best.json holding that engine's own answer (engines.<engine>, "
                        "from search --target all) measures that answer; one that is not "
                        "to speculate or undecided is refused (its knobs are the AR "
                        "baseline's) unless --set gives knobs to measure")
    add_turns_arg(m)
    m.add_argument("--batch-size", type=int, default=None, metavar="B",
                   help="decode B prompts together (autotune's batched decoder) and "
                        "report output tokens/s against batched AR at the same B")
    m.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    """Run the command: its module is imported only now, so `--help` and an argument
    error load none of what it needs."""
    from autotune.cli.measure import run_measure_command
    return run_measure_command(args)
