"""SGLang's NGRAM as SGLang runs it (method `sglang_ngram`) on held-out prompts, against
SGLang's defaults and against the approximation autotune used before (method `ngram`
under `engine=sglang`: a per-request chain) - both as that approximation measured
itself and as SGLang actually runs its export.

For each workload (default: Spec-Bench and the copy-heavy `copy_edit`), on the default
model, one timing job, nothing else on the machine:

1. a seeded split, stratified by category, into search and held-out prompts;
2. tuning by replay on the search prompts only (the prompts served in order through one
   trie): a grid of sglang_ngram configs, and a grid of the old `ngram` chain configs;
3. measurement on the held-out prompts served in order, interleaved per prompt against
   one AR baseline (`measure.measure_arms`; each arm its own trie, warmed only by its
   own earlier requests): tuned sglang_ngram, SGLang's defaults (12 draft tokens, BFS
   1..10, trie depth 18), the tuned `ngram` chain (what the old approximation measured),
   and that chain's export as SGLang runs it (NGRAM, num_draft_tokens K + 1, BFS
   breadth 1..1, max_trie_depth ngram_max + K: `exports/sglang.py`);
4. the replay of the same held-out prompts in the same order: τ predicted against τ
   measured, and whether every prompt's rounds (drafted, accepted, emitted) are equal.

Prints per workload and arm the held-out speedup with its 90% bootstrap interval over
prompts, τ, acceptance and the replay check, then tuned sglang_ngram against SGLang's
defaults, paired per prompt.

Usage: python bench/sglang_ngram.py [--workloads spec_bench,copy_edit] [--search 24]
       [--held-out 24] [--max-new-tokens 64] [--turns first|all] [--categories a,b]
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
from autotune.measure import paired
from autotune.measure.conversations import with_later_turns
from autotune.measure.measurement import measure_arms
from autotune.models.loading import load_model
from autotune.replay.run import Replayer
from autotune.workloads.prompts import TURNS, load_workload, round_robin, split_workload

TRIE_GRID = [dict(method="sglang_ngram", k=k, sglang_ngram_max_trie_depth=depth,
                  sglang_ngram_min_bfs_breadth=low, sglang_ngram_max_bfs_breadth=high,
                  sglang_ngram_match_type=match)
             for k, depth, (low, high), match in itertools.product(
                 (1, 2, 4, 6, 8, 11, 15), (6, 12, 18), ((1, 1), (1, 4), (1, 10), (2, 4)),
                 ("BFS", "PROB"))]
CHAIN_GRID = [dict(method="ngram", k=k, ngram_min=1, ngram_max=n)
              for k in (1, 2, 3, 4, 6, 8, 10) for n in (1, 2, 3, 4, 5)]
# sglang 0.5.23: arg_groups/fields/spec.py L252-275 and speculative_hook.py _handle_ngram.
SGLANG_DEFAULT = dict(method="sglang_ngram", k=11, sglang_ngram_max_trie_depth=18,
                      sglang_ngram_min_bfs_breadth=1, sglang_ngram_max_bfs_breadth=10,
                      sglang_ngram_match_type="BFS")


def _config(params: dict) -> DecodeConfig:
    return DecodeConfig(**params, engine="sglang").validate()


def _as_sglang_runs(chain: DecodeConfig) -> DecodeConfig:
    """The old `ngram` chain's export (exports/sglang.py) as SGLang runs it."""
    return _config(dict(method="sglang_ngram", k=chain.k,
                        sglang_ngram_max_trie_depth=chain.ngram_max + chain.k,
                        sglang_ngram_min_bfs_breadth=1, sglang_ngram_max_bfs_breadth=1))


def _label(config: DecodeConfig) -> str:
    if config.method == "ngram":
        return f"ngram chain k={config.k} n={config.ngram_min}..{config.ngram_max}"
    return (f"NGRAM k={config.k} {config.sglang_ngram_match_type} "
            f"depth={config.sglang_ngram_max_trie_depth} breadth="
            f"{config.sglang_ngram_min_bfs_breadth}..{config.sglang_ngram_max_bfs_breadth}")


def run_workload(target, workload: str, args) -> list[dict]:
    categories = args.categories.split(",") if args.categories else None
    prompts = round_robin(load_workload(workload, categories), args.search + args.held_out)
    fraction = args.held_out / (args.search + args.held_out)
    search, held_out = split_workload(prompts, fraction, args.seed)
    if args.turns == "all":
        search = with_later_turns(target, search, args.max_new_tokens)
        held_out = with_later_turns(target, held_out, args.max_new_tokens)
    print(f"{workload}: {len(search)} search, {len(held_out)} held-out prompts "
          f"({args.turns} turns)", file=sys.stderr, flush=True)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        tuner = Replayer(target, None, search, args.max_new_tokens, Path(folder) / "parts.json")
        tuned, tuned_pred = tune_by_replay(tuner, TRIE_GRID, _config)
        chain, chain_pred = tune_by_replay(tuner, CHAIN_GRID, _config)
        checker = Replayer(target, None, held_out, args.max_new_tokens,
                           Path(folder) / "parts.json", parts=tuner.parts)
    print(f"{workload}: tuned by replay in {time.perf_counter() - began:.0f} s "
          f"({len(TRIE_GRID)} NGRAM, {len(CHAIN_GRID)} chain configs): {_label(tuned)} "
          f"(predicted {tuned_pred:.3f}), {_label(chain)} (predicted {chain_pred:.3f})",
          file=sys.stderr, flush=True)
    arms = {"tuned NGRAM": tuned, "SGLang default": _config(SGLANG_DEFAULT),
            "old chain (as measured)": chain, "old chain's export in SGLang":
            _as_sglang_runs(chain)}
    began = time.perf_counter()
    measured = measure_arms(target, arms, held_out, args.max_new_tokens, seed=args.seed)
    print(f"{workload}: measured {len(held_out)} held-out prompts x {len(arms) + 1} arms in "
          f"{time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    head_to_head = [
        paired.PromptPair(t.prompt_id, t.category, d.candidate.decode_s, d.candidate.decoded,
                          t.candidate.decode_s, t.candidate.decoded)
        for t, d in zip(measured["tuned NGRAM"].runs, measured["SGLang default"].runs)]
    versus = paired.interval(head_to_head)
    if versus:
        print(f"{workload}: tuned NGRAM vs SGLang's default (paired, >1: tuned faster): "
              f"{paired.speedup(head_to_head):.3f} [{versus[0]:.3f}, {versus[1]:.3f}]",
              flush=True)
    return [arm_row(workload, name, _label(config), measured[name], checker.replay(config))
            for name, config in arms.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="spec_bench,copy_edit")
    ap.add_argument("--search", type=int, default=24)
    ap.add_argument("--held-out", type=int, default=24)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--turns", default="first", choices=TURNS,
                    help="multi-turn prompts: first turns only, or every turn in order")
    ap.add_argument("--categories", default=None,
                    help="comma-separated categories to keep (e.g. MT-bench's eight)")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    target = load_model("default")
    rows: list[dict] = []
    for workload in args.workloads.split(","):
        more = run_workload(target, workload.strip(), args)
        rows += more
        with pd.option_context("display.width", 250, "display.max_columns", 30,
                               "display.max_colwidth", 70):
            print(pd.DataFrame(more).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
            print(flush=True)
        if args.csv:
            pd.DataFrame(rows).to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
