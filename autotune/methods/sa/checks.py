"""`sa`'s config key: TensorRT-LLM's SADecodingConfig.max_matching_ngram_size.

Torch-free: the method's `SPEC` reads this when the registry lists the methods.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.knobs import MethodKnob, check_knobs

MAX_MATCHING = MethodKnob(
    "sa_max_matching_ngram_size", "int", -1,
    "`sa`: the longest suffix matched (-1 = the longest repeated suffix; TensorRT-LLM "
    "max_matching_ngram_size)", low=-1)
KNOBS = (MAX_MATCHING,)


def check_every_config(config: Any, n_layers: int | None) -> None:
    """-1 or a size of at least 1, whatever the method (as it has always been checked):
    0 would match nothing."""
    check_knobs(config, MAX_MATCHING)
    if config.sa_max_matching_ngram_size == 0:
        raise AutotuneError("sa_max_matching_ngram_size=0: give -1 (the longest "
                            "match) or a size of at least 1")
