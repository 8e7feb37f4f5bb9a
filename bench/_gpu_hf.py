"""bench/gpu.py's helpers: the random-weight Llama shapes, and Hugging Face transformers'
own fastest `generate` (its documented recipe) timed in a child process.

Why a child process: `torch.compile(mode="reduce-overhead")` can take minutes, and no
in-process timer can stop a compile half-way; a child is killed at its budget. It also
keeps dynamo's caches and CUDA-graph trees away from autotune's own graphs in the parent.

The recipe (transformers "Optimizing inference", https://huggingface.co/docs/transformers/llm_optims,
"Static kv-cache and torch.compile"): a static cache, and the forward compiled with
`mode="reduce-overhead"` (CUDA graphs). Since transformers 4.5x, `generate` does the
compile itself when the cache is static and the device is CUDA
(`GenerationMixin._valid_auto_compile_criteria`, transformers 5.24
generation/utils.py:2438; `CompileConfig` defaults backend "inductor", mode
"reduce-overhead", generation/configuration_utils.py:1670), so `--backend auto` (the
default on CUDA) only sets

    model.generation_config.cache_implementation = "static"

Wrapping `model.forward` in `torch.compile` as well (`--backend inductor`, the older
docs' line) compiles twice on transformers 5.17 and failed on an H200 with "accessing
tensor output of CUDAGraphs that has been overwritten by a subsequent run".

"The first several calls of the compiled function are slower because it is being
compiled", so the first call (the compile) and two more are untimed warm-up. The child
prints one JSON line per model to stdout, so a parent that kills it mid-way keeps the
models it finished.

Usage (the parent builds this command line):
  python3 bench/_gpu_hf.py --models default,big --device cuda --dtype bfloat16 --big-dtype bfloat16 \
      --tokens 128 --repeats 3 --prompt-ids 1,2,3 --deadline-s 150 [--quick] [--backend auto]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

# The 8B shape of the issue (Llama-3.1-8B's geometry; random weights: timing only).
BIG_SHAPE: dict[str, Any] = dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                 num_key_value_heads=8, intermediate_size=14336,
                                 vocab_size=128256)
# The CPU smoke test's stand-in: same vocabulary and GQA ratio, tiny everything else.
QUICK_SHAPE: dict[str, Any] = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=8,
                                   num_key_value_heads=2, intermediate_size=896,
                                   vocab_size=128256)
# Positions the forward's rotary tables cover; prompts + 64-token verify passes fit.
BIG_POSITIONS = 4096
SEED = 0


def big_shape(quick: bool) -> dict[str, Any]:
    return dict(QUICK_SHAPE if quick else BIG_SHAPE)


def big_label(quick: bool) -> str:
    return "8B-shape stand-in (tiny)" if quick else "Llama 8B shape (random)"


def llama_config(quick: bool) -> Any:
    """The LlamaConfig of the 8B-shaped model (or its tiny stand-in); untied head as in
    Llama-3.1-8B, no EOS that random weights could stumble on."""
    from transformers import LlamaConfig

    return LlamaConfig(**big_shape(quick), max_position_embeddings=BIG_POSITIONS,
                       tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                       pad_token_id=None)


def build_random_llama(quick: bool, device: torch.device, dtype: torch.dtype) -> Any:
    """A random-weight LlamaForCausalLM made directly on `device` (seconds, even for 8B on
    a GPU): for timing only. Same seed, same weights, in parent and child alike."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(SEED)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(llama_config(quick), dtype=dtype)
    model.eval().requires_grad_(False)
    return model


def default_hf_model(device: torch.device, dtype: torch.dtype) -> Any:
    """The default model (SmolLM2-135M) as a plain transformers model, from the same
    converted folder autotune's `load_model("default")` reads (converted there first)."""
    from transformers import AutoModelForCausalLM

    from autotune.models.loading import convert_gguf, default_gguf

    folder = convert_gguf(default_gguf())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device)
    model.eval().requires_grad_(False)
    return model


