"""Command line: a table of subcommands, each a thin call into the library.

Every bad input ends in one line on stderr and exit code 2; no traceback reaches the
user for anything they can fix.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from autotune.errors import AutotuneError
from autotune.files import write_atomically

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# Kept here rather than imported so `--help` and argument errors stay fast (no optuna).
_SAMPLERS = ("tpe", "gp", "cmaes", "random", "grid", "qmc", "nsga2", "bayes_opt")


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line with exit code 2 (its default code too)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise AutotuneError(message)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="default",
                   help="default | HF folder | hub id in the local HF cache | file.gguf")
    p.add_argument("--draft", default=None, help="draft model (draft_model, sorted_exit)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow model code from the model folder (off by default)")


def _add_workload_args(p: argparse.ArgumentParser, max_new_tokens: int | None) -> None:
    """`max_new_tokens` None: the objective's workload defaults fill what is not given."""
    p.add_argument("--workload", default="builtin",
                   help="builtin | Spec-Bench JSONL | JSONL with prompt/text | text file")
    p.add_argument("--categories", default=None, help="comma-separated categories to keep")
    p.add_argument("--prompts", type=int, default=None,
                   help="number of prompts, taken round-robin across categories")
    p.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    p.add_argument("--seed", type=int, default=0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autotune",
                     description="Offline auto-tuner for LLM speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    m = sub.add_parser("measure", help="time one decoding config against the AR baseline")
    _add_model_args(m)
    _add_workload_args(m, max_new_tokens=128)
    m.add_argument("--config", default=None, help="JSON/YAML file of config keys")
    m.add_argument("--set", dest="assignments", action="append", default=[],
                   metavar="KEY=VALUE", help="config key, e.g. --set attn_skip=12,17")
    m.add_argument("--json", action="store_true", help="one JSON object on stdout")
    m.add_argument("--trace", default=None, metavar="FILE",
                   help="write the per-round traces of every prompt as JSON")
    m.set_defaults(run=_run_measure)

    s = sub.add_parser("search", help="search the joint space for the fastest config")
    _add_model_args(s)
    _add_workload_args(s, max_new_tokens=None)
    s.add_argument("--space", default="joint", help="a shipped space name or a YAML file")
    s.add_argument("--objective", default="latency",
                   help="a shipped objective name or a YAML file")
    s.add_argument("--trials", type=int, default=30,
                   help="trials to finish in the study (finished ones count on resume)")
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
    s.set_defaults(run=_run_search)
    return parser


def _format_table(summary: dict[str, Any]) -> str:
    def fmt(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3f}"
        if isinstance(value, list):
            return ", ".join(fmt(v) for v in value) or "-"
        return str(value)

    config = ", ".join(f"{k}={fmt(v)}" for k, v in summary["config"].items())
    rows = [("config", config)] + [
        (key, fmt(summary[key])) for key in (
            "model", "draft", "device", "dtype", "prompts", "tokens_generated",
            "latency_ms_per_token", "baseline_latency_ms_per_token", "speedup",
            "prefill_ms", "mean_accepted_tokens", "acceptance_rate", "pos_acc",
            "draft_time_share", "peak_memory_mb", "lossless")]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _run_measure(args: argparse.Namespace) -> int:
    # Heavy imports happen here, after argument errors had their chance to surface fast.
    from autotune.decoding.config import (config_from_mapping, load_config_file,
                                          parse_assignments)
    from autotune.measure import measure
    from autotune.models.loading import load_model
    from autotune.workloads import load_workload

    if args.max_new_tokens < 1:
        raise AutotuneError("--max-new-tokens must be at least 1")
    base = config_from_mapping(load_config_file(args.config)) if args.config else None
    config = config_from_mapping(parse_assignments(args.assignments), base).validate()
    categories = [c for c in args.categories.split(",") if c] if args.categories else None
    prompts = load_workload(args.workload, categories, args.prompts)
    if config.method == "draft_model" and args.draft is None:
        raise AutotuneError("method=draft_model needs a draft model: pass --draft")
    target = load_model(args.model, args.device, args.dtype, args.trust_remote_code)
    draft = (load_model(args.draft, args.device, args.dtype, args.trust_remote_code)
             if args.draft else None)

    def progress(index: int, run: Any, so_far: Any) -> None:
        print(f"[{index + 1}/{len(prompts)}] {run.prompt_id} ({run.category}): "
              f"{len(run.candidate.tokens)} tokens", file=sys.stderr, flush=True)

    result = measure(target, config, prompts, args.max_new_tokens, args.seed, draft,
                     on_prompt=progress)
    summary = result.summary()
    if args.trace:
        write_atomically(Path(args.trace), json.dumps(result.traces()))
    print(json.dumps(summary) if args.json else _format_table(summary))
    return 0


def _slug(text: str) -> str:
    """A file- and study-name-safe form of a model spec."""
    name = Path(text.rstrip("/")).name or text
    name = name.removesuffix(".gguf")
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-") or "model"


def _run_search(args: argparse.Namespace) -> int:
    from autotune.search_cli import run_search_command
    return run_search_command(args, _slug(args.model))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        run: Callable[[argparse.Namespace], int] = args.run
        return run(args)
    except AutotuneError as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
