"""Peak resident set (RSS) of the replay tier against the screen's size, the prompt pool,
the prompt length and the model size (issue 51, item 2).

Each setting runs in a child process of its own (a fresh high-water mark), which loads
the model, makes the reference continuations of the prompts, then replays `--screen`
configs of every layer-based and n-gram family (new skip masks and exit sets, so every
config makes new tables, the worst case for memory), keeping every prediction's summary
as the screen's memo does. It prints the peak RSS after loading, after the references
and after the screen (`autotune.common.memory`). The replay's cost parts are fixed
numbers, not measured: memory does not depend on their values and measuring them takes
minutes on a large model; no speedup is reported.

Models: the default model (SmolLM2-135M, float32) and a random-weight Llama of about 1B
parameters made in memory (TinyLlama-1.1B's shape, the default model's tokenizer).

Usage: python bench/memory.py [--screens 20,80,240] [--prompts 8,32] [--words 40,400]
       [--models default,1b] [--max-new-tokens 32]
The screens vary at the first --prompts and --words; the prompts and words at the first
--screens. What must hold: the screen's peak does not grow with the configs screened.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PART_MS = dict(base=1.0, attn=0.2, mlp=0.3, kv=0.1, head=0.5, choose=0.1)


def _model(name: str) -> Any:
    from autotune.models.loading import load_model

    default = load_model("default", device="cpu")
    if name == "default":
        return default
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from autotune.models.llama import LlamaForward
    from autotune.models.loading import LoadedModel

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=default.forward.vocab_size, hidden_size=2048,
                         intermediate_size=5632, num_hidden_layers=22,
                         num_attention_heads=32, num_key_value_heads=4,
                         max_position_embeddings=2048, tie_word_embeddings=False)
    hf_model = LlamaForCausalLM(config).float().eval()
    hf_model.requires_grad_(False)
    return LoadedModel(name="random-llama-1b", path="<memory:random-llama-1b>",
                       hf_model=hf_model, tokenizer=default.tokenizer,
                       forward=LlamaForward(hf_model), device=torch.device("cpu"),
                       dtype=torch.float32)


def _configs(n_layers: int, count: int) -> list[Any]:
    """`count` distinct configs: skip masks, exit sets and n-gram ranges at random."""
    from autotune.schema.config import DecodeConfig

    rng = random.Random(0)
    out: list[Any] = []
    seen: set[str] = set()
    while len(out) < count:
        kind = len(out) % 3
        k = rng.choice((2, 4, 6, 8))
        if kind == 0:
            attn = tuple(sorted(rng.sample(range(n_layers), rng.randint(1, n_layers // 2))))
            mlp = tuple(sorted(rng.sample(range(n_layers), rng.randint(0, n_layers // 4))))
            config = DecodeConfig(method="layer_skip", k=k, attn_skip=attn, mlp_skip=mlp)
        elif kind == 1:
            exits = tuple(sorted(rng.sample(range(1, n_layers + 1), rng.randint(1, 3))))
            thresholds = tuple(round(rng.uniform(0.3, 0.9), 2) for _ in exits[:-1])
            config = DecodeConfig(method="sorted_exit", k=k, exits=exits,
                                  thresholds=thresholds, exit_policy="heuristic")
        else:
            low = rng.randint(1, 3)
            config = DecodeConfig(method="ngram", k=k, ngram_min=low,
                                  ngram_max=low + rng.randint(0, 3))
        key = json.dumps(config.to_dict(), sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(config)
    return out


def child(args: argparse.Namespace) -> None:
    from autotune.common.memory import StagePeaks
    from autotune.replay.costs import FORMAT, CostParts, LayerParts
    from autotune.replay.run import Replayer
    from autotune.workloads.prompts import Prompt

    peaks = StagePeaks()
    target = _model(args.model)
    loaded = peaks.lap()
    words = ("the cat sat on a mat and then it ran to the door of the house where "
             "a dog was asleep").split()
    prompts = [Prompt(" ".join(words[(i + j) % len(words)] for j in range(args.words)),
                      "bench", f"m{i}") for i in range(args.prompts)]
    n = target.n_layers
    parts = CostParts(FORMAT, {}, [[1, 10.0], [8, 14.0], [64, 60.0]], 0.5, 0.5, 0.05, 0.0,
                      0.0, 1.0, LayerParts(layers=n, **PART_MS), None, None, {})
    with tempfile.TemporaryDirectory() as folder:
        replayer = Replayer(target, None, prompts, args.max_new_tokens,
                            Path(folder) / "parts.json", Path(folder), parts=parts)
        references = peaks.lap()
        kept = [replayer.summary(config) for config in _configs(n, args.screen)]
        screened = peaks.lap()
    print(json.dumps({"model": args.model, "screen": args.screen, "prompts": args.prompts,
                      "words": args.words, "prompt_tokens": max(len(r.prompt) for r in
                                                               replayer.references),
                      "loaded": loaded, "references": references, "screen_peak": screened,
                      "kept": len(kept), "per_stage": peaks.per_stage}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--screens", default="20,80,240")
    parser.add_argument("--prompts", default="8,32")
    parser.add_argument("--words", default="40,400")
    parser.add_argument("--models", default="default,1b")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--screen", type=int, default=20, help=argparse.SUPPRESS)
    parser.add_argument("--prompt-count", dest="prompt_count", type=int, default=8,
                        help=argparse.SUPPRESS)
    parser.add_argument("--word-count", dest="word_count", type=int, default=40,
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.prompts, args.words = args.prompt_count, args.word_count
        child(args)
        return
    try:
        screens = [int(x) for x in args.screens.split(",")]
        prompts = [int(x) for x in args.prompts.split(",")]
        words = [int(x) for x in args.words.split(",")]
    except ValueError:
        sys.exit("bench/memory.py: --screens, --prompts and --words take comma-separated "
                 "integers")
    models = args.models.split(",")
    if any(m not in ("default", "1b") for m in models):
        sys.exit("bench/memory.py: --models takes default and/or 1b")
    settings = [(m, s, prompts[0], words[0]) for m in models for s in screens]
    settings += [(m, screens[0], p, words[0]) for m in models for p in prompts[1:]]
    settings += [(m, screens[0], prompts[0], w) for m in models for w in words[1:]]
    print(f"{'model':8} {'screen':>6} {'prompts':>7} {'tokens':>6} {'loaded':>9} "
          f"{'references':>10} {'screen':>9}", flush=True)
    for model, screen, count, length in settings:
        done = subprocess.run(
            [sys.executable, __file__, "--child", "--model", model, "--screen", str(screen),
             "--prompt-count", str(count), "--word-count", str(length),
             "--max-new-tokens", str(args.max_new_tokens)],
            capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{model} screen {screen}: failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{model:8} {screen:>6} {count:>7} {row['prompt_tokens']:>6} "
              f"{row['loaded'] / 1e9:>7.2f}GB {row['references'] / 1e9:>8.2f}GB "
              f"{row['screen_peak'] / 1e9:>7.2f}GB", flush=True)


if __name__ == "__main__":
    main()
