"""Per-category specialists against one drafter trained on every category, on the
default model: does each category's own drafter beat the general one there?

1. `autotune train-draft --per-category --kind KIND --categories C --minutes M` on the
   search part of the workload (split as `autotune search` splits it), unless the
   folder is already there: one member per category and `all`, each trained M minutes
   (so a specialist sees M minutes of its category, `all` M minutes of every category).
2. K chosen on search-split prompts only (drafter=all, a small grid).
3. On held-out prompts (the validation part: never trained on, never selected on), two
   arms against one interleaved AR baseline, repeats pooled: `drafter=all` and
   `drafter=routed` (each prompt drafted by its own category's specialist), at that K.
   Per category: τ (mean tokens per round, not a timing) and the paired speedup with
   its 90% interval, for both arms.

Goal, printed as PASS/FAIL per category: the specialist's τ above `all`'s on
the category it was trained for (and its speedup, where the intervals allow a call).

Usage: python bench/per_category_drafters.py [--kind eagle] [--minutes 3]
       [--categories translation,math_reasoning,qa] [--heldout-per-category 8]
       [--max-new-tokens 64] [--repeats 1] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _spec_bench import spec_bench

from autotune.schema.config import config_from_mapping
from autotune.measure.measurement import measure_arms
from autotune.models.loading import load_model
from autotune.models.trained import load_draft
from autotune.workloads.prompts import load_workload, round_robin, split_workload

ROOT = Path(__file__).resolve().parents[1]
K_GRID = (2, 3, 4)


def train(args: argparse.Namespace, folder: Path) -> float | None:
    """Run train-draft --per-category unless `folder` is complete; wall seconds."""
    if (folder / "drafters.json").is_file():
        return None
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autotune.cli.main", "train-draft", "--kind", args.kind,
                    "--per-category", "--categories", args.categories,
                    "--minutes", str(args.minutes), "--workload", args.workload,
                    "--validation", str(args.validation), "--seed", str(args.seed),
                    "--max-new-tokens", str(args.train_new_tokens), "--out", str(folder)],
                   cwd=ROOT, check=True)
    return time.perf_counter() - start


def line(cat: dict[str, Any] | None) -> str:
    if not cat:
        return "–"
    low, high = cat.get("speedup_ci90") or cat.get("ci90") or (float("nan"), float("nan"))
    return (f"τ {cat.get('mean_accepted_tokens') or 0:.2f}  {cat['speedup']:.3f}x "
            f"[{low:.3f}, {high:.3f}]")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", default="eagle")
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--categories", default="translation,math_reasoning,qa")
    p.add_argument("--workload", default=None,
                   help="Spec-Bench question.jsonl (default: $AUTOTUNE_SPEC_BENCH)")
    p.add_argument("--validation", type=float, default=0.4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--select-prompts", type=int, default=6)
    p.add_argument("--heldout-per-category", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--train-new-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--work", default=str(ROOT / "reports" / "bench_per_category"))
    args = p.parse_args()
    args.workload = str(spec_bench(args.workload))
    categories = [c for c in args.categories.split(",") if c]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    folder = work / f"{args.kind}_set"
    wall = train(args, folder)
    index = json.loads((folder / "drafters.json").read_text())
    trained = {name: json.loads((folder / sub / "drafter.json").read_text())["training"]
               for name, sub in index["members"].items()}
    print(f"train-draft --per-category wall {wall if wall is None else round(wall)} s", flush=True)
    for name, t in trained.items():
        print(f"  member {name:16s} {t['steps']:4d} steps in {t['seconds']:.0f} s, held-out "
              f"top-1 {t['heldout_top1']:.3f} over {t['heldout_positions']} positions",
              flush=True)

    search_part, held_part = split_workload(
        load_workload(args.workload, categories), args.validation, args.seed)
    select = round_robin(search_part, args.select_prompts)
    held = round_robin(held_part, args.heldout_per_category * len(categories))
    target = load_model("default", device="cpu", dtype="float32")
    draft = load_draft(str(folder), target)

    grid = {f"k={k}": config_from_mapping({"method": args.kind, "k": k, "drafter": "all"})
            for k in K_GRID}
    chosen = measure_arms(target, grid, select, args.max_new_tokens, draft=draft)
    pick = max(chosen, key=lambda name: chosen[name].summary()["speedup"])
    k = grid[pick].k
    print(f"K chosen on {len(select)} search-split prompts: {pick} "
          f"({chosen[pick].summary()['speedup']:.3f}x)", flush=True)

    arms = {d: config_from_mapping({"method": args.kind, "k": k, "drafter": d})
            for d in ("all", "routed")}
    final = measure_arms(target, arms, held, args.max_new_tokens, repeats=args.repeats,
                         seed=1, draft=draft)
    summaries = {name: m.summary() for name, m in final.items()}
    print(f"\nheld-out: {len(held)} validation-split prompts x {args.repeats}, "
          f"{args.max_new_tokens} new tokens, {args.kind} k={k}", flush=True)
    for name, s in summaries.items():
        print(f"  {name:7s} overall {line(s)}  lossless {s.get('lossless')}", flush=True)
    results: dict[str, Any] = {"k": k, "training": trained, "train_wall_s": wall,
                               "overall": {n: {key: s.get(key) for key in (
                                   "speedup", "speedup_ci90", "mean_accepted_tokens",
                                   "lossless")} for n, s in summaries.items()},
                               "by_category": {}}
    wins = 0
    for category in categories:
        general = (summaries["all"].get("by_category") or {}).get(category)
        own = (summaries["routed"].get("by_category") or {}).get(category)
        ok = bool(general and own and own["mean_accepted_tokens"] > general["mean_accepted_tokens"])
        wins += ok
        print(f"  {category:16s} all: {line(general)}   specialist: {line(own)}   "
              f"{'PASS' if ok else 'FAIL'}", flush=True)
        results["by_category"][category] = {"all": general, "specialist": own, "pass": ok}
    print(f"{'PASS' if wins == len(categories) else 'FAIL'}: specialists beat the general "
          f"drafter's τ on {wins} of {len(categories)} categories they were trained for",
          flush=True)
    (work / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"results: {work / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
