"""Reference continuations one by one against in batches of rows (prints figures).

The replay tier decodes every search and held-out prompt's greedy continuation once; the
main job decodes about a hundred. This times `reference_continuations` with 1 row at a
time and with `--rows` rows per batch on the default model's Spec-Bench prompts,
alternating the two (median of `--repeats`), and counts prompts whose tokens differ (the
batched decoder's rows must each equal their own single-row decode).

    python bench/reference_decoding.py [--prompts 48] [--rows 8,16,32] [--repeats 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from autotune.decoding.reference import reference_continuations
from autotune.models.loading import load_model
from autotune.workloads.prompts import encode_prompt, load_workload


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--rows", default="8,16,32")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    target = load_model("default", device="cpu")
    prompts = load_workload("spec_bench", limit=args.prompts)
    ids = [encode_prompt(target.tokenizer, p) for p in prompts]
    lengths = sorted(len(i) for i in ids)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {len(ids)} prompts "
          f"of {lengths[0]}..{lengths[-1]} tokens (median {statistics.median(lengths)}), "
          f"{args.max_new_tokens} new tokens")
    single: list[float] = []
    times: dict[int, list[float]] = {int(r): [] for r in args.rows.split(",")}
    differing: dict[int, int] = {}
    for _ in range(args.repeats):
        start = time.perf_counter()
        one_by_one = reference_continuations(target, ids, args.max_new_tokens, batch_rows=1)
        single.append(time.perf_counter() - start)
        for rows in times:
            start = time.perf_counter()
            batched = reference_continuations(target, ids, args.max_new_tokens, batch_rows=rows)
            times[rows].append(time.perf_counter() - start)
            differing[rows] = sum(a != b for a, b in zip(one_by_one, batched))
    base = statistics.median(single)
    print(f"{'rows':>4}  {'seconds':>7}  {'speedup':>7}  prompts differing")
    print(f"{1:>4}  {base:7.1f}  {1.0:7.2f}  -")
    for rows, values in times.items():
        took = statistics.median(values)
        print(f"{rows:>4}  {took:7.1f}  {base / took:7.2f}  {differing[rows]}/{len(ids)}")


if __name__ == "__main__":
    main()
