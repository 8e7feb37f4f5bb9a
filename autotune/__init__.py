"""autotune: an offline auto-tuner for LLM speculative decoding.

The public API is small on purpose: load a model, describe a candidate, measure it.

Its names are imported on first use (PEP 562), so that `import autotune.cli.main` (and so
`autotune --help`, `autotune validate`) or the report loads neither torch nor
transformers: a submodule import runs this file first.

That is also why the built-in methods are registered here: every entry point (the
`autotune` command, `import autotune`, `python -m autotune...`, an engine's worker
process) runs this file before anything else of autotune, so importing
`autotune.methods` (their torch-free list, `BUILTINS`) fills the method registry before
any module reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import autotune.methods  # noqa: F401  (registers the built-in methods)
from autotune.common.version import __version__

if TYPE_CHECKING:
    from autotune.common.errors import AutotuneError
    from autotune.schema.config import DecodeConfig
    from autotune.decoding.decoder import SpeculativeDecoder
    from autotune.models.loading import LoadedModel, load_model

__all__ = ["AutotuneError", "DecodeConfig", "LoadedModel", "SpeculativeDecoder", "load_model"]


def __getattr__(name: str) -> Any:
    """A public name, imported from its home on first use (the next lookup finds it in
    this module's globals)."""
    if name == "AutotuneError":
        from autotune.common.errors import AutotuneError as value
    elif name == "DecodeConfig":
        from autotune.schema.config import DecodeConfig as value
    elif name == "SpeculativeDecoder":
        from autotune.decoding.decoder import SpeculativeDecoder as value
    elif name == "LoadedModel":
        from autotune.models.loading import LoadedModel as value
    elif name == "load_model":
        from autotune.models.loading import load_model as value
    else:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
