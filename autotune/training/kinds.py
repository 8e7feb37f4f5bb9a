"""Each trained kind's loss class, keyed by the kind (`models.drafter_folder.KINDS`)."""

from __future__ import annotations

from torch import nn

from autotune.common.errors import AutotuneError
from autotune.models.drafter_folder import KINDS
from autotune.models.llama import LlamaForward
from autotune.training.eagle_loss import EagleLoss
from autotune.training.exits_loss import DEFAULT_EXIT_RANK, ExitsLoss
from autotune.training.kind_loss import HeadOptions, KindLoss
from autotune.training.medusa_loss import MedusaLoss

KIND_LOSSES: dict[str, type[KindLoss]] = {
    loss.kind: loss for loss in (EagleLoss, MedusaLoss, ExitsLoss)}
# Every kind a drafter folder may hold trains here, and nothing else does.
assert tuple(sorted(KIND_LOSSES)) == tuple(sorted(KINDS)), (KIND_LOSSES, KINDS)


def kind_loss(kind: str) -> type[KindLoss]:
    """The loss class of trained kind `kind`."""
    try:
        return KIND_LOSSES[kind]
    except KeyError:
        raise AutotuneError(f"--kind {kind!r} is not one of {', '.join(KINDS)}") from None


def new_head(kind: str, target: LlamaForward, medusa_heads: int,
             exit_layers: tuple[int, ...] | None = None,
             exit_rank: int = DEFAULT_EXIT_RANK) -> tuple[nn.Module, dict]:
    """A fresh head of `kind` for `target` and its geometry (drafter.json's). Exits:
    adapters at `exit_layers` (default `exits_loss.default_exit_layers`) of rank
    `exit_rank`."""
    return kind_loss(kind).new_head(target, HeadOptions(medusa_heads, exit_layers, exit_rank))
