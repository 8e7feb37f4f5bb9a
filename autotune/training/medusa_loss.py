"""Medusa (Cai et al., 2024): heads that each guess one position further.

Head i on feature j against the target's distribution at position j+1+i (soft
cross-entropy; the shared LM head stays frozen).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from autotune.models.drafter_folder import MedusaGeometry
from autotune.models.heads import head_geometry
from autotune.models.llama import LlamaForward
from autotune.training.data import Sequence_
from autotune.training.kind_loss import HeadFingerprint, HeadOptions, KindLoss
from autotune.training.teacher import sample_ce_rows, soft_ce


class MedusaLoss(KindLoss):
    kind: ClassVar[str] = "medusa"

    @classmethod
    def geometry(cls, options: HeadOptions, target: LlamaForward) -> MedusaGeometry:
        return MedusaGeometry(**head_geometry(target).model_dump(),
                              medusa_heads=options.medusa_heads, medusa_layers=1)

    @classmethod
    def fingerprint(cls, options: HeadOptions) -> HeadFingerprint:
        return HeadFingerprint(medusa_heads=options.medusa_heads)

    def loss(self, seqs: list[Sequence_]) -> torch.Tensor:
        _, features, valid = self.teacher.batch(seqs)
        teacher = self.teacher
        n_heads = self.head.n_heads
        transformed = self.head(features)                                   # [B,L,N,H]
        total = features.new_zeros(())
        for i in range(n_heads):
            shift = 1 + i
            if features.shape[1] <= shift:
                break
            mask = valid[:, shift:]
            rows = sample_ce_rows(int(mask.sum()))
            student = teacher.logits(transformed[:, :-shift, i][mask][rows])
            with torch.no_grad():
                target_logits = teacher.logits(features[:, shift:][mask][rows])
            total = total + soft_ce(student, target_logits)
        return total / n_heads

    @torch.no_grad()
    def top1_agreement(self, seqs: list[Sequence_]) -> tuple[int, int]:
        """Head 0's guess at feature j against the target's greedy token at j+1."""
        agree = total = 0
        teacher = self.teacher
        for seq in seqs:
            _, features, _ = teacher.batch([seq])
            guess = teacher.logits(self.head(features)[0, :-1, 0]).argmax(-1)
            truth = teacher.logits(features[0, 1:]).argmax(-1)
            first = max(seq.prompt_len - 1, 0)
            agree += int((guess[first:] == truth[first:]).sum())
            total += int(guess[first:].numel())
        return agree, total
