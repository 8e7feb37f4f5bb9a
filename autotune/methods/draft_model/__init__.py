"""`draft_model`: a separate, smaller draft model (`--draft`) with its own cache, sharing
the target's vocabulary (Leviathan et al., 2023; Chen et al., 2023)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from autotune.schema.method_spec import MethodSpec, Preset

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter
    from autotune.replay.draft_cost import DraftCost


def _presets(n_layers: int) -> list[Preset]:
    return [
        Preset("hf_assisted", "transformers assisted generation defaults: "
               "num_assistant_tokens=20, schedule constant, assistant_confidence_threshold=0.4",
               {"method": "draft_model", "k": 20, "exit_policy": "confidence", "gamma": 0.4},
               rank=1, engine="hf"),
        Preset("sglang_chain", "SGLang chain drafting: speculative_num_steps=3, eagle_topk=1",
               {"method": "draft_model", "k": 3, "exit_policy": "fixed"}, rank=4,
               engine="sglang"),
        Preset("sglang_tree", "SGLang STANDALONE tree example: speculative_num_steps=4, "
               "eagle_topk=2, num_draft_tokens=7 (the root included)",
               {"method": "draft_model", "exit_policy": "fixed", "tree_width": 2,
                "tree_depth": 4, "tree_tokens": 6}, rank=5, engine="sglang"),
    ]


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.draft_model.drafter import DraftModelDrafter
    return DraftModelDrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.draft_model.agreement import scorer
    return scorer


def _replay() -> Callable[..., Any]:
    from autotune.methods.draft_model.replay import source
    return source


def _draft_cost() -> type[DraftCost]:
    from autotune.methods.draft_model.replay import DraftModelCost
    return DraftModelCost


SPEC = MethodSpec(
    "draft_model", label="draft_model", color="#E69F00", needs_draft=True,
    uses_draft=True, can_tree=True,
    about="a separate, smaller draft model with the target's vocabulary",
    drafter=_drafter, scorer=_scorer, replay=_replay, draft_cost=_draft_cost,
    presets=_presets)
