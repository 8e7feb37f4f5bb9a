"""`eagle`: a trained feature head over the target's own features (EAGLE-1, Li et al.
2024), distilled by `autotune train-draft --kind eagle` and given as `--draft DIR`."""

from __future__ import annotations

from autotune.schema.method_spec import MethodSpec, Preset


def _presets(n_layers: int) -> list[Preset]:
    # EAGLE-2's dynamic tree (as in layer_skip's eagle2_tree preset) over the trained
    # head it was made for; the short chain is our starting point, not a published one.
    return [Preset("eagle_chain", "EAGLE chain of 3 (a short chain, our starting point)",
                   {"method": "eagle", "k": 3, "exit_policy": "fixed"}, rank=10),
            Preset("eagle2_tree_head", "EAGLE-2 dynamic tree: top-k 10, depth 6, total "
                   "tokens 60", {"method": "eagle", "exit_policy": "fixed", "tree_width": 10,
                                 "tree_depth": 6, "tree_tokens": 60}, rank=11)]


SPEC = MethodSpec(
    "eagle", label="eagle", color="#D55E00", order=50, needs_draft=True, uses_draft=True,
    can_tree=True, reads_target_features=True,
    about="an EAGLE-1 head over the target's features (`autotune train-draft --kind eagle`)",
    drafter=f"{__name__}.drafter:EagleDrafter", scorer=f"{__name__}.agreement:scorer",
    replay=f"{__name__}.replay:source", draft_cost=f"{__name__}.replay:EagleCost",
    presets=_presets)
