"""`suffix`'s config keys: vLLM's `suffix_decoding_*` fields, with their defaults.

Names and defaults as SpeculativeConfig in PROVENANCE["vllm"].version
(vllm/config/speculative.py L537-556). Torch-free: the method's `SPEC` reads this when
the registry lists the methods.
"""

from __future__ import annotations

from typing import Any

from autotune.schema.knobs import MethodKnob, check_knobs

KNOBS = (
    MethodKnob("suffix_max_tree_depth", "int", 24,
               "suffix trees' depth: the longest match plus draft "
               "(vLLM suffix_decoding_max_tree_depth)", low=1),
    MethodKnob("suffix_max_cached_requests", "int", 10000,
               "earlier requests' outputs kept for drafting, FIFO "
               "(0 = this request's own tokens only; vLLM suffix_decoding_max_cached_requests)",
               low=0),
    MethodKnob("suffix_max_spec_factor", "float", 1.0,
               "draft at most factor × match length tokens "
               "(vLLM suffix_decoding_max_spec_factor)", low=0.0),
    MethodKnob("suffix_min_token_prob", "float", 0.1,
               "draft only tokens whose frequency estimate is "
               "at least this (vLLM suffix_decoding_min_token_prob)", low=0.0, high=1.0),
)


def check_every_config(config: Any, n_layers: int | None) -> None:
    """Their ranges, whatever the method (as they have always been checked)."""
    check_knobs(config, *KNOBS)
