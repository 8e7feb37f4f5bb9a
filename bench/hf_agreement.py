"""Ours against transformers' own assisted generation, per HF-expressible config: τ.

For each config (measured under transformers' rules, `engine: hf`) the HF export is
written, loaded from its files into transformers' `generate()` on the default model (with
a separate assistant: the default model's first 10 layers), and run on Spec-Bench prompts
next to our decoder with the same config. Printed per config: τ (tokens per round) ours
and transformers' (emitted tokens per round), the prompts whose rounds agree one by one
(drafted, emitted), and whether both outputs
equal greedy decoding. How rounds are counted: autotune/hf_assisted.py.

    python bench/hf_agreement.py [--prompts 12] [--max-new-tokens 32] [--only TEXT]
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path

import torch

from autotune.backends.hf_assisted import run_assisted
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.exports import export
from autotune.frozen.schema import SCHEMA
from autotune.models.llama import LlamaForward
from autotune.models.loading import LoadedModel, load_model
from autotune.workloads.prompts import encode_prompt, load_workload, round_robin

CONFIGS = {
    "prompt lookup k=4 n<=3": dict(method="ngram", k=4, ngram_max=3),
    "prompt lookup k=10 n<=2 (HF default size)": dict(method="ngram", k=10, ngram_max=2),
    "early exit 20/30, fixed k=3": dict(method="sorted_exit", exits=(20,), k=3),
    "early exit 20/30, confidence 0.5 k=6": dict(method="sorted_exit", exits=(20,), k=6,
                                                 exit_policy="confidence", gamma=0.5),
    "assistant fixed k=3": dict(method="draft_model", k=3),
    "assistant heuristic k=2": dict(method="draft_model", k=2, exit_policy="heuristic"),
    "assistant confidence 0.4 (ROC) k=20": dict(method="draft_model", k=20,
                                                exit_policy="confidence", gamma=0.4),
}


def _truncated(model: LoadedModel, layers: int) -> LoadedModel:
    hf = copy.deepcopy(model.hf_model)
    hf.model.layers = hf.model.layers[:layers]
    hf.config.num_hidden_layers = layers
    return LoadedModel(name=f"first{layers}", path="(in memory)", hf_model=hf,
                       tokenizer=model.tokenizer, forward=LlamaForward(hf),
                       device=torch.device("cpu"), dtype=torch.float32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--workload", default="builtin",
                        help="builtin (default), or a Spec-Bench question.jsonl, JSONL or text")
    parser.add_argument("--only", default="", help="run the configs whose name contains this")
    args = parser.parse_args()
    target = load_model("default", device="cpu", dtype="float32")
    draft = _truncated(target, 10)
    # Round robin over the categories, as the search draws its prompts.
    prompts = round_robin(load_workload(args.workload), args.prompts)
    ids = [encode_prompt(target.tokenizer, p) for p in prompts]
    greedy = SpeculativeDecoder(target, DecodeConfig())
    expected = [greedy.generate(x, args.max_new_tokens, time.perf_counter).tokens for x in ids]
    print(f"{len(ids)} prompts x {args.max_new_tokens} new tokens, default model (float32); "
          "assistant: its first 10 layers", file=sys.stderr)
    print("| config | τ ours | τ transformers | prompts with equal rounds | both greedy |")
    print("|---|---|---|---|---|")
    for name, knobs in CONFIGS.items():
        if args.only not in name:
            continue
        config = DecodeConfig(**knobs, engine="hf")
        uses_draft = config.method == "draft_model"
        doc = {"schema": SCHEMA, "params": config.to_dict(),
               "model": {"spec": "smollm2", "id": "smollm2", "n_layers": target.n_layers}}
        if uses_draft:
            doc["draft"] = {"spec": "first10", "id": "first10", "n_layers": 10}
        with tempfile.TemporaryDirectory() as tmp:
            for rel, text in export(doc, "hf").files.items():
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / rel).write_text(text)
            ours_decoder = SpeculativeDecoder(target, config, draft if uses_draft else None)
            ours_acc: list[int] = []
            theirs_acc: list[int] = []
            same = greedy_ok = 0
            for x, want in zip(ids, expected):
                ours = ours_decoder.generate(x, args.max_new_tokens, time.perf_counter)
                theirs = run_assisted(target.hf_model, Path(tmp) / "hf", x, want[0],
                                      args.max_new_tokens,
                                      draft.hf_model if uses_draft else None)
                # transformers' num_matches is a round's emitted tokens - 1.
                ours_acc += [r.emitted - 1 for r in ours.rounds]
                theirs_acc += theirs.accepted
                same += ([(r.drafted, r.emitted - 1) for r in ours.rounds]
                         == list(zip(theirs.drafted, theirs.accepted)))
                greedy_ok += ours.tokens == want and theirs.tokens == want[1:]
        tau = lambda acc: sum(acc) / len(acc) + 1 if acc else 0.0  # noqa: E731
        print(f"| {name} | {tau(ours_acc):.3f} | {tau(theirs_acc):.3f} | {same}/{len(ids)} "
              f"| {greedy_ok}/{len(ids)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