def endless_generation_config(model: Any, tokens: int) -> Any:
    """Greedy, exactly `tokens` new tokens, no EOS stop (our side runs without EOS too, so
    both decode the same count), static cache as the recipe sets it."""
    config = model.generation_config.__class__.from_dict(model.generation_config.to_dict())
    config.cache_implementation = "static"
    config.do_sample = False
    config.max_new_tokens = tokens
    config.min_new_tokens = None
    # An id past the vocabulary: no token can stop the run. (None would not do: generate
    # then falls back to the model config's EOS.)
    config.eos_token_id = int(model.config.vocab_size)
    config.pad_token_id = 0          # a single row is never padded
    for name in ("temperature", "top_p", "top_k"):
        setattr(config, name, None)
    return config


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_hf_generate(model: Any, prompt_ids: list[int], tokens: int, repeats: int,
                     backend: str, warm_calls: int = 2) -> dict[str, Any]:
    """The recipe on `model`: compile, warm up, then `repeats` timed generate calls.

    ms/token is the whole call over the new tokens (prefill included: a generate call
    cannot be split without changing it); `bench/gpu.py` sets our decoder's total
    ms/token beside it."""
    device = next(model.parameters()).device
    from torch._dynamo.utils import counters

    graphs_before = counters["stats"].get("unique_graphs", 0)
    model.generation_config.cache_implementation = "static"
    if backend not in ("none", "auto"):
        # The documented line; `backend="eager"` (the CPU smoke test) traces the same
        # graph with dynamo (fullgraph: any graph break fails) without inductor's compile.
        kwargs: dict[str, Any] = ({"mode": "reduce-overhead"} if backend == "inductor"
                                  else {"backend": backend})
        model.forward = torch.compile(model.forward, fullgraph=True, **kwargs)
    config = endless_generation_config(model, tokens)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    mask = torch.ones_like(ids)

    def call() -> tuple[float, list[int]]:
        _sync(device)
        start = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        _sync(device)
        return time.perf_counter() - start, out[0, len(prompt_ids):].tolist()

    with torch.inference_mode():
        first_s, first_tokens = call()               # the compile
        for _ in range(warm_calls):
            call()
        timed = [call() for _ in range(repeats)]
    new = [len(t) for _, t in timed]
    # How many graphs dynamo made for this model: prefill and decode are two; a count
    # growing with the tokens would be a recompile storm.
    graphs = counters["stats"].get("unique_graphs", 0) - graphs_before
    return {"dynamo_graphs": graphs, "ms_per_token": 1000 * statistics.median(s / n for (s, _), n in zip(timed, new)),
            "first_call_s": first_s, "new_tokens": new[0], "tokens": timed[0][1],
            "first_tokens_equal": first_tokens == timed[0][1], "backend": backend}


def _child(args: argparse.Namespace) -> None:
    device = torch.device(args.device)
    dtypes = {"default": getattr(torch, args.dtype), "big": getattr(torch, args.big_dtype)}
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    began = time.monotonic()
    for name in args.models.split(","):
        elapsed = time.monotonic() - began
        if name != args.models.split(",")[0] and elapsed > args.deadline_s * 0.5:
            # The first model's compile took most of the budget; this one's would not
            # finish either: say so instead of being killed silently.
            print(json.dumps({"model": name, "skipped": f"{elapsed:.0f} s of the "
                              f"{args.deadline_s:.0f} s budget already used"}), flush=True)
            continue
        row: dict[str, Any] = {"model": name}
        try:
            load_start = time.monotonic()
            model = (default_hf_model(device, dtypes[name]) if name == "default"
                     else build_random_llama(args.quick, device, dtypes[name]))
            row["load_s"] = time.monotonic() - load_start
            row.update(time_hf_generate(model, prompt, args.tokens, args.repeats, args.backend))
        except Exception as exc:  # noqa: BLE001 - one line back to the parent
            text = str(exc).strip().splitlines()
            row["error"] = f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
        print(json.dumps(row), flush=True)
        # The compiled forward holds the model: drop both before the next one.
        model = None
        torch._dynamo.reset()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="big,default")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", help="the default model's")
    p.add_argument("--big-dtype", default="bfloat16", help="the 8B shape's")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prompt-ids", required=True)
    p.add_argument("--deadline-s", type=float, default=150.0)
    p.add_argument("--backend", default="auto", choices=("auto", "inductor", "eager", "none"))
    p.add_argument("--quick", action="store_true")
    _child(p.parse_args())


if __name__ == "__main__":
    main()
