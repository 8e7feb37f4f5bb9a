"""SGLang as a measurement backend: the interface it takes, and a refusal.

It would run through its offline Python API, `sglang.Engine(model_path=...,
speculative_*=...)`, with one engine instance per config (its own no-speculation instance
for the baseline), reused across prompts, its `generate` driven one prompt at a time so
that the clock, the interleaving and the paired statistics stay
`autotune.measure.measurement`'s, as vLLM's backend does (`autotune/backends/vllm.py`,
which runs vLLM's CPU build here). SGLang does not run on this kind of machine (CPU
only, no CUDA; docs/engines/sglang.md says what was tried), and a backend that has never
run is not offered: on
a machine without the package or a GPU, opening one fails with a one-line error that
says what is missing; where both are present it says the backend is not built yet. No
measurement is ever faked.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from autotune.backends.base import BackendUnavailable

# engine -> (Python package, what the user would install, label)
_ENGINES = {"sglang": ("sglang", "pip install 'sglang[all]'", "SGLang")}


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:                  # pragma: no cover - torch is a dependency
        return False
    return bool(torch.cuda.is_available())


def missing(engine: str) -> list[str]:
    """What this machine lacks to run `engine`'s backend (empty: nothing)."""
    package, install, _ = _ENGINES[engine]
    lacks = []
    if importlib.util.find_spec(package) is None:
        lacks.append(f"the {package} package ({install})")
    if not _cuda_available():
        lacks.append("a CUDA GPU")
    return lacks


def open_gpu_backend(engine: str, *args: Any, **kwargs: Any) -> Any:
    """Refuse, in one line, to measure in SGLang here (see the module docstring)."""
    _, _, label = _ENGINES[engine]
    lacks = missing(engine)
    if lacks:
        raise BackendUnavailable(
            f"{label} cannot measure on this machine: it needs {' and '.join(lacks)}; "
            f"search with --target {engine} without --fidelity engine to measure in "
            f"autotune's decoder under {label}'s drafting rules")
    raise BackendUnavailable(
        f"measuring in {label} itself is not built yet (the interface is "
        f"autotune/backends/base.py); search with --target {engine} without --fidelity "
        f"engine to measure in autotune's decoder under {label}'s drafting rules")
