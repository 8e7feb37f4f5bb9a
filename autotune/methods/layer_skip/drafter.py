"""`layer_skip`: Draft & Verify self-speculation (Zhang et al., 2024)."""

from __future__ import annotations

import torch

from autotune.decoding.drafters.base import (
    Draft,
    DraftContext,
    Drafter,
    TokenChooser,
    TreeHooks,
    draft_chain,
)
from autotune.decoding.policies import ExitPolicy
from autotune.models.llama import KVCache, LlamaForward


class LayerSkipDrafter(Drafter, TreeHooks):
    """The draft is the target itself with the attention sublayers in `attn_skip` and
    the MLP sublayers in `mlp_skip` skipped.

    It writes into the target's cache: at non-skipped attention layers each draft token's
    keys/values go to the scratch positions past the verified prefix, where later draft
    tokens of the round attend to them; at skipped attention layers nothing is written
    or read. The cache is cut back to the verified prefix before verification, and the
    verify pass recomputes every layer's keys/values for the pending and draft tokens,
    so the draft's approximate values never reach the target.
    """

    def __init__(self, forward: LlamaForward, cache: KVCache, attn_skip: tuple[int, ...],
                 mlp_skip: tuple[int, ...], choose: TokenChooser) -> None:
        self.forward, self.cache, self.choose = forward, cache, choose
        self.attn_skip, self.mlp_skip = frozenset(attn_skip), frozenset(mlp_skip)
        self.verified = 0

    @classmethod
    def build(cls, context: DraftContext) -> "LayerSkipDrafter":
        config = context.config
        return cls(context.target.forward, context.target_cache, config.attn_skip,
                   config.mlp_skip, context.choose)

    def _skipping(self, tokens: torch.Tensor, **kwargs) -> torch.Tensor:
        return self.forward.forward(tokens, self.cache, attn_skip=self.attn_skip,
                                    mlp_skip=self.mlp_skip, **kwargs)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        verified = self.cache.length

        def step(feed: torch.Tensor):
            return self.choose(self._skipping(feed, last_only=True)[:, -1])

        draft = draft_chain(seq[:, -1:], limit, policy, step)
        self.cache.crop(verified)
        return draft

    def tree_root(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
        self.verified = self.cache.length
        return self._skipping(seq[:, -1:], last_only=True)[0, -1], None

    def tree_level(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, list[int] | None]:
        return self._skipping(tokens, tree_mask=mask, position_ids=positions)[0], None

    def tree_finish(self) -> None:
        self.cache.crop(self.verified)
