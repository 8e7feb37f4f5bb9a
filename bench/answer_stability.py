"""Does the README's main job give the same answer on different splits?

Runs `autotune search --max-new-tokens 32` (the README's main job, default workload and
validation) once per `--seeds` value, each in a fresh run folder (each seed holds out
another part of the workload and measures another random sample of it), one after the
other, and prints per seed: the wall time, the decision, the answer's config and its
held-out speedup with the 90% interval, the estimator, how many prompts the race
measured of how many in the pool, how many categories got an interval, and the race's
stop. Then: whether every decision is the same, and whether the answers' intervals
overlap (all of them share a point).

Usage: python bench/answer_stability.py [--seeds 0,1,2] [--out DIR] [-- extra search flags]
One timing job at a time: nothing else on the machine while it runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", default=None, help="keep the run folders here")
    ap.add_argument("extra", nargs="*", help="more `autotune search` flags (after --)")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="stability-"))
    rows = []
    for seed in seeds:
        run = root / f"seed{seed}"
        command = ["autotune", "search", "--max-new-tokens", "32", "--seed", str(seed),
                   "--out", str(run), *args.extra]
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - began
        if done.returncode != 0:
            raise SystemExit(f"seed {seed}: exit {done.returncode}: "
                             f"{done.stderr.strip().splitlines()[-1:]}")
        best = json.loads((run / "best.json").read_text())
        v = best.get("validation") or {}
        winner = next((f for f in v.get("finalists", []) if f.get("trial") == v.get("winner")),
                      None)
        leader = winner or max(v.get("finalists", []), key=lambda f: f.get("speedup") or 0,
                               default={})
        cats = leader.get("by_category") or {}
        rows.append({
            "seed": seed, "wall": f"{wall / 60:.1f} min", "decision": v.get("decision"),
            "config": leader.get("label"), "speedup": leader.get("speedup"),
            "ci90": leader.get("ci90"), "estimator": v.get("estimator"),
            "measured / pool": f"{v.get('prompts')} / {v.get('pool_prompts')}",
            "categories with an interval": f"{sum(bool(c.get('ci90')) for c in cats.values())}"
                                           f" / {len(cats)}",
            "race": (v.get("race") or {}).get("stopped"),
        })
        print(f"seed {seed}: {rows[-1]}", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    decisions = {r["decision"] for r in rows}
    intervals = [r["ci90"] for r in rows if r["ci90"]]
    overlap = (bool(intervals) and max(ci[0] for ci in intervals)
               <= min(ci[1] for ci in intervals))
    print(f"\nsame decision on every seed: {len(decisions) == 1} ({', '.join(map(str, decisions))})"
          f"; intervals share a point: {overlap}; run folders: {root}")


if __name__ == "__main__":
    main()
