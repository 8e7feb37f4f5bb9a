"""Suffix decoding against n-gram lookup, as vLLM runs them, on held-out prompts.

For each workload (default: Spec-Bench and the copy-heavy `copy_edit`), on the default
model under vLLM's rules (`engine=vllm`), one timing job, nothing else on the machine:

1. a seeded split, stratified by category, into search and held-out prompts;
2. tuning by replay on the search prompts only: every config of a grid of each method
   is predicted by the replay tier (`autotune.replay.Replayer`, cost parts measured
   first; suffix decoding served in prompt order through one cache), and the best
   predicted speedup of each method is its tuned config;
3. measurement on the held-out prompts: the tuned suffix and n-gram configs, vLLM's
   default n-gram (K 5, n 5..5) and vLLM's default suffix settings (K = depth 24, 10000
   cached requests, factor 1, min prob 0.1), interleaved per prompt against one AR
   baseline (`measure.measure_arms`), the prompts served in order (each stateful arm
   with its own cache, warmed only by its own earlier requests);
4. the replay of the same held-out prompts in the same order: τ predicted against τ
   measured, and whether every prompt's rounds (drafted, accepted, emitted) are equal.

Prints per workload and arm the held-out speedup with its 90% bootstrap interval over
prompts, τ, acceptance, and the replay check; then the speedup by category of the two
tuned configs (where suffix decoding pays and where it does not).

With `--turns all`, Spec-Bench's MT-bench questions bring their second turns, each served
right after its first with the model's own answer in the conversation
(`measure.conversations`); a conversation stays on one side of the split.

Usage: python bench/suffix_vs_ngram.py [--workloads spec_bench,copy_edit] [--search 40]
       [--held-out 40] [--max-new-tokens 64] [--turns first|all] [--categories a,b]
       [--seed 0] [--csv FILE]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from _replay_tuning import arm_row, tune_by_replay

from autotune.schema.config import DecodeConfig
from autotune.schema.methods import get_method
from autotune.measure import paired
from autotune.measure.conversations import with_later_turns
from autotune.measure.measurement import measure_arms
from autotune.models.loading import load_model
from autotune.replay.run import Replayer
from autotune.workloads.prompts import TURNS, load_workload, round_robin, split_workload

NGRAM_SIZES = [(1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (2, 4), (3, 3), (3, 5), (4, 4), (5, 5)]
NGRAM_GRID = [dict(method="ngram", k=k, ngram_min=lo, ngram_max=hi)
              for k in (1, 2, 3, 4, 5, 6, 8, 10) for lo, hi in NGRAM_SIZES]
SUFFIX_GRID = [dict(method="suffix", k=k, suffix_max_tree_depth=depth,
                    suffix_max_spec_factor=factor, suffix_min_token_prob=prob,
                    suffix_max_cached_requests=cached)
               for k, depth, factor, prob, cached in itertools.product(
                   (8, 16, 32), (24, 64), (0.5, 1.0, 2.0, 4.0), (0.0, 0.1, 0.3), (0, 10000))
               if k <= depth]
VLLM_NGRAM = dict(method="ngram", k=5, ngram_min=5, ngram_max=5)
VLLM_SUFFIX = dict(method="suffix", k=24, suffix_max_tree_depth=24,
                   suffix_max_cached_requests=10000, suffix_max_spec_factor=1.0,
                   suffix_min_token_prob=0.1)


def _config(params: dict) -> DecodeConfig:
    return DecodeConfig(**params, engine="vllm").validate()


def _label(config: DecodeConfig) -> str:
    if config.method == "ngram":
        return f"ngram k={config.k} n={config.ngram_min}..{config.ngram_max}"
    return (f"suffix k={config.k} depth={config.suffix_max_tree_depth} "
            f"factor={config.suffix_max_spec_factor:g} p>={config.suffix_min_token_prob:g} "
            f"cached={config.suffix_max_cached_requests}")


def run_workload(target, workload: str, args) -> tuple[list[dict], list[dict]]:
    categories = args.categories.split(",") if args.categories else None
    prompts = round_robin(load_workload(workload, categories), args.search + args.held_out)
    # A workload smaller than asked for is split in the same proportion.
    fraction = args.held_out / (args.search + args.held_out)
    search, held_out = split_workload(prompts, fraction, args.seed)
    if args.turns == "all":
        # Every conversation whole on one side of the split, its later turns right after
        # the turn before them (answered by the model, greedy).
        search = with_later_turns(target, search, args.max_new_tokens)
        held_out = with_later_turns(target, held_out, args.max_new_tokens)
    print(f"{workload}: {len(search)} search, {len(held_out)} held-out prompts "
          f"({args.turns} turns)",
          file=sys.stderr, flush=True)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        tuner = Replayer(target, None, search, args.max_new_tokens, Path(folder) / "parts.json")
        tuned_ngram, ngram_pred = tune_by_replay(tuner, NGRAM_GRID, _config)
        tuned_suffix, suffix_pred = tune_by_replay(tuner, SUFFIX_GRID, _config)
        checker = Replayer(target, None, held_out, args.max_new_tokens,
                           Path(folder) / "parts.json", parts=tuner.parts)
    print(f"{workload}: tuned by replay in {time.perf_counter() - began:.0f} s "
          f"({len(NGRAM_GRID)} n-gram, {len(SUFFIX_GRID)} suffix configs): "
          f"{_label(tuned_ngram)} (predicted {ngram_pred:.3f}), {_label(tuned_suffix)} "
          f"(predicted {suffix_pred:.3f})", file=sys.stderr, flush=True)
    arms = {"tuned suffix": tuned_suffix, "tuned ngram": tuned_ngram,
            "vLLM default suffix": _config(VLLM_SUFFIX),
            "vLLM default ngram": _config(VLLM_NGRAM)}
    began = time.perf_counter()
    measured = measure_arms(target, arms, held_out, args.max_new_tokens, seed=args.seed)
    print(f"{workload}: measured {len(held_out)} held-out prompts x {len(arms) + 1} arms in "
          f"{time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    rows, categories = [], []
    # Tuned suffix against tuned n-gram directly, paired per prompt (their decode times
    # on the same prompts, interleaved): > 1 means suffix decoding is faster.
    head_to_head = [
        paired.PromptPair(s.prompt_id, s.category, n.candidate.decode_s, n.candidate.decoded,
                          s.candidate.decode_s, s.candidate.decoded)
        for s, n in zip(measured["tuned suffix"].runs, measured["tuned ngram"].runs)]
    versus = paired.interval(head_to_head)
    print(f"{workload}: tuned suffix vs tuned ngram (paired, >1: suffix faster): "
          f"{paired.speedup(head_to_head):.3f} [{versus[0]:.3f}, {versus[1]:.3f}]"
          if versus else "", flush=True)
    for name, config in arms.items():
        pairs = [run.pair() for run in measured[name].runs]
        rows.append(arm_row(workload, name, _label(config), measured[name],
                            checker.replay(config)))
        if name.startswith("tuned"):
            for category, figures in paired.by_category(pairs).items():
                interval = figures.get("ci90")
                categories.append({
                    "workload": workload, "arm": name, "category": category,
                    "prompts": figures.get("prompts"), "speedup": figures.get("speedup"),
                    "ci90": (f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval
                             else "-"), "tau": figures.get("mean_accepted_tokens")})
    return rows, categories


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="spec_bench,copy_edit")
    ap.add_argument("--search", type=int, default=40)
    ap.add_argument("--held-out", type=int, default=40)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--turns", default="first", choices=TURNS,
                    help="multi-turn prompts: first turns only, or every turn in order")
    ap.add_argument("--categories", default=None,
                    help="comma-separated categories to keep (e.g. MT-bench's eight)")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    if not get_method("suffix").available():
        raise SystemExit("suffix decoding needs arctic-inference: "
                         + (get_method("suffix").requires or ("", ""))[1])
    target = load_model("default")
    rows, categories = [], []
    for workload in args.workloads.split(","):
        more_rows, more_categories = run_workload(target, workload.strip(), args)
        rows += more_rows
        categories += more_categories
        # Each workload's tables as soon as it is done (a later one may fail).
        with pd.option_context("display.width", 250, "display.max_columns", 30,
                               "display.max_colwidth", 70):
            print(pd.DataFrame(more_rows).to_string(index=False,
                                                    float_format=lambda v: f"{v:.3f}"))
            print()
            print(pd.DataFrame(more_categories).to_string(
                index=False, float_format=lambda v: f"{v:.3f}"))
            print(flush=True)
        if args.csv:
            pd.DataFrame(rows).to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
