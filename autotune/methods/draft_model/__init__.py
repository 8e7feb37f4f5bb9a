"""`draft_model`: a separate, smaller draft model (`--draft`) with its own cache, sharing
the target's vocabulary (Leviathan et al., 2023; Chen et al., 2023)."""

from __future__ import annotations

from autotune.schema.method_spec import MethodSpec, Preset


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


SPEC = MethodSpec(
    "draft_model", label="draft_model", color="#E69F00", order=10, needs_draft=True,
    uses_draft=True, can_tree=True,
    about="a separate, smaller draft model with the target's vocabulary",
    drafter=f"{__name__}.drafter:DraftModelDrafter", scorer=f"{__name__}.agreement:scorer",
    replay=f"{__name__}.replay:source", draft_cost=f"{__name__}.replay:DraftModelCost",
    presets=_presets)
