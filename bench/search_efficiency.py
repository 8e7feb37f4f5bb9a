"""How many evaluations each sampler needs to come within 3% of the optimum.

1. Enumerate a reduced space small enough to measure every point once with the real
   decoder on the default model (`bench/spaces/ngram_grid.yaml`: n-gram k × lookup sizes
   × exit policy), through the product's own path: the space, the latency objective and
   `measure` (baseline interleaved). That table gives the optimum.
2. Run each sampler with 5 seeds against the table (a lookup, no re-measuring, so every
   sampler sees the same noisy landscape): the number of evaluations until a trial within
   3% of the optimum, capped at the grid size. Infeasible points (ngram_min > ngram_max)
   are free and not counted, as in the product.

Goal: the best sampler's median is <= 10% of the grid's size.

Usage: python bench/search_efficiency.py [--prompts 3] [--max-new-tokens 24]
       [--seeds 5] [--tolerance 0.03] [--table FILE]
       (FILE caches the enumeration as CSV and is reused if present)
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import torch

from autotune.models.loading import load_model
from autotune.search.objectives import EvalContext, load_objective
from autotune.search.samplers import make_sampler
from autotune.space import InfeasibleConfig, load_space
from autotune.workloads.prompts import load_workload

HERE = Path(__file__).resolve().parent
SPACE = HERE / "spaces" / "ngram_grid.yaml"
SAMPLERS = ("tpe", "gp", "cmaes", "qmc", "random", "bayes_opt")
TOLERANCE = 0.03


def key(config) -> str:
    return json.dumps([config.k, config.ngram_min, config.ngram_max, config.exit_policy])


def enumerate_space(bound, objective, context) -> pd.DataFrame:
    grid = bound.grid()
    names = sorted(grid)
    rows, seen = [], set()
    points = list(itertools.product(*(grid[n] for n in names)))
    for i, values in enumerate(points):
        try:
            config = bound.params_to_config(dict(zip(names, values)))
        except InfeasibleConfig:
            continue
        if key(config) in seen:
            continue
        seen.add(key(config))
        metrics = objective.evaluate(context, config)
        rows.append({"key": key(config), "latency_ms_per_token": metrics["latency_ms_per_token"],
                     "speedup": metrics["speedup"], "lossless": metrics["lossless"]})
        print(f"[{len(rows)}] {key(config)} {metrics['latency_ms_per_token']:.2f} ms/tok "
              f"speedup {metrics['speedup']:.3f}", file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def evaluations_to_target(sampler: str, seed: int, bound, table: dict[str, float],
                          target: float, cap: int) -> int:
    study = optuna.create_study(direction="minimize", sampler=make_sampler(
        sampler, seed, 1, bound.grid))
    evaluations = 0
    hit: list[int] = []

    def objective(trial: optuna.Trial) -> float:
        nonlocal evaluations
        try:
            config = bound.suggest(trial)
        except InfeasibleConfig:
            raise optuna.TrialPruned() from None
        evaluations += 1
        value = table[key(config)]
        if value <= target and not hit:
            hit.append(evaluations)
        return value

    while not hit and evaluations < cap:
        study.optimize(objective, n_trials=1)
        if len(study.trials) > 5 * cap:         # a sampler stuck on infeasible points
            break
    return hit[0] if hit else cap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--table", default=None, help="CSV cache of the enumeration")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE,
                        help="how close to the optimum counts as found (fraction)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)

    space = load_space(str(SPACE))
    objective = load_objective("latency")
    table_path = Path(args.table) if args.table else None
    target_model = None
    if table_path is not None and table_path.exists():
        frame = pd.read_csv(table_path)
        bound = space.bind(30, None)
    else:
        target_model = load_model("default", "cpu", "float32")
        bound = space.bind(target_model.n_layers, None)
        prompts = load_workload("builtin", None, args.prompts)
        context = EvalContext(target=target_model, draft=None, prompts=prompts,
                              max_new_tokens=args.max_new_tokens, seed=0, memo={})
        began = time.monotonic()
        frame = enumerate_space(bound, objective, context)
        print(f"enumerated {len(frame)} points in {time.monotonic() - began:.0f} s "
              f"({args.prompts} prompts x {args.max_new_tokens} tokens, torch threads "
              f"{torch.get_num_threads()})")
        if table_path is not None:
            frame.to_csv(table_path, index=False)
    table = dict(zip(frame["key"], frame["latency_ms_per_token"]))
    best = min(table.values())
    tolerance = args.tolerance
    near = sum(v <= best * (1 + tolerance) for v in table.values())
    size = len(table)
    print(f"grid: {size} feasible points; optimum {best:.2f} ms/token "
          f"({frame.loc[frame.latency_ms_per_token.idxmin(), 'key']}); "
          f"{near} points within {tolerance:.0%}")
    print(f"{'sampler':<10} {'median evals':>12} {'% of grid':>9}   per seed")
    results = {}
    for name in SAMPLERS:
        counts = [evaluations_to_target(name, seed, bound, table, best * (1 + tolerance), size)
                  for seed in range(args.seeds)]
        median = statistics.median(counts)
        results[name] = median
        print(f"{name:<10} {median:>12.1f} {100 * median / size:>8.1f}%   {counts}")
    winner = min(results, key=results.get)
    print(f"best sampler: {winner}, {results[winner]:.1f} evaluations = "
          f"{100 * results[winner] / size:.1f}% of the grid (goal <= 10%)")


if __name__ == "__main__":
    main()
