"""What a trained kind owns: its head's geometry, the batch loss, the held-out agreement.

`KindLoss` is the base each kind (`eagle_loss`, `medusa_loss`, `exits_loss`) fills
in; the training loop picks one class per run (`kinds.kind_loss`) and never asks
which kind it trains again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, TypedDict

import torch
from torch import nn

from autotune.models.drafter_folder import HeadGeometry
from autotune.models.llama import LlamaForward
from autotune.models.trained import build_head
from autotune.training.data import Sequence_
from autotune.training.teacher import Teacher


class HeadFingerprint(TypedDict, total=False):
    """The head settings in a training checkpoint's fingerprint (train-draft merges them
    into it; a checkpoint resumes only under equal ones): the kind's own, as checkpoints
    have always stored them."""

    medusa_heads: int | None
    exit_layers: list[int]
    exit_rank: int | None


@dataclass(frozen=True)
class HeadOptions:
    """The head settings train-draft takes: Medusa's head count; the exit layers
    (None: the default for the target's depth) and adapter rank (None: the default)."""

    medusa_heads: int
    exit_layers: tuple[int, ...] | None = None
    exit_rank: int | None = None


class KindLoss:
    """The loss and held-out agreement of one trained kind over a head being trained.

    Subclasses set `kind` (one of `models.drafter_folder.KINDS`) and implement
    `geometry`, `loss` and `top1_agreement`; the rest has a default they may replace.
    """

    kind: ClassVar[str]
    # Positions per optimiser step.
    batch_tokens: ClassVar[int] = 1024
    # Whether engines load this kind (train-draft writes their checkpoints beside it).
    engine_checkpoints: ClassVar[bool] = True
    # After the held-out figure in train-draft's last line; `use_hint` after --draft DIR.
    summary_note: ClassVar[str] = ""
    use_hint: ClassVar[str] = ""

    def __init__(self, head: nn.Module, teacher: Teacher) -> None:
        self.head, self.teacher = head, teacher

    # ------------------------------------------------------------------ the head

    @classmethod
    def resolve(cls, options: HeadOptions, target: LlamaForward) -> HeadOptions:
        """`options` with this kind's defaults filled in for `target`, checked against
        it (one line for what it cannot take): before any training data is made."""
        return options

    @classmethod
    def geometry(cls, options: HeadOptions, target: LlamaForward) -> HeadGeometry:
        """drafter.json's geometry of a head of this kind over `target` (resolved
        options)."""
        raise NotImplementedError

    @classmethod
    def new_head(cls, target: LlamaForward, options: HeadOptions
                 ) -> tuple[nn.Module, dict[str, Any]]:
        """A fresh head for `target` and its geometry as drafter.json holds it, built
        as a drafter folder's head is loaded (`models.trained.build_head`)."""
        geometry = cls.geometry(cls.resolve(options, target), target)
        return build_head(cls.kind, geometry), geometry.model_dump()

    @classmethod
    def fingerprint(cls, options: HeadOptions) -> HeadFingerprint:
        """The head settings a checkpoint must match to be resumed. `medusa_heads` is
        in every kind's (None but for Medusa), as checkpoints have always had it."""
        return HeadFingerprint(medusa_heads=None)

    # ------------------------------------------------------------------ training

    def loss(self, seqs: list[Sequence_]) -> torch.Tensor:
        """The batch's loss, a scalar with its graph."""
        raise NotImplementedError

    def backward(self, seqs: list[Sequence_]) -> float:
        """The batch's loss, its gradients accumulated into the head."""
        loss = self.loss(seqs)
        loss.backward()
        return float(loss.detach())

    def top1_agreement(self, seqs: list[Sequence_]) -> tuple[int, int]:
        """(agreements, positions): the head's first draft token (teacher-forced on the
        target's features) against the target's greedy token, continuation positions
        only (prompt positions are not what the decoder drafts)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ reporting

    @property
    def rows_per_position(self) -> int:
        """Agreement rows `top1_agreement` counts per held-out position."""
        return 1

    def progress_note(self) -> str:
        """After the held-out figure on the progress line."""
        return ""

    def heldout_by_exit(self) -> dict[int, float] | None:
        """Each exit's last held-out agreement, for kinds with exits; else None."""
        return None
