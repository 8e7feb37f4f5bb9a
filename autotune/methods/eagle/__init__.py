"""`eagle`: a trained feature head over the target's own features (EAGLE-1, Li et al.
2024), distilled by `autotune train-draft --kind eagle` and given as `--draft DIR`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from autotune.schema.method_spec import MethodSpec, Preset

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter
    from autotune.replay.draft_cost import DraftCost


def _presets(n_layers: int) -> list[Preset]:
    # EAGLE-2's dynamic tree (as in layer_skip's eagle2_tree preset) over the trained
    # head it was made for; the short chain is our starting point, not a published one.
    return [Preset("eagle_chain", "EAGLE chain of 3 (a short chain, our starting point)",
                   {"method": "eagle", "k": 3, "exit_policy": "fixed"}, rank=10),
            Preset("eagle2_tree_head", "EAGLE-2 dynamic tree: top-k 10, depth 6, total "
                   "tokens 60", {"method": "eagle", "exit_policy": "fixed", "tree_width": 10,
                                 "tree_depth": 6, "tree_tokens": 60}, rank=11)]


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.eagle.drafter import EagleDrafter
    return EagleDrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.eagle.agreement import scorer
    return scorer


def _replay() -> Callable[..., Any]:
    from autotune.methods.eagle.replay import source
    return source


def _draft_cost() -> type[DraftCost]:
    from autotune.methods.eagle.replay import EagleCost
    return EagleCost


SPEC = MethodSpec(
    "eagle", label="eagle", color="#D55E00", needs_draft=True, uses_draft=True,
    can_tree=True, reads_target_features=True,
    about="an EAGLE-1 head over the target's features (`autotune train-draft --kind eagle`)",
    drafter=_drafter, scorer=_scorer, replay=_replay, draft_cost=_draft_cost,
    presets=_presets)
