"""`llama_draft`'s config keys: llama-server's draft-simple flags and defaults, and its
one depth (sorted_exit's `exits`, which it reads).

common/arg.cpp L4150-4213, common/common.h L328-333 (PROVENANCE["llama_server"]); `k` is
--spec-draft-n-max. Torch-free: the method's `SPEC` reads this when the registry lists
the methods.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.knobs import MethodKnob, check_exit_order
from autotune.methods.sorted_exit.knobs import EXITS

KNOBS = (
    MethodKnob("llama_draft_n_min", "int", 0,
               "draft-simple: a draft shorter than this is "
               "dropped (--spec-draft-n-min)", low=0),
    MethodKnob("llama_draft_p_min", "float", 0.0,
               "draft-simple: drafting stops at a token whose "
               "draft probability (over the draft's top 10) is below this (--spec-draft-p-min)",
               low=0.0, high=1.0),
)
READS = (EXITS.name,)


def check(config: Any, n_layers: int | None) -> None:
    """One depth at most (none: the whole --draft), drafted as the server does."""
    exits = config.exits
    if len(exits) > 1:
        raise AutotuneError(f"method=llama_draft drafts from one depth, not "
                            f"exits={list(exits)}: give exits=L (the draft stack's "
                            "first L layers) or none (the whole --draft)")
    if exits:
        check_exit_order(exits, f"exits={list(exits)}", low=EXITS.low)
    if config.exit_policy != "fixed":
        raise AutotuneError("method=llama_draft drafts as llama-server does (its p_min "
                            "is llama_draft_p_min): use exit_policy=fixed")
