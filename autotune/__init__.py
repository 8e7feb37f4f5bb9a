"""autotune: an offline auto-tuner for LLM speculative decoding.

The public API is small on purpose: load a model, describe a candidate, measure it.

Its names are imported on first use (PEP 562), so that `import autotune.cli.main` (and so
`autotune --help`, `autotune validate`) or the report loads neither torch nor
transformers: a submodule import runs this file first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.common.errors import AutotuneError
    from autotune.schema.config import DecodeConfig
    from autotune.decoding.decoder import SpeculativeDecoder
    from autotune.models.loading import LoadedModel, load_model

__all__ = ["AutotuneError", "DecodeConfig", "LoadedModel", "SpeculativeDecoder", "load_model"]
__version__ = "0.1.0"

# Public name -> the module that defines it.
_HOMES = {
    "AutotuneError": "autotune.common.errors",
    "DecodeConfig": "autotune.schema.config",
    "LoadedModel": "autotune.models.loading",
    "SpeculativeDecoder": "autotune.decoding.decoder",
    "load_model": "autotune.models.loading",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value              # the next lookup skips this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
