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

The held-out pool's prediction (issue 59, item 6), as the main job runs it:
python bench/memory.py --pools 16,40,80 [--finalists 11] [--screens 220]
       [--max-new-tokens 32] [--cache DIR]
Each row's child loads the default model, splits the spec_bench workload as a search
does, replays a screen of `--screens` configs over 24 screen prompts through the
search's `Replayer` (kept in the context's memo, with its sources' kept caches, as
the main job keeps it), then runs `search.pool_prediction.predict_pool` for
`--finalists` finalists of autotune's own methods and the engines' (layer skipping,
early exits, n-gram lookups) over the first `--pools` prompts of the held-out pool,
their references decoded afresh (an empty cache). It prints RSS before the stage, the
stage's peak, RSS after it and the stage's seconds. What must hold: the stage's peak
does not grow with the pool.
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


def _finalists(n_layers: int, count: int) -> list[Any]:
    """`count` finalists as the main job races them: autotune's own (two layer-skip
    masks, an exit set, an n-gram range) and the engines' n-gram lookups, in turn."""
    from autotune.schema.config import DecodeConfig
    from autotune.search.finalists import Finalist

    half = n_layers // 2
    own = [DecodeConfig(method="layer_skip", k=4, attn_skip=tuple(range(half, n_layers - 1, 2)),
                        mlp_skip=(n_layers - 3,)),
           DecodeConfig(method="sorted_exit", k=4, exits=(n_layers // 3, 2 * n_layers // 3,
                                                          n_layers),
                        thresholds=(0.8, 0.5), exit_policy="heuristic"),
           DecodeConfig(method="layer_skip", k=6, attn_skip=tuple(range(1, half, 2))),
           DecodeConfig(method="ngram", k=8, ngram_min=1, ngram_max=5)]
    engines = [("vllm", DecodeConfig(method="ngram", k=9, ngram_min=2, ngram_max=5,
                                     engine="vllm")),
               ("vllm", DecodeConfig(method="suffix", k=8, engine="vllm")),
               ("llama_server", DecodeConfig(method="llama_ngram", k=8, engine="llama_server")),
               ("sglang", DecodeConfig(method="sglang_ngram", k=8, engine="sglang")),
               ("trtllm", DecodeConfig(method="ngram", k=6, ngram_max=4, engine="trtllm")),
               ("hf", DecodeConfig(method="ngram", k=10, ngram_max=2, engine="hf")),
               ("sa", DecodeConfig(method="sa", k=6, engine="trtllm"))]
    mixed = [pair for i in range(len(engines)) for pair in
             ((("autotune", own[i]),) if i < len(own) else ()) + (engines[i],)]
    rows: list[Any] = []
    for i in range(count):
        engine, config = mixed[i % len(mixed)]
        rows.append(Finalist(trial=i, label=config.method, role=f"bench #{i}", preset=None,
                             params=config.to_dict(), search={}, engine=engine))
    return rows


