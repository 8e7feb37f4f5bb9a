"""Measurement backends: where a candidate config is timed.

- `autotune`: our own decoder (every knob, every engine's drafting rules);
- `hf`: HF transformers' own generate() with the config's HF export;
- `llama_server`: llama.cpp's own server, one process per config on loopback, over
  HTTP (a binary built by `python -m autotune.backends.llama_server_install`);
- `vllm`: vLLM itself (its CPU build, in a venv of its own made by
  `python -m autotune.backends.vllm_install`), one engine process per config;
- `sglang`: the same interface, refused on a machine without it.

`autotune.measure.measurement.measure_arms(..., backend=...)` times any of them the same way. The
engine of a `--target` search measures its finalists where its backend runs here
(`engine_backend`), and every trial with `--fidelity engine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.backends.base import (Backend, BackendBase, BackendUnavailable, EngineCost,
                                    Runner, RunnerBase)
from autotune.decoding.engines import retirement

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.workloads.prompts import Prompt

__all__ = ["Backend", "BackendBase", "BackendUnavailable", "ENGINE_BACKENDS", "EngineCost",
           "Runner", "RunnerBase", "engine_cost", "input_error", "measured_methods", "open_backend",
           "unavailable"]

# Engines with a backend that measures in the engine itself (the others' --target
# searches measure in our decoder under their rules).
ENGINE_BACKENDS = ("hf", "llama_server", "vllm", "sglang")

# What measuring in each engine costs beside our decoder on the default model, for a time
# budget's plan (in our decoder's AR tokens). HF generate and llama.cpp: about 60 and 7
# ms/token against our decoder's 35 (docs/benchmarks.md, "Engines' decode speed"); a
# llama-server starts in a few seconds. vLLM's CPU build: AR 52.6 ms/token against our
# 25.8 (issue 50's bench), a compiled engine started in 66-97 s (2026-11-27, compile
# cache warm), an eager one in 28 s decoding about 1.5x slower.
_COSTS = {"hf": EngineCost(0.0, 1.7), "llama_server": EngineCost(150.0, 0.2),
          "vllm": EngineCost(3100.0, 2.0)}
_VLLM_EAGER = EngineCost(1100.0, 3.0)


def measured_methods(engine: str) -> tuple[str, ...] | None:
    """The speculative methods `engine`'s backend measures in the engine here (None:
    whatever its export writes): a search whose answer is raced in the engine searches
    those only."""
    if engine == "vllm":
        from autotune.backends.vllm import METHODS
        return METHODS
    return None


def engine_cost(engine: str) -> EngineCost:
    """What measuring in `engine` costs beside our decoder (ours: nothing more)."""
    if engine == "vllm":
        from autotune.backends.vllm import eager_default
        if eager_default():
            return _VLLM_EAGER
    return _COSTS.get(engine, EngineCost())


def open_backend(engine: str, target: "LoadedModel", draft: "LoadedModel | None" = None,
                 model_spec: str = "default", prompts: "Sequence[Prompt]" = (),
                 max_new_tokens: int = 0, companions: "Sequence[Prompt]" = (),
                 draft_spec: str | None = None) -> Backend:
    """The backend that measures in `engine` (`autotune`: our decoder). `model_spec` is
    what the user named (a GGUF file for llama-server); `prompts` and `max_new_tokens`
    are the most it will be asked to decode (llama-server sizes its context to them);
    `companions`: prompts never timed, served beside a timed one at concurrency > 1
    (llama-server); `draft_spec`: the --draft as the user named it (llama-server loads
    it as a GGUF file). Raises BackendUnavailable (one line) where the engine cannot run
    here."""
    if engine == "autotune":
        from autotune.backends.embedded import EmbeddedBackend
        return EmbeddedBackend(target, draft)
    if engine == "hf":
        from autotune.backends.hf import HFBackend
        return HFBackend(target, draft)
    if engine == "llama_server":
        from autotune.backends.llama_server import LlamaServerBackend
        from autotune.workloads.prompts import encode_prompt
        return LlamaServerBackend.for_model(
            model_spec, target, draft, [encode_prompt(target.tokenizer, p) for p in prompts],
            max_new_tokens, [encode_prompt(target.tokenizer, p) for p in companions],
            draft_spec)
    if engine == "vllm":
        from autotune.backends.vllm import VllmBackend
        from autotune.workloads.prompts import encode_prompt
        return VllmBackend.for_model(
            target, [encode_prompt(target.tokenizer, p) for p in prompts], max_new_tokens)
    if engine == "sglang":
        from autotune.backends.gpu_engines import open_gpu_backend
        return open_gpu_backend(engine, target, draft)
    if (retired := retirement(engine)) is not None:
        raise BackendUnavailable(retired)
    raise BackendUnavailable(f"no measurement backend runs in {engine}; engines with one: "
                             f"{', '.join(('autotune',) + ENGINE_BACKENDS)}")


def input_error(engine: str, model_spec: str, draft_spec: str | None) -> str | None:
    """What in the user's input keeps `engine` from measuring (a model it cannot read, a
    draft it cannot use), or None: an error whatever the fidelity."""
    if engine != "llama_server":
        return None
    from autotune.backends.llama_server import draft_gguf_for, gguf_for
    try:
        gguf = gguf_for(model_spec)
        if draft_spec:
            draft_gguf_for(draft_spec)           # draft-simple's -md takes a GGUF file
    except BackendUnavailable as exc:
        return str(exc)
    return None if gguf.is_file() else f"GGUF file not found: {gguf}"


def unavailable(engine: str, model_spec: str, draft_spec: str | None) -> str | None:
    """Why `engine` cannot measure here (one line), or None; checked before any model
    loads (for hf: nothing to check, transformers is a dependency)."""
    if (retired := retirement(engine)) is not None:
        return retired
    if engine == "llama_server":
        from autotune.backends.llama_server import find_server
        try:
            find_server()
        except BackendUnavailable as exc:
            return str(exc)
        return input_error(engine, model_spec, draft_spec)
    if engine == "vllm":
        from autotune.backends.vllm import unavailable as vllm_unavailable
        return vllm_unavailable()
    if engine == "sglang":
        from autotune.backends.gpu_engines import missing
        lacks = missing(engine)
        return f"it needs {' and '.join(lacks)}" if lacks else "its backend is not built yet"
    return None
