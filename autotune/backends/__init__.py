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

Each engine's backend is declared once, in `registry.BACKEND_RECORDS`; every name below
is read from there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.backends.base import (Backend, BackendBase, BackendUnavailable, EngineCost,
                                    Runner, RunnerBase)
from autotune.backends.registry import BACKEND_RECORDS, BackendRequest, EngineBackend
from autotune.backends.startup import known_startup
from autotune.schema.engines import AUTOTUNE, retirement

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.workloads.prompts import Prompt

__all__ = ["BACKENDS", "BACKEND_RECORDS", "Backend", "BackendBase", "BackendRequest",
           "BackendUnavailable", "ENGINE_BACKENDS", "EngineBackend", "EngineCost", "Runner",
           "RunnerBase", "engine_cost", "input_error", "measured_methods", "open_backend",
           "unavailable"]

# Engines with a backend that measures in the engine itself (the others' --target
# searches measure in our decoder under their rules), in BACKEND_RECORDS' order.
ENGINE_BACKENDS: tuple[str, ...] = tuple(
    name for name, record in BACKEND_RECORDS.items()
    if record.opener is not None and name != AUTOTUNE.name)
# Every engine a config can be measured in (`measure --in`): our decoder first.
BACKENDS: tuple[str, ...] = (AUTOTUNE.name, *ENGINE_BACKENDS)


def measured_methods(engine: str) -> tuple[str, ...] | None:
    """The speculative methods `engine`'s backend measures in the engine here (None:
    whatever its export writes): a search whose answer is raced in the engine searches
    those only."""
    record = BACKEND_RECORDS.get(engine)
    return record.methods if record is not None else None


def engine_cost(engine: str, model_spec: str | None = None) -> EngineCost:
    """What measuring in `engine` costs beside our decoder (ours: nothing more); with
    `model_spec`, one start-up priced at what this machine measured for it where it has
    (`autotune.backends.startup`)."""
    record = BACKEND_RECORDS.get(engine)
    if record is None:
        return EngineCost()
    setting = record.cost_setting()
    cost = setting if setting is not None else record.cost
    if model_spec is not None and record.startup is not None:
        measured = known_startup(record.startup(model_spec))
        if measured is not None:
            cost = dataclasses.replace(cost, start_s=measured)
    return cost


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
    record = BACKEND_RECORDS.get(engine)
    if record is not None and record.opener is not None:
        return record.opener(BackendRequest(target, draft, model_spec, prompts,
                                            max_new_tokens, companions, draft_spec))
    if (retired := retirement(engine)) is not None:
        raise BackendUnavailable(retired)
    raise BackendUnavailable(f"no measurement backend runs in {engine}; engines with one: "
                             f"{', '.join(BACKENDS)}")


def input_error(engine: str, model_spec: str, draft_spec: str | None) -> str | None:
    """What in the user's input keeps `engine` from measuring (a model it cannot read, a
    draft it cannot use), or None: an error whatever the fidelity."""
    record = BACKEND_RECORDS.get(engine)
    return record.input_error(model_spec, draft_spec) if record is not None else None


def unavailable(engine: str, model_spec: str, draft_spec: str | None) -> str | None:
    """Why `engine` cannot measure here (one line), or None; checked before any model
    loads (for hf: nothing to check, transformers is a dependency). The engine's own
    check first (is it installed), then what in the input it cannot read."""
    if (retired := retirement(engine)) is not None:
        return retired
    record = BACKEND_RECORDS.get(engine)
    if record is None:
        return None
    missing = record.unavailable(model_spec, draft_spec)
    return missing if missing is not None else record.input_error(model_spec, draft_spec)