def pool_child(args: argparse.Namespace) -> None:
    """One row of the held-out pool's prediction (the module doc)."""
    import os
    import time

    from autotune.common.memory import StagePeaks, current_rss_bytes, release_freed_memory
    from autotune.models.loading import load_model
    from autotune.replay.costs import FORMAT, CostParts, LayerParts
    from autotune.replay.reference import reference_set
    from autotune.replay.run import Replayer
    from autotune.search.objectives import EvalContext
    from autotune.search.pool_prediction import predict_pool
    from autotune.workloads.split import split_prompts

    peaks = StagePeaks()
    target = load_model("default", device="cpu")
    split = split_prompts("spec_bench", None, "0.5", 0)
    n = target.n_layers
    parts = CostParts(FORMAT, {}, [[1, 10.0], [8, 14.0], [64, 60.0]], 0.5, 0.5, 0.05, 0.0,
                      0.0, 1.0, LayerParts(layers=n, **PART_MS), None, None, {})
    with tempfile.TemporaryDirectory() as folder:
        # References decoded afresh (the decode's peak is the stage's), or kept in
        # --cache between rows (quicker; the decode column then reads low).
        os.environ["AUTOTUNE_CACHE"] = args.cache or folder
        ctx = EvalContext(target=target, draft=None, prompts=split.screened[:24],
                          max_new_tokens=args.max_new_tokens, fidelity="replay",
                          replay_parts=Path(folder) / "parts.json")
        search = ctx.memo["replayer"] = Replayer(target, None, ctx.prompts,
                                                 args.max_new_tokens, ctx.replay_parts,
                                                 parts=parts)
        kept = [search.summary(config) for config in _configs(n, args.screen)]
        # The screen found the finalists: those of the methods that keep state between
        # configs (layer skipping, early exits) fill the screen's kept state.
        for finalist in _finalists(n, args.finalist_count):
            if _config_of(finalist).method in ("layer_skip", "sorted_exit"):
                search.summary(_config_of(finalist))
        release_freed_memory()
        screened = peaks.lap()
        before = current_rss_bytes() or 0
        began = time.monotonic()
        # The pool's references first (decoded and cached as predict_pool would), so the
        # decode's peak and the replay's are told apart.
        reference_set(target, split.pool[:args.pool], args.max_new_tokens)
        release_freed_memory()
        decoded = peaks.lap()
        predicted = predict_pool(ctx, _finalists(n, args.finalist_count),
                                 split.pool[:args.pool])
        seconds = time.monotonic() - began
        after = current_rss_bytes() or 0
        stage = peaks.lap()
    print(json.dumps({"model": "default", "screen": args.screen, "pool": args.pool,
                      "finalists": args.finalist_count, "predicted": len(predicted),
                      "screen_peak": screened, "before": before, "decode_peak": decoded,
                      "pool_peak": stage,
                      "after": after, "seconds": seconds, "kept": len(kept),
                      "per_stage": peaks.per_stage}))


def _config_of(finalist: Any) -> Any:
    from autotune.schema.config import config_from_mapping

    return config_from_mapping(finalist.params).validate()


def pools(args: argparse.Namespace) -> None:
    """The held-out pool's rows, one child each."""
    try:
        sizes = [int(x) for x in args.pools.split(",")]
        screen = int(args.screens.split(",")[-1]) if args.screens_given else 220
    except ValueError:
        sys.exit("bench/memory.py: --pools and --screens take comma-separated integers")
    print(f"{'pool':>4} {'finalists':>9} {'screen':>6} {'before':>9} {'decode':>9} "
          f"{'replay':>9} {'after':>9} {'seconds':>7}", flush=True)
    for size in sizes:
        done = subprocess.run(
            [sys.executable, __file__, "--child", "--stage", "pool", "--pool", str(size),
             "--finalist-count", str(args.finalists), "--screen", str(screen),
             "--max-new-tokens", str(args.max_new_tokens),
             *(["--cache", args.cache] if args.cache else [])],
            capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"pool {size}: failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{size:>4} {row['predicted']:>4}/{row['finalists']:<4} {screen:>6} "
              f"{row['before'] / 1e9:>7.2f}GB {row['decode_peak'] / 1e9:>7.2f}GB "
              f"{row['pool_peak'] / 1e9:>7.2f}GB "
              f"{row['after'] / 1e9:>7.2f}GB {row['seconds']:>7.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--screens", default="20,80,240")
    parser.add_argument("--prompts", default="8,32")
    parser.add_argument("--words", default="40,400")
    parser.add_argument("--models", default="default,1b")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--pools", default=None,
                        help="held-out pool sizes: the pool prediction's rows instead")
    parser.add_argument("--finalists", type=int, default=11)
    parser.add_argument("--cache", default=None,
                        help="a folder that keeps the references between rows")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stage", default="screen", help=argparse.SUPPRESS)
    parser.add_argument("--pool", type=int, default=16, help=argparse.SUPPRESS)
    parser.add_argument("--finalist-count", dest="finalist_count", type=int, default=11,
                        help=argparse.SUPPRESS)
    parser.add_argument("--model", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--screen", type=int, default=20, help=argparse.SUPPRESS)
    parser.add_argument("--prompt-count", dest="prompt_count", type=int, default=8,
                        help=argparse.SUPPRESS)
    parser.add_argument("--word-count", dest="word_count", type=int, default=40,
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.screens_given = "--screens" in sys.argv
    if args.child and args.stage == "pool":
        pool_child(args)
        return
    if args.child:
        args.prompts, args.words = args.prompt_count, args.word_count
        child(args)
        return
    if args.pools is not None:
        pools(args)
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
