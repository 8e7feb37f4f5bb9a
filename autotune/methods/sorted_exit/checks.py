"""`sorted_exit`'s config keys: the exit depths and their confidence thresholds.

`exits` is read by `llama_draft` too (its draft's depth: `reads=("exits",)` in its
spec). Torch-free: the method's `SPEC` reads this when the registry lists the methods.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.knobs import MethodKnob, check_exit_order, within

EXITS = MethodKnob(
    "exits", "int_list", (),
    "`sorted_exit`: exit depths n1<…<nm over the draft stack (the target, or `--draft`); "
    "`llama_draft`: the one depth its GGUF draft keeps (none: the whole `--draft`)",
    low=1)
THRESHOLDS = MethodKnob(
    "thresholds", "float_list", (),
    "`sorted_exit`: top-1 threshold per exit; the deepest exit always emits",
    low=0.0, high=1.0)
KNOBS = (EXITS, THRESHOLDS)


def check(config: Any, n_layers: int | None) -> None:
    """Exits given, in order, and at most one threshold per exit, each a probability."""
    exits, thresholds = config.exits, config.thresholds
    if not exits:
        raise AutotuneError(f"method={config.method} needs exits, e.g. exits=8,16")
    check_exit_order(exits, f"exits={list(exits)}", low=EXITS.low)
    if len(thresholds) not in (0, len(exits) - 1, len(exits)):
        raise AutotuneError(
            f"thresholds has {len(thresholds)} values for {len(exits)} "
            "exits: give one per exit (the deepest always emits)")
    if any(not within(THRESHOLDS.low, THRESHOLDS.high, t) for t in thresholds):
        raise AutotuneError(f"thresholds={list(thresholds)} must lie in [0, 1]")

