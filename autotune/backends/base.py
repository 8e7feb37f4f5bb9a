"""The measurement-backend interface: what `autotune.measure.measurement` times a config through.

A backend runs a DecodeConfig in one engine and hands back a `Generation` per prompt;
`measure.measure_arms` does everything else (warm-up, interleaving the engine's own
no-speculation run per prompt, the clock, pairing, statistics), so an engine is timed
exactly as our decoder is. One runner per config, reused across prompts (an engine
instance is built once per config, never per prompt).

Torch-free: `--help`, the search's argument checks and the report import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Protocol

from autotune.backends.startup import StartupKey
from autotune.common.errors import AutotuneError

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig
    from autotune.decoding.decoder import Generation

Clock = Callable[[], float]


class BackendUnavailable(AutotuneError):
    """The engine cannot run on this machine (not installed, no GPU, wrong model file):
    the message says what is missing, in one line."""


def executable_from_env(variable: str) -> Path | None:
    """The executable the environment variable `variable` names (None when it is unset);
    BackendUnavailable, one line, when it names no executable file. How a user points a
    backend at an engine binary or interpreter of their own."""
    named = os.environ.get(variable)
    if not named:
        return None
    path = Path(named).expanduser()
    if path.is_file() and os.access(path, os.X_OK):
        return path
    raise BackendUnavailable(f"{variable}={named} is not an executable file")


class Runner(Protocol):
    """One config, ready to generate in its engine. `RunnerBase` gives the optional
    parts (cross-request state, cleanup) defaults, so `measure_arms` calls them all."""

    def generate(self, prompt: list[int], max_new_tokens: int, clock: Clock,
                 generator: Any = None, *, category: str | None = None) -> "Generation":
        """Generate up to `max_new_tokens` after the token ids `prompt` (stopping after an
        EOS), reading `clock()` where the prefill phase ends and where decoding ends.
        `generator` is a seeded torch.Generator for sampling (engines that seed
        differently derive their seed from it). `category`: the prompt's workload
        category (our decoder routes a per-category drafter by it; engines ignore it)."""
        ...

    @property
    def stateful(self) -> bool:
        """Whether the engine keeps state across requests (earlier outputs), so each
        repeat must `forget` and re-`absorb` the history."""
        ...

    def forget(self) -> None:
        """Start afresh, as a restarted engine does."""
        ...

    def absorb(self, prompt: list[int], response: list[int], max_new_tokens: int) -> None:
        """File a request served untimed into the cross-request state."""
        ...

    def share_prefills(self, memo: Any) -> None:
        """Take the target's prefill of a prompt from `memo` (a
        `decoding.prefill.PrefillMemo`) when another runner of this measurement made it
        already; an engine that prefills in its own process ignores it."""
        ...

    def static_forwards(self, categories: Collection[str | None] = (None,)
                        ) -> Mapping[str, "StaticForward"]:
        """The static (graphed) forwards this runner decodes prompts of `categories` on,
        by model name, whose captures the measurement counts; an engine: none."""
        ...

    def reserve(self, prompt_len: int, max_new_tokens: int,
                categories: Collection[str | None] = (None,)) -> bool:
        """Size its static caches for `max_new_tokens` after a `prompt_len` token prompt
        (of `categories`) before anything is timed; whether a cache grew (its graphs
        were dropped, so the measurement warms up again). An engine: nothing to size."""
        ...

    def close(self) -> None:
        """Free what this config's engine instance holds."""
        ...


class StaticForward(Protocol):
    """A forward whose passes may replay captured graphs (`models.static_forward`): what
    a measurement reads of it."""

    captures: int                     # graphs captured, ever

    def graph_mode(self) -> str:
        """How its passes run: "cuda graphs", "eager", "eager (capture failed: ...)"."""
        ...


