"""llama.cpp's `llama-server` as a measurement backend, over HTTP on loopback.

A config runs in its own server process, started with the flags the `llama_server`
export writes for it (`autotune.exports.llama_server.server_args`: what is measured is
what is deployed) on the user's GGUF file; the baseline is the same server without
`--spec-type`. Each runner owns one process (`llama_server_process.ServerProcess`),
reused across prompts and stopped when the measurement ends, also on Ctrl-C or a kill.
The binary is found, never built (`find_server`; `llama_server_install` builds it).

A request is `POST /completion` with the prompt's token ids (taken verbatim, no BOS
added), `n_predict`, the sampling of `exports.llama_server.request`, `cache_prompt:
false` (every run pays its own prefill, as in our decoder) and `stream: true`: the
server sends one token per event, so the client clock is read before the request, at
the first token (the prefill's end) and at the last event. The server's own `timings`
come back too: `predicted_ms` (its decode clock) and `draft_n` / `draft_n_accepted`
(absent when it drafted nothing), kept on the Generation as totals; the server reports
no per-round trace.

Cross-request state (ngram-map-*, ngram-mod, ngram-cache): the server keeps it itself,
so a runner is `stateful`: `forget()` restarts its process and `absorb()` serves a
request untimed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.backends.base import (BackendBase, BackendUnavailable, Clock, RunnerBase,
                                    executable_from_env)
from autotune.backends.llama_server_install import INSTALL, STAMP_SUFFIX, installed_binary
from autotune.backends.startup import record_startup
from autotune.backends.llama_server_process import (CompletionEvent, CompletionRequest,
                                                     ServerProcess, Timings)
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig

if TYPE_CHECKING:
    from autotune.decoding.decoder import Generation
    from autotune.models.loading import LoadedModel

NAME = "llama_server"
ENV_BINARY = "AUTOTUNE_LLAMA_SERVER"
CONTEXT_STEP = 256


def find_server() -> Path:
    """The llama-server binary: $AUTOTUNE_LLAMA_SERVER, else the one
    `llama_server_install` built, else `llama-server` on PATH; BackendUnavailable (one
    line naming the install command) when there is none."""
    named = executable_from_env(ENV_BINARY)
    if named is not None:
        return named
    found = installed_binary() or shutil.which("llama-server")
    if found is None:
        raise BackendUnavailable(f"llama-server is not installed ({INSTALL}: builds it "
                                 "from source, about 4 min on 2 cores)")
    return Path(found)


def installed() -> bool:
    """Whether a llama-server binary is found here."""
    try:
        find_server()
    except BackendUnavailable:
        return False
    return True


def server_version(binary: Path) -> str:
    """Where the binary came from: the install stamp, else its `--version` line."""
    stamp = binary.with_name(binary.name + STAMP_SUFFIX)
    if stamp.is_file():
        return stamp.read_text().splitlines()[0].strip()
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "version unknown"
    lines = [line for line in (done.stdout + done.stderr).splitlines()
             if line.startswith("version")]
    return lines[0].removeprefix("version:").strip() if lines else "version unknown"


def gguf_for(model_spec: str) -> Path:
    """The GGUF file llama-server runs for `model_spec` (default: the default model's own)."""
    from autotune.models.loading import DEFAULT_MODEL, default_gguf
    if model_spec == DEFAULT_MODEL:
        return default_gguf()
    path = Path(model_spec).expanduser()
    if path.suffix != ".gguf":
        raise BackendUnavailable(f"llama-server runs GGUF files and --model {model_spec} is "
                                 "not one: give --model FILE.gguf")
    return path


def draft_gguf_for(draft_spec: str) -> Path:
    """The GGUF file of `--draft draft_spec`; BackendUnavailable unless it is one."""
    path = Path(draft_spec).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        raise BackendUnavailable(f"llama-server loads a draft model as a GGUF file and "
                                 f"--draft {draft_spec} is not one: give --draft FILE.gguf "
                                 "(or no --draft: llama_draft then drafts with the "
                                 "target's first layers)")
    return path


class LlamaServerRunner(RunnerBase):
    """One config (or the baseline) in one llama-server process."""

    def __init__(self, backend: "LlamaServerBackend", config: DecodeConfig) -> None:
        from autotune.schema.llama_spec import stateful
        from autotune.exports.llama_server import request, server_args
        self.backend = backend
        self.config = config
        draft = backend.draft_for(config) if config.method == "llama_draft" else None
        self.args = backend.base_args(config.concurrency) + server_args(
            config, None if draft is None else str(draft))
        self.body = CompletionRequest(**request(config))      # its sampling
        self._stateful = config.method == "llama_ngram" and stateful(config.llama_spec_type)
        self.server = self._start()

    def _start(self) -> ServerProcess:
        label = "llama-server " + {"none": "(no speculation)",
                                   "llama_draft": "(draft-simple)"}.get(
            self.config.method, f"({self.config.llama_spec_type})")
        began = time.monotonic()
        server = ServerProcess(self.backend.binary, self.args, name=label)
        if self.backend.startup_key is not None:
            # What the next run's time budget prices a server's start-up at.
            record_startup(self.backend.startup_key, time.monotonic() - began)
        return server

    def generate(self, prompt: list[int], max_new_tokens: int, clock: Clock,
                 generator: Any = None, *, category: str | None = None) -> "Generation":
        from autotune.decoding.decoder import Generation
        if len(prompt) + max_new_tokens + 2 > self.backend.n_ctx:
            raise AutotuneError(f"a prompt of {len(prompt)} tokens + {max_new_tokens} "
                                f"exceeds llama-server's context of {self.backend.n_ctx}")
        body = CompletionRequest(**self.body, prompt=list(prompt), n_predict=max_new_tokens,
                                 cache_prompt=False, return_tokens=True)
        if generator is not None and not self.config.greedy:
            body["seed"] = int(generator.initial_seed()) % 2**31
        firsts: list[float] = []

        def on_chunk(chunk: CompletionEvent) -> None:
            if chunk.tokens and not firsts:
                firsts.append(clock())

        others = self._beside(prompt, max_new_tokens)
        try:
            start = clock()
            chunks = self.server.stream("/completion", body, on_chunk)
            end = clock()
        finally:
            for thread in others:
                thread.join()
        tokens = [t for chunk in chunks for t in chunk.tokens]
        final = chunks[-1] if chunks else CompletionEvent()
        if not final.stop:
            raise AutotuneError(f"{self.server.name} ended a stream without its last event; "
                                f"log: {self.server.log_tail()}")
        timings = final.timings or Timings()
        first = firsts[0] if firsts else end
        speculates = self.config.method != "none"
        return Generation(
            prompt_len=len(prompt), tokens=tokens, prefill_s=first - start,
            decode_s=end - first, rounds=[], cache_bytes=0, timed_parts=False,
            draft_totals=((timings.draft_n, timings.draft_n_accepted) if speculates
                          else None),
            engine_decode_s=(timings.predicted_ms / 1000
                             if timings.predicted_ms is not None else None))

    def _beside(self, prompt: list[int], max_new_tokens: int) -> list[threading.Thread]:
        """At concurrency N, N - 1 companion requests started just before the timed one
        (each with the same budget), so that it is served beside them as one of N
        concurrent clients; untimed. Companions come from the backend's pool of prompts
        that are never timed: a companion that is later timed itself would leave its own
        answer in a shared n-gram table (ngram-mod) for its timed run to copy. Every arm
        gives a prompt the same companions."""
        others = self.config.concurrency - 1
        if others < 1:
            return []
        pool = self.backend.companions
        if len(pool) < others:
            raise AutotuneError(
                f"concurrency={self.config.concurrency} serves each timed request beside "
                f"{others} companions from prompts that are never timed; this workload "
                f"leaves {len(pool)} such prompts: give a workload with more prompts, or "
                "fewer --prompts / a smaller held-out pool")
        at = self.backend.companion_offset(prompt)
        threads = []
        for i in range(others):
            body = CompletionRequest(**self.body, prompt=list(pool[(at + i) % len(pool)]),
                                     n_predict=max_new_tokens, cache_prompt=False)
            thread = threading.Thread(target=self._quietly, args=(body,), daemon=True)
            thread.start()
            threads.append(thread)
        return threads

    def _quietly(self, body: CompletionRequest) -> None:
        # A failing companion request shows in the timed one (the server's state).
        with contextlib.suppress(AutotuneError):
            self.server.post("/completion", body)

    def slots(self) -> list[dict[str, Any]]:
        """The server's GET /slots report (its own view of each slot's settings)."""
        status, answer = self.server.request("GET", "/slots")
        if status != 200 or not isinstance(answer, list):
            raise AutotuneError(f"{self.server.name}: GET /slots answered {status}")
        return answer

    @property
    def stateful(self) -> bool:
        """Whether its speculation keeps earlier requests (a stateful `llama_ngram` type)."""
        return self._stateful

    def forget(self) -> None:
        """A fresh server: nothing of earlier requests is kept."""
        self.server.close()
        self.server = self._start()

    def absorb(self, prompt: list[int], response: list[int], max_new_tokens: int) -> None:
        """Serve `prompt` untimed, so the server's state holds it (the server answers it
        itself; `response` is the baseline's answer, the same under greedy decoding)."""
        self.generate(prompt, max_new_tokens, time.perf_counter)

    def close(self) -> None:
        self.server.close()


class LlamaServerBackend(BackendBase):
    """`Backend` over llama-server processes on one GGUF file."""

    name = NAME
    device = "cpu"
    memory_kind = "not measured (llama-server)"
    # Its batched verify passes can break near-ties unlike its one-token passes (ggml's
    # kernels accumulate in another order): a mismatch is reported, not held against it.
    token_exact = False
    # Serves `concurrency` > 1 (its slots, with companion requests per timed one).
    serves_concurrently = True

    def __init__(self, gguf: Path, binary: Path | None = None, threads: int | None = None,
                 n_ctx: int = 2048) -> None:
        if not gguf.is_file():
            raise BackendUnavailable(f"GGUF file not found: {gguf}")
        self.binary = binary or find_server()
        self.gguf = gguf
        # The user's --draft as a GGUF file (llama_draft drafts with it, or with its
        # first layers); None: a llama_draft config truncates the target.
        self.draft_gguf: Path | None = None
        if threads is None:
            import torch
            threads = torch.get_num_threads() or os.cpu_count() or 1
        self.threads = threads
        self.n_ctx = n_ctx
        # Prompts (token ids) that are never timed: the companions of a timed request at
        # concurrency > 1; and the timed ones, which pick their companions.
        self.companions: list[list[int]] = []
        self.timed: list[list[int]] = []
        self.label = f"llama-server ({server_version(self.binary)}, {gguf.name})"

    @classmethod
    def for_model(cls, model_spec: str, target: "LoadedModel", draft: "LoadedModel | None",
                  prompts: list[list[int]], max_new_tokens: int,
                  companions: list[list[int]] = (),
                  draft_spec: str | None = None) -> "LlamaServerBackend":
        """The backend for `--model model_spec` (a GGUF file, or the default model's),
        its context sized to the `prompts` it times and the `companions` (token ids)
        served beside them at concurrency > 1; `draft_spec`, the --draft as the user named
        it, a GGUF file (`draft` is our copy of it, whose vocabulary was checked)."""
        backend = cls(gguf_for(model_spec))
        if draft_spec is not None:
            backend.draft_gguf = draft_gguf_for(draft_spec)
        backend.fit_context(max((len(p) for p in [*prompts, *companions]), default=1),
                            max_new_tokens)
        backend.timed = [list(p) for p in prompts]
        timed = {tuple(p) for p in backend.timed}
        backend.companions = [list(p) for p in companions if tuple(p) not in timed]
        return backend

    def companion_offset(self, prompt: list[int]) -> int:
        """Where in the companion pool the companions of `prompt` start (the same for
        every arm, so that pairs stay paired)."""
        at = self.timed.index(prompt) if prompt in self.timed else 0
        return at * 7919 % max(len(self.companions), 1)

    def fit_context(self, longest_prompt: int, max_new_tokens: int) -> None:
        """Size the server's context to the workload (prompt + budget + 2 spare)."""
        need = longest_prompt + max_new_tokens + 2
        self.n_ctx = -(-need // CONTEXT_STEP) * CONTEXT_STEP

    def base_args(self, concurrency: int = 1) -> list[str]:
        """The flags every server of this backend gets, speculating or not: `concurrency`
        slots of the workload's context each."""
        from autotune.exports.llama_server import deployment_args
        return ["-m", str(self.gguf), *deployment_args(self.threads, self.n_ctx,
                                                       concurrency)]

    def draft_for(self, config: DecodeConfig) -> Path:
        """The draft GGUF of a `llama_draft` config: the --draft file, or the first
        `exits[0]` layers of it (of the target without one), written once and cached."""
        from autotune.models.gguf_draft import block_count, cached_truncated
        from autotune.models.loading import cache_root
        if not config.exits:
            if self.draft_gguf is None:
                raise AutotuneError("llama_draft with no exits drafts with the whole "
                                    "--draft, and none was given: set exits=L (the "
                                    "target's first L layers) or give --draft FILE.gguf")
            return self.draft_gguf
        stack = self.draft_gguf or self.gguf
        if config.exits[0] >= block_count(stack):
            return stack                              # all of it: the file itself
        return cached_truncated(stack, config.exits[0], cache_root() / "gguf-drafts")

    def runner(self, config: DecodeConfig) -> LlamaServerRunner:
        if config.method != "none":
            from autotune.exports import engine_losses
            losses = engine_losses(config, NAME, self.draft_gguf is not None)
            if losses:
                raise AutotuneError(f"llama-server cannot run it exactly: {losses[0]}")
        return LlamaServerRunner(self, config)

    def weights_bytes(self, config: DecodeConfig) -> int | None:
        return None

    def close(self) -> None:
        pass
