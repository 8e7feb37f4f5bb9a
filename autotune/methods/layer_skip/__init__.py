"""`layer_skip`: Draft & Verify self-speculation (Zhang et al., 2024): the draft is the
target itself with some attention and MLP sublayers skipped (`attn_skip`, `mlp_skip`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from autotune.schema.method_spec import TARGET_STACK, DerivedKnob, MethodSpec, Preset

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter
    from autotune.replay.draft_cost import DraftCost


def _summary(c: Mapping[str, Any]) -> str:
    return f"attn={len(c.get('attn_skip') or [])} mlp={len(c.get('mlp_skip') or [])}"


def _upper_attention(n_layers: int) -> list[int]:
    # Draft & Verify publishes searched masks per model, not a default one; for a model
    # it has not searched we start from the attention of every other layer in the upper
    # half, which its Fig. 6 and SWIFT find the most redundant. Our choice, not theirs.
    return list(range(n_layers // 2, n_layers - 1, 2))


def _presets(n_layers: int) -> list[Preset]:
    upper = _upper_attention(n_layers)
    return [
        Preset("dv_default", "Draft & Verify: max draft 8, threshold 0.8, adaptive "
               "(auto_parameters α 0.9, ε 0.01, β1 0.5, β2 0.9)",
               {"method": "layer_skip", "k": 8, "exit_policy": "adaptive", "gamma": 0.8,
                "target_acceptance": 0.9, "epsilon": 0.01, "beta1": 0.5, "beta2": 0.9,
                "attn_skip": upper, "mlp_skip": []}, rank=3),
        # EAGLE-2's tree (top-k 10, depth 6, 60 tokens) is tuned for its trained head on a
        # GPU; over the layer-skip draft above it is our starting point, not theirs.
        Preset("eagle2_tree", "EAGLE-2 dynamic tree: top-k 10, depth 6, total tokens 60 "
               "(over the dv_default mask)",
               {"method": "layer_skip", "exit_policy": "fixed", "tree_width": 10,
                "tree_depth": 6, "tree_tokens": 60, "attn_skip": upper, "mlp_skip": []}, rank=6),
    ]


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.layer_skip.drafter import LayerSkipDrafter
    return LayerSkipDrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.layer_skip.agreement import scorer
    return scorer


def _replay() -> Callable[..., Any]:
    from autotune.methods.layer_skip.replay import source
    return source


def _draft_cost() -> type[DraftCost]:
    from autotune.methods.layer_skip.replay import LayerSkipCost
    return LayerSkipCost


SPEC = MethodSpec(
    "layer_skip", label="layer_skip", color="#009E73", layer_stack=TARGET_STACK,
    can_tree=True,
    about="Draft & Verify: the target drafts with some attention / MLP sublayers skipped",
    drafter=_drafter, scorer=_scorer, replay=_replay, draft_cost=_draft_cost,
    derived=(DerivedKnob("n_attn_skipped", "attention layers skipped", "attn_skip"),
             DerivedKnob("n_mlp_skipped", "MLP layers skipped", "mlp_skip")),
    summary=_summary, presets=_presets)
