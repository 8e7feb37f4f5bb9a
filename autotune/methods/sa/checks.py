"""`sa`'s rules on a config: TensorRT-LLM's SADecodingConfig.max_matching_ngram_size.

Its key is a `DecodeConfig` field (`own_knob`, schema/config.py). Torch-free: the
method's `SPEC` names these checks.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.config import check_knobs


def check_every_config(config: Any, n_layers: int | None) -> None:
    """-1 or a size of at least 1, whatever the method (as it has always been checked):
    0 would match nothing."""
    check_knobs(config, "sa_max_matching_ngram_size")
    if config.sa_max_matching_ngram_size == 0:
        raise AutotuneError("sa_max_matching_ngram_size=0: give -1 (the longest "
                            "match) or a size of at least 1")