class RunnerBase:
    """Defaults for a `Runner`'s optional parts: no cross-request state, nothing to
    free. A runner inherits it and overrides what its engine has."""

    @property
    def stateful(self) -> bool:
        return False

    def forget(self) -> None:
        """Nothing kept, nothing to forget."""

    def absorb(self, prompt: list[int], response: list[int], max_new_tokens: int) -> None:
        """Nothing kept: a served request leaves no trace."""

    def share_prefills(self, memo: Any) -> None:
        """Every prefill runs in the engine itself."""

    def static_forwards(self, categories: Collection[str | None] = (None,)
                        ) -> Mapping[str, StaticForward]:
        """No static forward of ours: the engine runs its own passes."""
        return {}

    def reserve(self, prompt_len: int, max_new_tokens: int,
                categories: Collection[str | None] = (None,)) -> bool:
        """No static cache of ours to size."""
        return False

    def close(self) -> None:
        """Nothing held beyond what garbage collection frees."""


class Backend(Protocol):
    """A measurement backend.

    name: the engine (`autotune`, `hf`, `llama_server`, `vllm`, `sglang`), as in --target.
    label: who measured, for the report and best.json ("llama-server (VERSION,
        SmolLM2-135M-Instruct.Q4_1.gguf)").
    device: the torch device string whose queue the clock synchronises ("cpu" for
        engines that synchronise themselves).
    memory_kind: how `weights_bytes` + a generation's cache_bytes measure peak memory,
        or a sentence saying memory is not measured.
    token_exact: whether the engine's multi-token (verify) passes give the logits of its
        one-token passes, so that its greedy speculative output must equal its greedy
        output token for token. Where not (llama-server: its batched quantized kernels break
        near-ties differently), a mismatch is reported per prompt but does not disqualify
        a config, as bf16 multi-token numerics do not.
    serves_concurrently: whether it measures `concurrency` > 1 (default in `BackendBase`:
        one request at a time).
    idle_engines: how many closed runners' engines stay started for the next runner of
        their config (vLLM: a compiled engine starts in a minute or more), so that a race
        starts its arms' engines once, before its clock (`BackendBase`: 0, none).
    """

    name: str
    label: str
    device: str
    memory_kind: str
    token_exact: bool
    serves_concurrently: bool
    idle_engines: int

    def runner(self, config: "DecodeConfig") -> Runner:
        """A runner for `config` (method `none`: the engine without speculation). Raises
        AutotuneError, one line, for a config this engine cannot run."""
        ...

    def weights_bytes(self, config: "DecodeConfig") -> int | None:
        """Bytes of the weights `config` reads, or None where not measured."""
        ...

    def close(self) -> None:
        """Free what the backend holds (engine instances, temporary files)."""
        ...


@dataclass(frozen=True)
class EngineCost:
    """What measuring in an engine costs beside our decoder, for a time budget's plan
    (`autotune.pipeline.budget`), in AR tokens of our decoder so that it holds across
    machines: starting one engine instance (one per config) and a decode token there
    over one in ours. `start_s`: one start-up in seconds as this machine measured it
    (`autotune.backends.startup`), which prices the start-up where known: a start-up
    does not scale with the decode speed the tokens are counted in."""

    start_tokens: float = 0.0
    token_ratio: float = 1.0
    start_s: float | None = None

    def start_seconds(self, ar_s: float) -> float:
        """One engine's start-up in seconds at `ar_s` seconds per AR token: measured
        where known, else the prior in AR tokens."""
        return self.start_s if self.start_s is not None else self.start_tokens * ar_s


class BackendBase:
    """Defaults for a `Backend`'s optional parts: one request at a time, nothing to
    free. A backend inherits it and overrides what its engine has."""

    serves_concurrently: bool = False
    idle_engines: int = 0
    # Where this backend's engine start-ups are recorded (`autotune.backends.startup`;
    # None: it starts nothing, or the opener set no key).
    startup_key: StartupKey | None = None

    def close(self) -> None:
        """Nothing held beyond what garbage collection frees."""
