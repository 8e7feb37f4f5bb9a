"""Trained drafters on the default model: training cost, agreement, τ and held-out speedup
against n-gram's best on the same prompts.

Per kind (eagle, medusa):
1. `autotune train-draft --kind KIND --minutes M` on the search part of the workload
   (split as `autotune search` splits it: --validation, --seed), unless the folder is
   already there; its wall time, and drafter.json's data/training seconds and held-out
   top-1 agreement (on training-split prompts kept out of training).
2. Selection on search-split prompts only: a small grid per method (n-gram, the head's
   chains and trees) measured with `measure_arms` against one interleaved AR baseline;
   the best speedup per method is its pick.
3. The picks measured again on held-out prompts (the search's validation part, never
   trained on nor selected on), n-gram and the head as two arms against one AR
   baseline, repeats pooled: speedup with its 90% interval, τ, losslessness, and per
   category.

Goals, printed as PASS/FAIL with the figures: an EAGLE-style head trained in
<= 20 minutes here gives τ >= 2 and a held-out speedup above n-gram's.

Usage: python bench/trained_drafters.py [--kinds eagle,medusa] [--minutes 10]
       [--select-prompts 16] [--heldout-prompts 24] [--max-new-tokens 64] [--repeats 2]
       [--work DIR] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from _spec_bench import spec_bench

from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.measure.measurement import measure_arms
from autotune.models.loading import load_model
from autotune.models.trained import load_draft
from autotune.workloads.prompts import load_workload, round_robin, split_workload

ROOT = Path(__file__).resolve().parents[1]

NGRAM_GRID = [dict(k=3, ngram_min=1, ngram_max=3), dict(k=5, ngram_min=1, ngram_max=3),
              dict(k=8, ngram_min=1, ngram_max=4), dict(k=5, ngram_min=5, ngram_max=5)]
HEAD_GRID = [dict(k=1), dict(k=2), dict(k=3), dict(k=4), dict(k=6),
             dict(tree_width=2, tree_depth=3, tree_tokens=6),
             dict(tree_width=3, tree_depth=4, tree_tokens=10)]


def train(kind: str, args: argparse.Namespace, folder: Path) -> float | None:
    """Run train-draft unless `folder` holds a drafter; its wall seconds (None: reused)."""
    if (folder / "drafter.json").is_file():
        return None
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autotune.cli.main", "train-draft", "--kind", kind,
                    "--minutes", str(args.minutes), "--workload", args.workload,
                    "--validation", str(args.validation), "--seed", str(args.seed),
                    "--max-new-tokens", str(args.train_new_tokens), "--out", str(folder)],
                   cwd=ROOT, check=True)
    return time.perf_counter() - start


def configs(method: str, grid: list[dict[str, Any]]) -> dict[str, DecodeConfig]:
    out = {}
    for knobs in grid:
        values = {"method": method, "exit_policy": "fixed", **knobs}
        config = config_from_mapping(values)
        out[f"{method} {config.shape.label()}" + (
            f" n={knobs['ngram_min']}..{knobs['ngram_max']}" if method == "ngram" else "")] = config
    return out


def figure(summary: dict[str, Any]) -> str:
    low, high = summary.get("speedup_ci90") or (float("nan"), float("nan"))
    tau = summary.get("mean_accepted_tokens") or 0.0
    return (f"{summary['speedup']:.3f}x [{low:.3f}, {high:.3f}]  τ {tau:.2f}"
            f"  lossless {summary.get('lossless')}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kinds", default="eagle,medusa")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--workload", default=None,
                   help="Spec-Bench question.jsonl (default: $AUTOTUNE_SPEC_BENCH)")
    p.add_argument("--validation", type=float, default=0.4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--select-prompts", type=int, default=16)
    p.add_argument("--heldout-prompts", type=int, default=24)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--train-new-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--work", default=str(ROOT / "reports" / "bench_trained"))
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    args.workload = str(spec_bench(args.workload))
    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    search_part, held_part = split_workload(load_workload(args.workload), args.validation,
                                            args.seed)
    select = round_robin(search_part, args.select_prompts)
    held = round_robin(held_part, args.heldout_prompts)
    print(f"selection on {len(select)} search-split prompts; held-out figures on "
          f"{len(held)} validation-split prompts x {args.repeats}", flush=True)
    target = load_model("default", device="cpu", dtype="float32")
    results: dict[str, Any] = {}
    for kind in [k for k in args.kinds.split(",") if k]:
        folder = work / kind
        wall = train(kind, args, folder)
        meta = json.loads((folder / "drafter.json").read_text())
        training = meta["training"]
        print(f"\n== {kind}: train-draft wall {wall if wall is None else round(wall)} s "
              f"(data {training['data_seconds']} s, training {training['seconds']} s, "
              f"{training['steps']} steps); held-out top-1 agreement "
              f"{training['heldout_top1']:.3f} over {training['heldout_positions']} positions",
              flush=True)
        draft = load_draft(str(folder), target)
        grid = {**configs("ngram", NGRAM_GRID), **configs(kind, HEAD_GRID)}
        chosen = measure_arms(target, grid, select, args.max_new_tokens, draft=draft)
        picks: dict[str, tuple[str, DecodeConfig]] = {}
        for name, measurement in chosen.items():
            summary = measurement.summary()
            print(f"  select  {name:28s} {figure(summary)}", flush=True)
            method = grid[name].method
            if method not in picks or summary["speedup"] > chosen[picks[method][0]].summary()["speedup"]:
                picks[method] = (name, grid[name])
        arms = {method: config for method, (_, config) in picks.items()}
        final = measure_arms(target, arms, held, args.max_new_tokens, repeats=args.repeats,
                             seed=1, draft=draft)
        row: dict[str, Any] = {"training": training, "train_wall_s": wall}
        for method, measurement in final.items():
            summary = measurement.summary()
            row[method] = {"pick": picks[method][0], **{k: summary.get(k) for k in (
                "speedup", "speedup_ci90", "mean_accepted_tokens", "lossless", "by_category")}}
            print(f"  held-out {picks[method][0]:27s} {figure(summary)}", flush=True)
            for category, cat in (summary.get("by_category") or {}).items():
                print(f"      {category:14s} {cat['speedup']:.3f}x  τ {cat['mean_accepted_tokens']:.2f}")
        results[kind] = row
        head, ngram = row[kind], row["ngram"]
        if kind == "eagle":
            minutes = ((wall if wall is not None else training["seconds"] + training["data_seconds"])
                       / 60)
            tau = head["mean_accepted_tokens"]
            ok = minutes <= 20 and tau >= 2 and head["speedup"] > ngram["speedup"]
            print(f"{'PASS' if ok else 'FAIL'}: eagle trained in {minutes:.1f} min (<= 20), "
                  f"τ {tau:.2f} (>= 2), held-out {head['speedup']:.3f}x vs n-gram's "
                  f"{ngram['speedup']:.3f}x", flush=True)
    (work / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nresults: {work / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
