"""`ngram`'s config keys: the n-gram sizes looked up and TensorRT-LLM's pool.

Torch-free: the method's `SPEC` reads this when the registry lists the methods.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.knobs import MethodKnob, check_knobs

NGRAM_MIN = MethodKnob("ngram_min", "int", 1, "shortest prompt-lookup n-gram", low=1)
NGRAM_MAX = MethodKnob("ngram_max", "int", 3, "longest prompt-lookup n-gram", low=1)
NGRAM_POOL = MethodKnob(
    "ngram_pool", "str", "private",
    "TensorRT-LLM's n-gram pool (`engine=trtllm`): this request's own (`private`) or one "
    "shared by every request (`public`; is_public_pool)", choices=("private", "public"))
KNOBS = (NGRAM_MIN, NGRAM_MAX, NGRAM_POOL)


def check_every_config(config: Any, n_layers: int | None) -> None:
    """1 <= ngram_min <= ngram_max and a known pool, whatever the method (as these keys
    have always been checked)."""
    if not NGRAM_MIN.low <= config.ngram_min <= config.ngram_max:
        raise AutotuneError(f"ngram_min={config.ngram_min}, ngram_max={config.ngram_max}: "
                            "need 1 <= min <= max")
    check_knobs(config, NGRAM_POOL)


def check(config: Any, n_layers: int | None) -> None:
    """The public pool is TensorRT-LLM's, drafted without an exit rule."""
    if config.ngram_pool == "public" and (config.engine != "trtllm"
                                          or config.exit_policy != "fixed"):
        raise AutotuneError("ngram_pool=public is TensorRT-LLM's shared n-gram pool: "
                            "it needs engine=trtllm and exit_policy=fixed")
