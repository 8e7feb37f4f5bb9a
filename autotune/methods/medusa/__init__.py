"""`medusa`: trained heads that each guess one position further (Cai et al., 2024),
distilled by `autotune train-draft --kind medusa` and given as `--draft DIR`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from autotune.schema.method_spec import MethodSpec, Preset

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter
    from autotune.replay.draft_cost import DraftCost


def _presets(n_layers: int) -> list[Preset]:
    return [Preset("medusa_chain", "Medusa: one token per head (a chain of 3)",
                   {"method": "medusa", "k": 3, "exit_policy": "fixed"}, rank=12)]


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.medusa.drafter import MedusaDrafter
    return MedusaDrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.medusa.agreement import scorer
    return scorer


def _replay() -> Callable[..., Any]:
    from autotune.methods.medusa.replay import source
    return source


def _draft_cost() -> type[DraftCost]:
    from autotune.methods.medusa.replay import MedusaCost
    return MedusaCost


SPEC = MethodSpec(
    "medusa", label="medusa", color="#56B4E9", needs_draft=True, uses_draft=True,
    can_tree=True, reads_target_features=True,
    about="Medusa heads over the target's features (`autotune train-draft --kind medusa`)",
    drafter=_drafter, scorer=_scorer, replay=_replay, draft_cost=_draft_cost,
    presets=_presets)
