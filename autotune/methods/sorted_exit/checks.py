"""`sorted_exit`'s rules on a config: the exit depths and their confidence thresholds.

Its keys are `DecodeConfig` fields (`own_knob`, schema/config.py; `exits` is read by
`llama_draft` too). Torch-free: the method's `SPEC` names these checks.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.config import KNOBS
from autotune.schema.knobs import check_exit_order, within


def check(config: Any, n_layers: int | None) -> None:
    """Exits given, in order, and at most one threshold per exit, each a probability."""
    exits, thresholds = config.exits, config.thresholds
    if not exits:
        raise AutotuneError(f"method={config.method} needs exits, e.g. exits=8,16")
    check_exit_order(exits, f"exits={list(exits)}", low=KNOBS["exits"].low)
    if len(thresholds) not in (0, len(exits) - 1, len(exits)):
        raise AutotuneError(
            f"thresholds has {len(thresholds)} values for {len(exits)} "
            "exits: give one per exit (the deepest always emits)")
    bounds = KNOBS["thresholds"]
    if any(not within(bounds.low, bounds.high, t) for t in thresholds):
        raise AutotuneError(f"thresholds={list(thresholds)} must lie in [0, 1]")
