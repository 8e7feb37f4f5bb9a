"""`none`: the AR baseline. It proposes nothing, so every round is one plain target step
through the same loop as every speculative method (the baseline pays the loop's own
overhead and nothing else)."""

from __future__ import annotations

import torch

from autotune.decoding.drafters.base import Draft, DraftContext, Drafter
from autotune.decoding.policies import ExitPolicy


class NoDraft(Drafter):
    """Proposes no token."""

    @classmethod
    def build(cls, context: DraftContext) -> "NoDraft":
        return cls()

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        return Draft.empty(seq)
