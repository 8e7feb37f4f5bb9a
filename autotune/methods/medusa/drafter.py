"""`medusa`: trained heads that each guess one position further (Cai et al., 2024).

Head i turns the target's feature of the last verified position (the one whose LM-head
output chose the pending token) into a distribution over the token i+1 places past the
pending one. No head reads a drafted token, so one pass scores every depth: a chain
takes token i from head i (up to the number of heads), and a tree's node at depth d
takes its children from head d, the same distribution under every parent (Medusa's
tree). Only the target's features are read, so the drafts depend on the verified
sequence alone: the replay of this drafter is exact.
"""

from __future__ import annotations

import torch

from autotune.common.errors import AutotuneError
from autotune.decoding.drafters.base import (
    Draft,
    DraftContext,
    Drafter,
    TokenChooser,
    TreeHooks,
)
from autotune.decoding.policies import ExitPolicy
from autotune.methods.eagle.drafter import trained_head
from autotune.models.trained import HeadForward


class _Slots:
    """The tree grower numbers scratch slots from `cache.length`; Medusa writes no
    cache, so this only counts the slots it hands out."""

    def __init__(self) -> None:
        self.length = 0


class MedusaDrafter(Drafter, TreeHooks):
    reads_target_features = True

    def __init__(self, head: HeadForward, choose: TokenChooser) -> None:
        self.head, self.choose = head, choose
        self.n_heads: int = head.head.n_heads          # type: ignore[union-attr]
        self.last_feature: torch.Tensor | None = None  # [1, 1, H]
        self.known = 0
        self.cache = _Slots()
        self.root_position = 0
        self.level_logits: torch.Tensor | None = None

    @classmethod
    def build(cls, context: DraftContext) -> "MedusaDrafter":
        head = trained_head(context, "medusa")
        shape = context.config.shape
        if context.config.is_tree and shape.levels > head.head.n_heads:  # type: ignore[union-attr]
            raise AutotuneError(f"a tree of depth {shape.levels} needs as many Medusa "
                                f"heads; this drafter has {head.head.n_heads}")  # type: ignore[union-attr]
        return cls(head, context.choose)

    def target_features(self, features: torch.Tensor) -> None:
        self.last_feature = features[:, -1:]
        self.known += features.shape[1]

    def _logits(self, seq: torch.Tensor) -> torch.Tensor:
        """Every head's draft logits after seq [1, L]: [n_heads, V]."""
        if self.last_feature is None or self.known != seq.shape[1] - 1:
            raise AutotuneError(f"medusa drafter out of step: {self.known} target features "
                                f"for a sequence of {seq.shape[1]} tokens")
        transformed = self.head.head(self.last_feature)[0, 0]          # [n_heads, H]
        return self.head.target.head_logits(transformed[None])[0]

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        logits = self._logits(seq)
        tokens, qs, confidences = [], [], []
        for i in range(min(limit, self.n_heads)):
            token, q, confidence = self.choose(logits[i:i + 1])
            tokens.append(token)
            if q is not None:
                qs.append(q)
            confidences.append(confidence)
            if not policy.keep_going(confidence):
                break
        return Draft(torch.cat(tokens, dim=1), torch.stack(qs, dim=1) if qs else None,
                     confidences)

    def tree_root(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
        self.level_logits = self._logits(seq)
        self.root_position = seq.shape[1] - 1
        self.cache.length = 0
        return self.level_logits[0], None

    def tree_level(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, list[int] | None]:
        assert self.level_logits is not None
        self.cache.length += tokens.shape[1]
        depths = (positions - self.root_position).tolist()         # each node's depth
        return self.level_logits[depths], None

    def tree_finish(self) -> None:
        self.level_logits = None
