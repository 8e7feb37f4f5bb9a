"""Does the prediction-powered validation decide honestly? Coverage and power against
the classical (measured-only) validation, on the default model and Spec-Bench.

What it does, once (minutes; one timing job, nothing else on the machine):
1. a universe of `--universe` Spec-Bench prompts (round-robin over its categories):
   every prompt's reference continuation decoded (cached) and every config replayed on
   it (`autotune.replay.Replayer`, cost parts measured first, as the search does);
2. `--measured` of them, a seeded random subset, measured for real: the AR baseline
   and every config interleaved per prompt (`measure.measure_arms`, one pass).

Then, by resampling those figures (no further timing), `--draws` validations per
config, each as `autotune search` runs it: a pool of `--pool` prompts whose
`--sample` measured prompts are a simple random sample of it (drawn from the measured
subset; the rest of the pool from the unmeasured prompts: the universe is
exchangeable, so the sample is a random sample of the pool).

- coverage: how often the 90% interval holds the figure re-measured on the measured
  prompts the validation did not use. That "truth" is itself measured on a finite set,
  so the raw rate understates coverage; the rate is also given against the truth's
  own noise (the interval widened by the truth's bootstrap standard error in
  quadrature), which is what a calibrated interval should reach. Both are printed for
  the classical interval on the same draws.
- power: the prediction-powered interval's width against the classical interval's at
  the same wall time: the classical validation measures as many more prompts as the
  pool's reference decodes cost (`wall time`: measured prompt and reference decode
  seconds, from this run).

Usage: python bench/validation_power.py [--universe 240] [--measured 80] [--pool 120]
       [--sample 16] [--max-new-tokens 32] [--draws 300] [--csv FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _spec_bench import workload_or_spec_bench  # noqa: E402

from autotune.schema.config import DecodeConfig  # noqa: E402
from autotune.measure import paired, ppi  # noqa: E402
from autotune.measure.measurement import measure_arms  # noqa: E402
from autotune.models.loading import load_model  # noqa: E402
from autotune.replay.run import Replayer  # noqa: E402
from autotune.workloads.prompts import load_workload, round_robin  # noqa: E402

CONFIGS = {
    "ngram k3 n3-5 heuristic": dict(method="ngram", k=3, ngram_min=3, ngram_max=5,
                                    exit_policy="heuristic"),
    "ngram k5 n5 (vLLM default)": dict(method="ngram", k=5, ngram_min=5, ngram_max=5),
    "ngram k8 n2-4": dict(method="ngram", k=8, ngram_min=2, ngram_max=4),
}


def _width(ci: tuple[float, float] | list[float] | None) -> float:
    return ci[1] - ci[0] if ci else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default=None)
    ap.add_argument("--universe", type=int, default=240)
    ap.add_argument("--measured", type=int, default=80)
    ap.add_argument("--pool", type=int, default=120)
    ap.add_argument("--sample", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    if not args.sample < args.measured <= args.universe or args.pool > args.universe:
        raise SystemExit("need --sample < --measured <= --universe and --pool <= --universe")

    target = load_model("default")
    universe = round_robin(load_workload(workload_or_spec_bench(args.workload), None),
                           args.universe)
    configs = {name: DecodeConfig(**params).validate() for name, params in CONFIGS.items()}

    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        replayer = Replayer(target, None, universe, args.max_new_tokens,
                            Path(folder) / "parts.json")
    setup_s = time.perf_counter() - began
    predicted = {name: {run.prompt_id: run.pair() for run in replayer.replay(c).runs}
                 for name, c in configs.items()}

    rng = np.random.default_rng(args.seed)
    chosen = sorted(rng.choice(len(universe), args.measured, replace=False))
    measured_prompts = [universe[i] for i in chosen]
    print(f"measuring {len(configs)} configs and the AR baseline on {len(measured_prompts)} "
          "prompts ...", file=sys.stderr, flush=True)
    began = time.perf_counter()
    runs = measure_arms(target, configs, measured_prompts, args.max_new_tokens,
                        seed=args.seed)
    measure_s = time.perf_counter() - began
    measured = {name: {run.prompt_id: run.pair() for run in m.runs} for name, m in runs.items()}

    # Wall time: one measured prompt (every arm) against one reference decode (an AR
    # decode: what the baseline arm costs on that prompt).
    per_prompt_s = measure_s / len(measured_prompts)
    baseline_runs = [run.baseline for run in next(iter(runs.values())).runs]
    reference_s = float(np.mean([g.prefill_s + g.decode_s for g in baseline_runs]))
    extra = int(round((args.pool - args.sample) * reference_s / per_prompt_s))
    same_time = min(args.sample + extra, args.measured - 2)
    print(f"setup (references + parts for {len(universe)} prompts) {setup_s:.0f} s; "
          f"measuring {measure_s:.0f} s ({per_prompt_s:.2f} s per prompt, every arm); one "
          f"reference decode ~{reference_s:.2f} s; at the same wall time the classical "
          f"validation measures {args.sample} + {extra} = {args.sample + extra} prompts"
          + (f" (capped at {same_time}: --measured)" if same_time < args.sample + extra else ""))

    ids_measured = [p.prompt_id for p in measured_prompts]
    ids_other = [p.prompt_id for p in universe if p.prompt_id not in set(ids_measured)]
    rows = []
    for name in configs:
        local = np.random.default_rng(args.seed + 1)
        stats: dict[str, list[float]] = {k: [] for k in (
            "ppi_hit", "ppi_hit_adj", "cls_hit", "cls_hit_adj", "ppi_w", "cls_w",
            "cls_same_w", "lam")}
        for draw in range(args.draws):
            sample = list(local.choice(ids_measured, args.sample, replace=False))
            rest = list(local.choice(ids_other, args.pool - args.sample, replace=False))
            unused = [i for i in ids_measured if i not in set(sample)]
            truth_pairs = [measured[name][i] for i in unused]
            truth = paired.speedup(truth_pairs)
            truth_ci = paired.interval(truth_pairs)
            truth_se = _width(truth_ci) / (2 * 1.645)
            m_pairs = [measured[name][i] for i in sample]
            p_pairs = [predicted[name][i] for i in sample + rest]
            est = ppi.estimate(m_pairs, p_pairs, seed=draw)
            classical = est.measured_ci90
            same = list(local.choice(ids_measured, same_time, replace=False))
            same_ci = paired.interval([measured[name][i] for i in same])

            def hits(ci: tuple[float, float] | None, centre: float | None) -> tuple[bool, bool]:
                if ci is None or centre is None or truth is None:
                    return False, False
                own_se = _width(ci) / (2 * 1.645)
                widened = 1.645 * float(np.hypot(own_se, truth_se))
                return ci[0] <= truth <= ci[1], abs(centre - truth) <= widened

            ppi_hit, ppi_adj = hits(est.ci90, est.speedup)
            cls_hit, cls_adj = hits(classical, est.measured_speedup)
            for key, value in (("ppi_hit", ppi_hit), ("ppi_hit_adj", ppi_adj),
                               ("cls_hit", cls_hit), ("cls_hit_adj", cls_adj),
                               ("ppi_w", _width(est.ci90)), ("cls_w", _width(classical)),
                               ("cls_same_w", _width(same_ci)), ("lam", est.lam)):
                stats[key].append(float(value))
        all_measured = list(measured[name].values())
        rows.append({
            "config": name,
            "speedup (all measured)": paired.speedup(all_measured),
            "predicted (all)": paired.speedup(list(predicted[name].values())),
            "ppi coverage": np.mean(stats["ppi_hit"]),
            "ppi coverage vs truth noise": np.mean(stats["ppi_hit_adj"]),
            "classical coverage": np.mean(stats["cls_hit"]),
            "classical coverage vs truth noise": np.mean(stats["cls_hit_adj"]),
            f"ppi width (n={args.sample}, N={args.pool})": np.median(stats["ppi_w"]),
            f"classical width (n={args.sample})": np.median(stats["cls_w"]),
            f"classical width, same wall time (n={same_time})": np.median(stats["cls_same_w"]),
            "width ratio, same wall time": (np.median(stats["ppi_w"])
                                            / np.median(stats["cls_same_w"])),
            "weight": np.median(stats["lam"]),
        })
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.T.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.csv:
        table.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
