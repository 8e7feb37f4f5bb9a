"""Block verification against token-by-token verification: accepted draft tokens per round.

On the default model (SmolLM2-135M-Instruct), sampled, a separate draft model (the
target's first D layers, bench/_draft.py) drafting a chain of K tokens, a few prompts of
the built-in workload, each run with several seeds. The same prompts, seeds and drafter
are decoded with `verify=token` (Leviathan rejection sampling) and `verify=block` (Sun et
al. 2024, autotune/decoding/verify.py `block_verify`), under autotune's rules (drafts
sampled from the draft, full q) and vLLM's (argmax drafts, a one-hot q). Prints, per
temperature and rules, the mean accepted draft tokens per drafting round for both rules
and their ratio. Figures, not timings: acceptance is what block verification changes.

Usage: python bench/block_verification.py [--prompts 4] [--seeds 3] [--k 4]
         [--draft-layers 8] [--max-new-tokens 48] [--temperatures 1.0,0.7] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _draft import truncated_draft  # noqa: E402

from autotune.schema.config import DecodeConfig  # noqa: E402
from autotune.decoding.decoder import SpeculativeDecoder  # noqa: E402
from autotune.models.loading import load_model  # noqa: E402
from autotune.workloads.prompts import encode_prompt, load_workload  # noqa: E402


def accepted_per_round(decoder: SpeculativeDecoder, prompts: list[list[int]], seeds: int,
                       max_new: int) -> tuple[float, int]:
    """(mean accepted draft tokens per round that drafted, rounds counted)."""
    accepted = rounds = 0
    for p, ids in enumerate(prompts):
        for seed in range(seeds):
            gen = decoder.generate(ids, max_new, time.perf_counter,
                                   torch.Generator().manual_seed(1000 * p + seed))
            for r in gen.rounds:
                if r.drafted:
                    accepted += r.accepted
                    rounds += 1
    return accepted / max(rounds, 1), rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--draft-layers", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--temperatures", default="1.0,0.7")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    target = load_model("default", device=args.device, dtype="float32")
    with tempfile.TemporaryDirectory() as folder:
        draft = truncated_draft(target, args.draft_layers, Path(folder), args.device, "float32")
        prompts = [encode_prompt(target.tokenizer, p)
                   for p in load_workload(limit=args.prompts)]
        print(f"target {target.name}, draft {draft.name}, k={args.k}, {len(prompts)} prompts "
              f"x {args.seeds} seeds, {args.max_new_tokens} new tokens, device {args.device}")
        print("| temperature | rules | token: accepted/round | block: accepted/round | "
              "block / token | rounds (token, block) |")
        print("|---|---|---|---|---|---|")
        for temperature in (float(t) for t in args.temperatures.split(",")):
            for engine, label in (("autotune", "autotune (sampled drafts)"),
                                  ("vllm", "vLLM V2 (argmax drafts)")):
                figures = {}
                for rule in ("token", "block"):
                    config = DecodeConfig(method="draft_model", k=args.k,
                                          temperature=temperature, engine=engine,
                                          verify=rule).validate()
                    decoder = SpeculativeDecoder(target, config, draft)
                    figures[rule] = accepted_per_round(decoder, prompts, args.seeds,
                                                       args.max_new_tokens)
                (tok, n_tok), (blk, n_blk) = figures["token"], figures["block"]
                ratio = f"{blk / tok:.3f}" if tok else "n/a"
                print(f"| {temperature:g} | {label} | {tok:.3f} | {blk:.3f} | {ratio} | "
                      f"{n_tok}, {n_blk} |", flush=True)


if __name__ == "__main__":
    main()
