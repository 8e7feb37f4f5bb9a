"""`sorted_exit`: S2D's early exits over a draft stack (Kavehzadeh et al., 2024): a draft
token comes from the first exit (`exits`) whose top-1 probability reaches its threshold,
over `--draft`'s layers when given, else the target's (through a trained `exits`
drafter's adapters when that is `--draft`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from autotune.schema.method_spec import DRAFT_OR_TARGET_STACK, DerivedKnob, MethodSpec
from autotune.methods.sorted_exit import checks

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter
    from autotune.replay.draft_cost import DraftCost


def _summary(c: Mapping[str, Any]) -> str:
    return f"exits={','.join(map(str, c.get('exits') or []))}"


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.sorted_exit.drafter import SortedExitDrafter
    return SortedExitDrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.sorted_exit.agreement import scorer
    return scorer


def _replay() -> Callable[..., Any]:
    from autotune.methods.sorted_exit.replay import source
    return source


def _draft_cost() -> type[DraftCost]:
    from autotune.methods.sorted_exit.replay import SortedExitCost
    return SortedExitCost


SPEC = MethodSpec(
    "sorted_exit", label="sorted_exit", color="#CC79A7", uses_draft=True,
    layer_stack=DRAFT_OR_TARGET_STACK, can_tree=True,
    about=("S2D: the target (or the draft) drafts from early exits, each with a confidence "
           "threshold"),
    drafter=_drafter, scorer=_scorer, replay=_replay, draft_cost=_draft_cost,
    derived=(DerivedKnob("n_exits", "number of exits", "exits"),), check=checks.check,
    summary=_summary)
