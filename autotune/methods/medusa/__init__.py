"""`medusa`: trained heads that each guess one position further (Cai et al., 2024),
distilled by `autotune train-draft --kind medusa` and given as `--draft DIR`."""

from __future__ import annotations

from autotune.schema.method_spec import MethodSpec, Preset


def _presets(n_layers: int) -> list[Preset]:
    return [Preset("medusa_chain", "Medusa: one token per head (a chain of 3)",
                   {"method": "medusa", "k": 3, "exit_policy": "fixed"}, rank=12)]


SPEC = MethodSpec(
    "medusa", label="medusa", color="#56B4E9", order=60, needs_draft=True, uses_draft=True,
    can_tree=True, reads_target_features=True,
    about="Medusa heads over the target's features (`autotune train-draft --kind medusa`)",
    drafter=f"{__name__}.drafter:MedusaDrafter", scorer=f"{__name__}.agreement:scorer",
    replay=f"{__name__}.replay:source", draft_cost=f"{__name__}.replay:MedusaCost",
    presets=_presets)
