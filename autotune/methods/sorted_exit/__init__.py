"""`sorted_exit`: S2D's early exits over a draft stack (Kavehzadeh et al., 2024): a draft
token comes from the first exit (`exits`) whose top-1 probability reaches its threshold,
over `--draft`'s layers when given, else the target's (through a trained `exits`
drafter's adapters when that is `--draft`)."""

from __future__ import annotations

from typing import Any, Mapping

from autotune.schema.method_spec import DRAFT_OR_TARGET_STACK, DerivedKnob, MethodSpec
from autotune.methods.sorted_exit import knobs


def _summary(c: Mapping[str, Any]) -> str:
    return f"exits={','.join(map(str, c.get('exits') or []))}"


SPEC = MethodSpec(
    "sorted_exit", label="sorted_exit", color="#CC79A7", order=30, uses_draft=True,
    layer_stack=DRAFT_OR_TARGET_STACK, can_tree=True,
    about=("S2D: the target (or the draft) drafts from early exits, each with a confidence "
           "threshold"),
    drafter=f"{__name__}.drafter:SortedExitDrafter", scorer=f"{__name__}.agreement:scorer",
    replay=f"{__name__}.replay:source", draft_cost=f"{__name__}.replay:SortedExitCost",
    derived=(DerivedKnob("n_exits", "number of exits", "exits"),), summary=_summary,
    knobs=knobs.KNOBS, check=knobs.check)
