"""`suffix`'s rules on a config: the ranges of vLLM's `suffix_decoding_*` fields.

Its keys are `DecodeConfig` fields (`own_knob`, schema/config.py). Torch-free: the
method's `SPEC` names these checks.
"""

from __future__ import annotations

from typing import Any

from autotune.schema.config import check_knobs

KEYS = ("suffix_max_tree_depth", "suffix_max_cached_requests", "suffix_max_spec_factor",
        "suffix_min_token_prob")


def check_every_config(config: Any, n_layers: int | None) -> None:
    """Their ranges, whatever the method (as they have always been checked)."""
    check_knobs(config, *KEYS)
