"""Best draft tree against best chain at the same budget of drafted tokens.

On the default model and real prompts, for each budget B of drafted tokens per round:
  chains  k in CHAIN_KS with k <= B (fixed policy: exactly k drafted per round)
  trees   EAGLE-2 dynamic trees, width w x depth d, keeping tree_tokens = B nodes
          (only shapes that draft at least B nodes before the rerank)
Each candidate is measured by `autotune.measure.measurement.measure` (the project's one timing
path: untimed warm-up, device sync, perf_counter, tokens as generated, the AR baseline
interleaved prompt by prompt in the same process), greedy, float32, so every run is
also checked lossless. The table gives, per budget, the best chain and the best tree by
speedup over their own interleaved baselines, with τ (tokens per round), ms/token and
the verify pass size; the last column is the ratio tree / chain of those speedups.

Before the candidates the target's forward cost for n tokens in one pass is printed
(autotune.measure.profile), which is what decides whether verifying B + 1 tokens is nearly as
cheap as verifying one on this hardware.

Drafter: by default a separate draft model, the default model's first D layers
(bench/_draft.py); `--method layer_skip --set attn_skip=... --set mlp_skip=...` or
`--method sorted_exit --set exits=...` use the target's own layers.

Usage: python bench/tree_vs_chain.py [--budgets 4,8,16] [--widths 2,3,4]
         [--depths 2,3,4,6,8] [--prompts 4] [--max-new-tokens 48] [--draft-layers 8]
         [--method draft_model] [--set key=value ...] [--device cpu] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _draft import truncated_draft  # noqa: E402
from _spec_bench import workload_or_spec_bench  # noqa: E402

from autotune.schema.config import (  # noqa: E402
    DecodeConfig,
    config_from_mapping,
    parse_assignments,
)
from autotune.measure.measurement import measure  # noqa: E402
from autotune.models.loading import load_model  # noqa: E402
from autotune.workloads.prompts import load_workload  # noqa: E402

CHAIN_KS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _row(summary: dict) -> dict:
    keys = ("speedup", "latency_ms_per_token", "baseline_latency_ms_per_token",
            "mean_accepted_tokens", "mean_verified_tokens", "lossless", "depth_acceptance")
    return {k: summary.get(k) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="4,8,16")
    parser.add_argument("--widths", default="2,3,4")
    parser.add_argument("--depths", default="2,3,4,6,8")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--draft-layers", type=int, default=8)
    parser.add_argument("--method", default="draft_model",
                        choices=("draft_model", "layer_skip", "sorted_exit"))
    parser.add_argument("--set", dest="assignments", action="append", default=[])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None, help="write every measurement here")
    args = parser.parse_args()

    target = load_model("default", device=args.device, dtype="float32")
    draft = None
    if args.method == "draft_model":
        folder = Path(tempfile.mkdtemp(prefix="autotune-draft-"))
        draft = truncated_draft(target, args.draft_layers, folder, args.device, "float32")
    base = config_from_mapping({"method": args.method, **parse_assignments(args.assignments)})
    source = workload_or_spec_bench()
    prompts = load_workload(source, limit=args.prompts)
    print(f"model {target.name} on {target.device}; drafter {args.method}"
          f"{' (' + draft.name + ')' if draft else ''}; {len(prompts)} prompts x "
          f"{args.max_new_tokens} tokens, greedy float32", flush=True)

    try:
        from autotune.measure.profile import forward_cost_profile
        profile = forward_cost_profile(target)
        one = profile["points"][0]["ms"]
        print("target forward cost, n tokens in one pass: " + ", ".join(
            f"{p['tokens']}:{p['ms']:.1f}ms ({p['ms'] / one:.2f}x)" for p in profile["points"]),
            flush=True)
    except ImportError:
        profile = None

    records = []

    def run(config: DecodeConfig, label: str) -> dict:
        summary = measure(target, config, prompts, args.max_new_tokens, draft=draft).summary()
        row = {"label": label, "config": config.to_dict(), **_row(summary)}
        records.append(row)
        print(f"  {label:<24} speedup {row['speedup']:.3f}  {row['latency_ms_per_token']:.1f} "
              f"ms/tok (AR {row['baseline_latency_ms_per_token']:.1f})  tau "
              f"{row['mean_accepted_tokens']:.2f}  verify {row['mean_verified_tokens']:.1f}  "
              f"lossless {row['lossless']}", flush=True)
        return row

    results = []
    chain_rows: dict[int, dict] = {}        # a chain is measured once, for every budget
    for budget in _ints(args.budgets):
        print(f"budget {budget} drafted tokens per round", flush=True)
        for k in CHAIN_KS:
            if k <= budget and k not in chain_rows:
                chain_rows[k] = run(config_from_mapping({"k": k, "exit_policy": "fixed"}, base),
                                    f"chain k={k}")
        chains = [row for k, row in chain_rows.items() if k <= budget]
        trees = []
        for width in _ints(args.widths):
            for depth in _ints(args.depths):
                tree = config_from_mapping({"tree_width": width, "tree_depth": depth,
                                            "tree_tokens": budget, "exit_policy": "fixed"}, base)
                if depth > budget or tree.shape.pool_size < budget:
                    continue
                trees.append(run(tree, f"tree w={width} d={depth} t={budget}"))
        best_chain = max(chains, key=lambda r: r["speedup"] or 0.0)
        best_tree = max(trees, key=lambda r: r["speedup"] or 0.0) if trees else None
        results.append((budget, best_chain, best_tree))

    print("\n| budget | best chain | tau | ms/tok | speedup | best tree | tau | verify | ms/tok "
          "| speedup | tree/chain |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for budget, chain, tree in results:
        tree_cells = ("-",) * 6 if tree is None else (
            tree["label"].removeprefix("tree "), f"{tree['mean_accepted_tokens']:.2f}",
            f"{tree['mean_verified_tokens']:.1f}", f"{tree['latency_ms_per_token']:.1f}",
            f"{tree['speedup']:.3f}", f"{tree['speedup'] / chain['speedup']:.3f}")
        print(f"| {budget} | {chain['label'].removeprefix('chain ')} | "
              f"{chain['mean_accepted_tokens']:.2f} | {chain['latency_ms_per_token']:.1f} | "
              f"{chain['speedup']:.3f} | " + " | ".join(tree_cells) + " |")
    if not all(r["lossless"] for r in records):
        print("WARNING: some runs were not lossless: "
              + ", ".join(r["label"] for r in records if not r["lossless"]))
    if args.json:
        Path(args.json).write_text(json.dumps({"profile": profile, "runs": records}, indent=1))


if __name__ == "__main__":
    main()
