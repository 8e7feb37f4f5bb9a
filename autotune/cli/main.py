"""Command line: a table of subcommands, each run by its own `*_cli` module.

Every bad input ends in one line on stderr and exit code 2; no traceback reaches the
user for anything they can fix. A subcommand names its runner as "module:function",
imported only when that command runs, so `--help` and argument errors load neither
torch nor optuna.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Sequence

from autotune.common.errors import AutotuneError
from autotune.decoding.engines import retirement
from autotune.models.drafter_folder import KINDS
from autotune.workloads.prompts import TURNS
from autotune.workloads.split import DEFAULT_POOL

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# samplers.SAMPLERS, restated so that `--help` stays fast (that module loads optuna);
# tests/test_cli.py fails when the two differ.
# The engines `search --target` tunes for (autotune/decoding/engines.py, torch-free).
_TARGETS = ("autotune", "vllm", "sglang", "trtllm", "hf", "llama_server")
# autotune/backends ENGINE_BACKENDS, with our decoder first (tests/test_cli.py checks).
_BACKENDS = ("autotune", "hf", "llama_server", "vllm", "sglang")
# autotune/exports FORMATS (tests/test_cli.py checks); `export` checks the name itself.
_FORMATS = ("vllm", "sglang", "hf", "trtllm", "dv", "llama_server")
_SAMPLERS = ("tpe", "gp", "cmaes", "random", "grid", "qmc", "nsga2", "bayes_opt")


def _engine_name(value: str) -> str:
    """argparse `type` of --target, --in and --format: a retired engine's name is refused
    with the line naming its replacement (argparse checks `type` before `choices`, so it
    never reaches "invalid choice")."""
    retired = retirement(value)
    if retired is not None:
        raise argparse.ArgumentTypeError(retired)
    return value


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line with exit code 2 (its default code too)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise AutotuneError(message)


def _add_model_args(p: argparse.ArgumentParser, model: str | None = "default",
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


def _add_workload_args(p: argparse.ArgumentParser, max_new_tokens: int | None,
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


def _add_turns_arg(p: argparse.ArgumentParser) -> None:
    """`--turns` (measure, search): which turns of multi-turn prompts are served."""
    p.add_argument("--turns", default="first", choices=TURNS,
                   help="multi-turn prompts (Spec-Bench's MT-bench questions): their first "
                        "user turn only (default), or every turn, each later turn right "
                        "after the one before it, with the model's own greedy answers as "
                        "the conversation so far")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autotune",
                     description="Offline auto-tuner for LLM speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    m = sub.add_parser("measure", help="time one decoding config against the AR baseline",
                       description="Time one config against the AR baseline. With a frozen "
                       "config (best.json) it re-measures it with its model, workload and "
                       "objective and prints recorded vs now; flags override those.")
    _add_model_args(m, model=None)
    _add_workload_args(m, max_new_tokens=None, from_config=True)
    m.add_argument("--config", default=None,
                   help="frozen config (best.json) or JSON/YAML file of config keys")
    m.add_argument("--set", dest="assignments", action="append", default=[],
                   metavar="KEY=VALUE", help="config key, e.g. --set attn_skip=12,17")
    m.add_argument("--json", action="store_true", help="one JSON object on stdout")
    m.add_argument("--replay", action="store_true",
                   help="predict instead of decoding: the replay tier's figures (greedy), "
                        "marked fidelity replay")
    m.add_argument("--trace", default=None, metavar="FILE",
                   help="write the per-round traces of every prompt as JSON")
    m.add_argument("--in", dest="measure_in", default="autotune", type=_engine_name,
                   choices=_BACKENDS,
                   help="where to decode both arms: autotune's decoder (default), or the "
                        "engine itself (hf: transformers' generate() with the config's HF "
                        "export; llama_server: llama.cpp's server on the GGUF --model)")
    _add_turns_arg(m)
    m.add_argument("--batch-size", type=int, default=None, metavar="B",
                   help="decode B prompts together (autotune's batched decoder) and "
                        "report output tokens/s against batched AR at the same B")
    m.set_defaults(run="autotune.cli.measure:run_measure_command")

    s = sub.add_parser("search", help="search the joint space for the fastest config")
    _add_model_args(s)
    _add_workload_args(s, max_new_tokens=None)
    s.add_argument("--target", default="autotune", type=_engine_name, choices=_TARGETS,
                   help="the engine the config will run on: the space is cut to what it "
                        "expresses and every candidate is measured under its drafting "
                        "rules, so the winner exports to it exactly (default autotune: "
                        "every knob of our decoder)")
    s.add_argument("--space", default=None,
                   help="a shipped space name or a YAML file (default: joint, or "
                        "engine_<target> with --target)")
    s.add_argument("--objective", default="speedup",
                   help="a shipped objective name or a YAML file (default: speedup, "
                        "paired against the AR baseline)")
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
    _add_turns_arg(s)
    s.add_argument("--min-gain", type=float, default=0.05, metavar="G",
                   help="the smallest speedup worth having, as a fraction (0.05: 5%%): "
                        "no finalist's interval reaching 1+G is 'do not speculate'; "
                        "one reaching it but not shown faster is 'undecided'")
    s.add_argument("--finalists", type=int, default=3, metavar="N",
                   help="top distinct configs re-measured on the held-out prompts (plus "
                        "the strongest documented default)")
    s.add_argument("--trials", type=int, default=None,
                   help="trials to finish in the study (finished ones count on resume); "
                        "default 30 measured (--fidelity measure), 8 measured after the "
                        "screen (multi), 500 replayed (replay), 16 in the engine (engine)")
    s.add_argument("--fidelity", default="multi",
                   choices=("multi", "measure", "replay", "engine"),
                   help="multi: replay screens --screen configs, the best --trials are "
                        "measured; measure: every trial decodes; replay: every trial is "
                        "predicted (greedy only); engine: every trial runs in the --target "
                        "engine itself (hf; llama_server: its default). "
                        "Finalists are always measured, in the --target engine itself "
                        "where it runs here")
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
    s.add_argument("--screen", type=int, default=400, metavar="N",
                   help="configs the replay tier screens before measuring (multi)")
    s.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="stop starting trials after S seconds")
    s.add_argument("--trial-timeout", type=float, default=None, metavar="S",
                   help="fail a trial that runs longer than S seconds")
    s.add_argument("--sampler", default="tpe", help=f"one of {', '.join(_SAMPLERS)}")
    s.add_argument("--no-prune", dest="prune", action="store_false",
                   help="evaluate every trial on every prompt (no median pruning)")
    s.add_argument("--storage", default=None,
                   help="Optuna storage URL (postgresql://...) or journal file; "
                        "default: study.journal in the run folder")
    s.add_argument("--study", default=None, help="study name (default: model-space-objective)")
    s.add_argument("--out", default=None, help="run folder (default: reports/<study>/)")
    s.add_argument("--enqueue", default=None, metavar="FILE",
                   help="JSON/YAML config (or list of configs) to try first")
    s.set_defaults(run="autotune.cli.search:run_search_command")

    g = sub.add_parser("generate", help="stream one prompt's continuation with a config")
    _add_model_args(g, model=None)
    g.add_argument("--config", default=None,
                   help="frozen config (best.json) or JSON/YAML file of config keys")
    g.add_argument("--prompt", required=True, help="the user message")
    g.add_argument("--set", dest="assignments", action="append", default=[],
                   metavar="KEY=VALUE", help="config key, e.g. --set k=3")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="default: the config's workload, else 128")
    g.add_argument("--seed", type=int, default=None)
    g.set_defaults(run="autotune.cli.generate:run_generate_command", workload=None,
                   categories=None, prompts=None)

    e = sub.add_parser("export", help="write a frozen config in a server's format")
    e.add_argument("config", help="frozen config (best.json)")
    e.add_argument("--format", required=True, type=_engine_name, help=" | ".join(_FORMATS))
    e.add_argument("-o", "--output", default=None, help="file to write (default: stdout)")
    e.add_argument("--lossy", action="store_true",
                   help="drop knobs the format cannot express (each is listed) "
                        "instead of failing")
    e.add_argument("--draft-tp", type=int, default=None, metavar="N",
                   help="vllm: draft_tensor_parallel_size")
    e.set_defaults(run="autotune.cli.export:run_export_command")

    r = sub.add_parser("report", help="write the interactive HTML report of a run folder")
    r.add_argument("run_dir", help="a search's run folder (holds run.json)")
    r.add_argument("-o", "--output", default=None, help="default: RUN_DIR/report.html")
    r.add_argument("--storage", default=None,
                   help="the study's storage URL when it is not RUN_DIR/study.journal")
    r.set_defaults(run="autotune.cli.report:run_report_command")

    pr = sub.add_parser("profile", help="time the target's forward for 1..128 new tokens",
                        description="Time the target's forward over n new tokens after a "
                        "prefilled context (n = 1 ... 128, as Sequoia profiles): where "
                        "verifying more draft tokens stops being nearly free on this "
                        "hardware. `autotune search` stores the same curve in its run "
                        "folder (hardware_profile.json).")
    _add_model_args(pr, draft=False)
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
    pr.set_defaults(run="autotune.cli.profile:run_profile_command")

    t = sub.add_parser("train-draft", help="distil a draft head (EAGLE, Medusa) or S2D exit "
                       "adapters from the model",
                       description="Distil a draft head from the target (its weights frozen) "
                       "on the search part of a workload, split as `autotune search` splits "
                       "it, from the target's own greedy continuations and features. Use the "
                       "folder with --draft in search, measure and generate.")
    _add_model_args(t, draft=False)
    _add_workload_args(t, max_new_tokens=None)
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
    t.set_defaults(run="autotune.cli.train:run_train_command")

    v = sub.add_parser("validate", help="check a frozen config, space, objective or config")
    v.add_argument("files", nargs="+", metavar="FILE")
    v.add_argument("--layers", type=int, default=32,
                   help="layer count a space is checked against (default 32)")
    v.set_defaults(run="autotune.cli.validate:run_validate_command")
    return parser


def _runner(name: str) -> Callable[[argparse.Namespace], int]:
    """The function a subcommand's "module:function" names, imported now."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return _runner(args.run)(args)
    except AutotuneError as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
