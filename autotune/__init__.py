"""autotune: an offline auto-tuner for LLM speculative decoding.

The public API is small on purpose: load a model, describe a candidate, measure it.
"""

from autotune.decoding.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.errors import AutotuneError
from autotune.models.loading import LoadedModel, load_model

__all__ = ["AutotuneError", "DecodeConfig", "LoadedModel", "SpeculativeDecoder", "load_model"]
__version__ = "0.1.0"
