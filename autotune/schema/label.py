"""A config's short human label (progress lines, tables, the report): torch-free."""

from __future__ import annotations

from typing import Any

from autotune.schema.config import KNOBS, DecodeConfig, shape_of_mapping
from autotune.schema.methods import find_method

_DEFAULTS = DecodeConfig()       # a key a config lacks reads as its default


# The exit policies that read γ (their label shows it).
_GAMMA_POLICIES = KNOBS["gamma"].policies


def describe(config: dict[str, Any]) -> str:
    """A short human label for a config (progress line, tables): `baseline (AR)`, or the
    method, its draft shape (`k=4`, `tree w4 d5 t30`), its own knobs' summary and the
    exit policy unless `fixed`, e.g. `layer_skip tree w4 d5 t30 attn=3 mlp=1`."""
    method = config.get("method", _DEFAULTS.method)
    spec = find_method(method)
    if spec is not None and not spec.drafts:
        return "baseline (AR)"
    shape = shape_of_mapping(config)
    # A hand-edited config whose shape keys do not parse still gets a label.
    parts = [str(method), shape.label() if shape is not None else f"k={config.get('k')}"]
    if spec is not None and spec.summary is not None:
        parts.append(spec.summary(config))
    drafter = config.get("drafter", _DEFAULTS.drafter)      # a per-category folder's member
    if drafter != _DEFAULTS.drafter and spec is not None and spec.uses_draft:
        parts.append(f"drafter={drafter}")
    policy = config.get("exit_policy", _DEFAULTS.exit_policy)     # a tree always runs `fixed`
    if policy in _GAMMA_POLICIES:
        parts.append(f"{policy} γ={config.get('gamma'):.2f}")
    elif policy != _DEFAULTS.exit_policy:
        parts.append(policy)
    return " ".join(parts)
