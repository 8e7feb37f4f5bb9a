"""EAGLE (Li et al., 2024): a one-layer head that predicts the target's next feature.

At pair j (feature j, token j+1) the head predicts the feature of position j+1:
Smooth-L1 to the target's feature there, plus 0.1 x the cross-entropy of the target's
LM head on the prediction against the target's own distribution at j+1 (EAGLE-1's
weights). A second, unrolled step feeds the head's own predictions back as the input
features (as drafting does after its first token; HASS and EAGLE-3 train on what the
head will see), with the same targets one further.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from autotune.models.drafter_folder import EagleGeometry
from autotune.models.heads import EagleHead, head_geometry
from autotune.models.llama import LlamaForward
from autotune.training.data import Sequence_
from autotune.training.kind_loss import HeadOptions, KindLoss
from autotune.training.teacher import sample_ce_rows, soft_ce


class EagleLoss(KindLoss):
    kind: ClassVar[str] = "eagle"

    @classmethod
    def geometry(cls, options: HeadOptions, target: LlamaForward) -> EagleGeometry:
        return head_geometry(target)

    @classmethod
    def new_head(cls, target: LlamaForward, options: HeadOptions
                 ) -> tuple[EagleHead, dict[str, Any]]:
        head, geometry = super().new_head(target, options)
        assert isinstance(head, EagleHead)
        head.init_from(target)
        return head, geometry

    def _predict(self, features: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """The head over pairs (features [B, T, H], next tokens ids [B, T]): the
        predicted next features [B, T, H]."""
        t = features.shape[1]
        teacher = self.teacher
        embeds = F.embedding(ids, teacher.embed)
        return self.head(features, embeds, teacher.cos[:t], teacher.sin[:t], teacher.scaling)

    def loss(self, seqs: list[Sequence_]) -> torch.Tensor:
        ids, features, valid = self.teacher.batch(seqs)
        # Pair j = (feature j, token j+1) -> feature j+1.
        inputs, tokens, targets = features[:, :-1], ids[:, 1:], features[:, 1:]
        mask = valid[:, 1:]
        predicted = self._predict(inputs, tokens)
        loss = self._terms(predicted[mask], targets[mask])
        # Unrolled step: pair j+1 takes the head's own feature j+1 (as drafting does).
        if inputs.shape[1] > 2:
            fed = torch.cat((inputs[:, :1], predicted[:, :-1].detach()), dim=1)
            second = self._predict(fed, tokens)
            m2 = mask.clone()
            m2[:, 0] = False                   # pair 0's input is the target's own
            loss = loss + self._terms(second[m2], targets[m2])
        return loss

    def _terms(self, predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """EAGLE-1's loss over predicted and target features [N, H]: Smooth-L1 on every
        row + 0.1 x the LM head's soft cross-entropy on `CE_POSITIONS` sampled rows (the
        head over the whole vocabulary is most of a step's cost)."""
        rows = sample_ce_rows(predicted.shape[0])
        with torch.no_grad():
            teacher_logits = self.teacher.logits(targets[rows])
        return (F.smooth_l1_loss(predicted, targets)
                + 0.1 * soft_ce(self.teacher.logits(predicted[rows]), teacher_logits))

    @torch.no_grad()
    def top1_agreement(self, seqs: list[Sequence_]) -> tuple[int, int]:
        agree = total = 0
        teacher = self.teacher
        for seq in seqs:
            ids, features, _ = teacher.batch([seq])
            predicted = self._predict(features[:, :-1], ids[:, 1:])[0]     # feature j+1
            guess = teacher.logits(predicted).argmax(-1)
            truth = teacher.logits(features[0, 1:]).argmax(-1)
            first = max(seq.prompt_len - 1, 0)
            agree += int((guess[first:] == truth[first:]).sum())
            total += int(guess[first:].numel())
        return agree, total
