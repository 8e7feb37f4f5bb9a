"""`llama_draft`'s rules on a config: one depth (sorted_exit's `exits`, which it reads),
drafted as llama-server drafts (its p_min is `llama_draft_p_min`).

Its keys are `DecodeConfig` fields (`own_knob`, schema/config.py). Torch-free: the
method's `SPEC` names these checks.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.config import KNOBS
from autotune.schema.knobs import check_exit_order


def check(config: Any, n_layers: int | None) -> None:
    """One depth at most (none: the whole --draft), drafted as the server does."""
    exits = config.exits
    if len(exits) > 1:
        raise AutotuneError(f"method=llama_draft drafts from one depth, not "
                            f"exits={list(exits)}: give exits=L (the draft stack's "
                            "first L layers) or none (the whole --draft)")
    if exits:
        check_exit_order(exits, f"exits={list(exits)}", low=KNOBS["exits"].low)
    if config.exit_policy != "fixed":
        raise AutotuneError("method=llama_draft drafts as llama-server does (its p_min "
                            "is llama_draft_p_min): use exit_policy=fixed")
