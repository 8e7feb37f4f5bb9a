"""Per-batch-size K against every fixed K, at batch sizes 1..16.

On the default model (float32) and the Spec-Bench prompts split by category (seeded)
into a tune part and a bench part that the tuning never sees:

1. Tune: `autotune.search.schedule.tune` for prompt lookup (ngram, n-gram sizes 1..3) over the
   candidate K values at every batch size, each measured with the batched decoder
   against batched AR on the tune part (no held-out step inside: the bench part is the
   held-out check). The best single K at batch size 1 is the K of highest speedup at
   B = 1 there.
2. Bench: on the bench part, at every batch size, batches of B prompts decode with
   batched AR, every fixed K, and vLLM's documented n-gram default (K = 5, n = 5..5),
   all arms interleaved per batch (the order rotating), in one process. Each arm's
   speedup is the paired tokens/s ratio against batched AR over the same batches, with
   a 90% bootstrap interval over batches (`autotune.measure.paired`). The schedule's figure at
   B is the arm of its chosen K (batched AR where K = 0).
3. Overhead: batched AR at B = 8 against HF `generate` with batch 8 (left-padded,
   greedy) on the same bench prompts, interleaved, tokens counted per row up to its
   EOS; both as prefill + decode wall time.

Goals: the schedule is >= every fixed K at every B within noise and never below AR;
its mean gain over the best single K across B is printed. Run it alone on the machine:
it times decoding.

    python bench/batch_schedule.py [--batch-sizes 1,2,4,8,16] [--ks 1,2,3,4,6]
        [--max-new-tokens 32] [--tune-prompts 16] [--bench-prompts 32] [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from _spec_bench import spec_bench

from autotune.decoding.batched import BatchedDecoder
from autotune.schema.config import DecodeConfig
from autotune.measure import paired
from autotune.measure.batched import measure_batched
from autotune.measure.measurement import WARMUP_TOKENS, Clock
from autotune.models.loading import LoadedModel, load_model
from autotune.search.schedule import parse_batch_sizes, parse_ks, tune
from autotune.workloads.prompts import (
    Prompt,
    encode_prompt,
    load_workload,
    round_robin,
    split_workload,
)

NGRAM = DecodeConfig(method="ngram", ngram_min=1, ngram_max=3)
VLLM_DEFAULT = DecodeConfig(method="ngram", k=5, ngram_min=5, ngram_max=5)


def split(tune_n: int, bench_n: int) -> tuple[list[Prompt], list[Prompt]]:
    """Disjoint tune and bench prompts, each spread over the categories."""
    prompts = load_workload(str(spec_bench()))
    tune_part, bench_part = split_workload(prompts, 0.5, 0)
    return round_robin(tune_part, tune_n), round_robin(bench_part, bench_n)


def bench_arms(target: LoadedModel, arms: dict[str, DecodeConfig], prompts: list[Prompt],
               size: int, max_new: int) -> dict[str, dict[str, Any]]:
    """Every arm on the same batches, interleaved, paired against batched AR."""
    clock = Clock(target.device)
    decoders = {name: BatchedDecoder(target, cfg) for name, cfg in arms.items()}
    ar = BatchedDecoder(target, DecodeConfig())
    batches = [prompts[i:i + size] for i in range(0, len(prompts) - size + 1, size)]
    encoded = [[encode_prompt(target.tokenizer, p) for p in b] for b in batches]
    for decoder in (ar, *decoders.values()):
        decoder.generate(encoded[0], WARMUP_TOKENS, clock)
    pairs: dict[str, list[paired.PromptPair]] = {name: [] for name in arms}
    lossless: dict[str, bool] = {name: True for name in arms}
    names = list(arms)
    for index, ids in enumerate(encoded):
        order = names[index % len(names):] + names[:index % len(names)]
        base = ar.generate(ids, max_new, clock)
        outs = {name: decoders[name].generate(ids, max_new, clock) for name in order}
        for name, out in outs.items():
            rounds = [t for g in out.rows for t in g.rounds]
            pairs[name].append(paired.PromptPair(
                str(index), "batch", base.decode_s, base.decoded, out.decode_s, out.decoded,
                rounds=len(rounds), emitted=sum(t.emitted for t in rounds)))
            lossless[name] &= [g.tokens for g in out.rows] == [g.tokens for g in base.rows]
    result = {}
    for name, arm_pairs in pairs.items():
        ci = paired.interval(arm_pairs)
        base_s = sum(p.baseline_s for p in arm_pairs)
        cand_s = sum(p.candidate_s for p in arm_pairs)
        result[name] = {
            "speedup": paired.speedup(arm_pairs), "ci90": list(ci) if ci else None,
            "tokens_per_s": sum(p.candidate_tokens for p in arm_pairs) / cand_s,
            "ar_tokens_per_s": sum(p.baseline_tokens for p in arm_pairs) / base_s,
            "tau": paired.tau(arm_pairs), "lossless": lossless[name], "batches": len(batches)}
    return result


def hf_overhead(target: LoadedModel, prompts: list[Prompt], size: int, max_new: int
                ) -> dict[str, Any]:
    """Batched AR (ours) against HF generate on padded batches of `size`, interleaved."""
    tokenizer, model = target.tokenizer, target.hf_model
    eos = target.eos_token_ids
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
    ours = BatchedDecoder(target, DecodeConfig())
    batches = [prompts[i:i + size] for i in range(0, len(prompts) - size + 1, size)]
    encoded = [[encode_prompt(tokenizer, p) for p in b] for b in batches]

    def hf_generate(ids: list[list[int]], new: int) -> int:
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=new, pad_token_id=pad)
        tokens = 0
        for row in out[:, width:].tolist():
            for token in row:
                tokens += 1
                if token in eos:
                    break
        return tokens

    hf_generate(encoded[0], WARMUP_TOKENS)
    ours.generate(encoded[0], WARMUP_TOKENS, time.perf_counter)
    ours_s = ours_tokens = hf_s = hf_tokens = 0.0
    for index, ids in enumerate(encoded):
        for arm in (("ours", "hf") if index % 2 == 0 else ("hf", "ours")):
            start = time.perf_counter()
            if arm == "ours":
                out = ours.generate(ids, max_new, time.perf_counter)
                ours_s += time.perf_counter() - start
                ours_tokens += sum(len(g.tokens) for g in out.rows)
            else:
                hf_tokens += hf_generate(ids, max_new)
                hf_s += time.perf_counter() - start
    return {"batch_size": size, "batches": len(batches),
            "ours_tokens_per_s": ours_tokens / ours_s, "hf_tokens_per_s": hf_tokens / hf_s,
            "ratio": (ours_tokens / ours_s) / (hf_tokens / hf_s)}


def _fmt(arm: dict[str, Any]) -> str:
    ci = arm.get("ci90")
    text = f"{arm['speedup']:.3f}x" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
    return text + ("" if arm.get("lossless", True) else " LOSSY")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="1,2,4,8,16")
    parser.add_argument("--ks", default="1,2,3,4,6")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--tune-prompts", type=int, default=16)
    parser.add_argument("--bench-prompts", type=int, default=32)
    parser.add_argument("--out", default=None, help="write every figure as JSON")
    args = parser.parse_args()
    sizes, ks = parse_batch_sizes(args.batch_sizes), parse_ks(args.ks)
    target = load_model("default", device="cpu", dtype="float32")
    tune_prompts, bench_prompts = split(args.tune_prompts, args.bench_prompts)
    began = time.perf_counter()

    def measure(cfg: DecodeConfig, prompts: list[Prompt], size: int) -> dict[str, Any]:
        return measure_batched(target, cfg, prompts, size, args.max_new_tokens).summary()

    schedule = tune(dataclasses.replace(NGRAM, k=ks[0]), sizes, ks, tune_prompts, [],
                    measure, progress=lambda line: print(f"  tune {line}", flush=True))
    chosen = {p["batch_size"]: p["k"] for p in schedule["points"] if p["chosen"]}
    at_one = [p for p in schedule["points"] if p["batch_size"] == sizes[0] and p["k"]]
    best_single = max(at_one, key=lambda p: p["speedup"] or 0.0)["k"]
    print(f"schedule (tune part): {schedule['ranges']}; best single K at B={sizes[0]}: "
          f"{best_single}", flush=True)

    arms = {f"K={k}": dataclasses.replace(NGRAM, k=k) for k in ks}
    arms["vLLM default"] = VLLM_DEFAULT
    table: dict[int, dict[str, Any]] = {}
    for size in sizes:
        table[size] = bench_arms(target, arms, bench_prompts, size, args.max_new_tokens)
        k = chosen[size]
        table[size]["schedule"] = (table[size][f"K={k}"] if k else
                                   {"speedup": 1.0, "ci90": None, "lossless": True,
                                    "tokens_per_s": table[size][f"K={ks[0]}"]["ar_tokens_per_s"]})
        row = table[size]
        print(f"B={size:>2} AR {row[f'K={ks[0]}']['ar_tokens_per_s']:.1f} tok/s | schedule "
              f"K={k}: {_fmt(row['schedule'])} | best single K={best_single}: "
              f"{_fmt(row[f'K={best_single}'])} | vLLM default: {_fmt(row['vLLM default'])} | "
              + ", ".join(f"{name} {_fmt(row[name])}" for name in arms if name.startswith("K=")),
              flush=True)
    gains = [table[s]["schedule"]["speedup"] / table[s][f"K={best_single}"]["speedup"]
             for s in sizes]
    print(f"schedule / best single K, mean over B: {statistics.fmean(gains):.3f}x "
          f"(per B: {', '.join(f'{g:.3f}' for g in gains)})")
    overhead = None
    if len(bench_prompts) >= 8:
        overhead = hf_overhead(target, bench_prompts, 8, args.max_new_tokens)
        print(f"batched AR at B=8: ours {overhead['ours_tokens_per_s']:.1f} tok/s, HF "
              f"generate (padded) {overhead['hf_tokens_per_s']:.1f} tok/s: "
              f"{overhead['ratio']:.3f}x (prefill + decode wall time)")
    print(f"took {time.perf_counter() - began:.0f} s", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps({
            "args": vars(args), "schedule": schedule, "best_single_k": best_single,
            "bench": {str(k): v for k, v in table.items()}, "gains": gains,
            "overhead": overhead}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
