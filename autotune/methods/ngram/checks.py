"""`ngram`'s rules on a config: the n-gram sizes looked up and TensorRT-LLM's pool.

Its keys are `DecodeConfig` fields (`own_knob`, schema/config.py). Torch-free: the
method's `SPEC` names these checks.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.config import KNOBS, check_knobs


def check_every_config(config: Any, n_layers: int | None) -> None:
    """1 <= ngram_min <= ngram_max and a known pool, whatever the method (as these keys
    have always been checked)."""
    low = KNOBS["ngram_min"].low
    assert low is not None
    if not low <= config.ngram_min <= config.ngram_max:
        raise AutotuneError(f"ngram_min={config.ngram_min}, ngram_max={config.ngram_max}: "
                            "need 1 <= min <= max")
    check_knobs(config, "ngram_pool")


def check(config: Any, n_layers: int | None) -> None:
    """The public pool is TensorRT-LLM's, drafted without an exit rule."""
    if config.ngram_pool == "public" and (config.engine != "trtllm"
                                          or config.exit_policy != "fixed"):
        raise AutotuneError("ngram_pool=public is TensorRT-LLM's shared n-gram pool: "
                            "it needs engine=trtllm and exit_policy=fixed")
