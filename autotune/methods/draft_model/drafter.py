"""`draft_model`: a separate, smaller model with its own cache (Leviathan et al., 2023)."""

from __future__ import annotations

import torch

from autotune.decoding.drafters.base import (
    Cache,
    Draft,
    DraftContext,
    Drafter,
    TokenChooser,
    TreeHooks,
    draft_chain,
)
from autotune.decoding.policies import ExitPolicy
from autotune.models.hf_forward import HFForward
from autotune.models.llama import LlamaForward


class DraftModelDrafter(Drafter, TreeHooks):
    """Drafts with `--draft`, keeping only the keys/values of verified tokens between
    rounds; the first feed of a round catches up on every token it has not seen."""

    def __init__(self, forward: LlamaForward | HFForward, max_len: int,
                 choose: TokenChooser) -> None:
        self.forward = forward
        self.cache = forward.decode_cache(max_len, role="draft")
        self.choose = choose
        self.verified_len = 0        # sequence length at the last proposal
        self.drafted = 0

    @classmethod
    def build(cls, context: DraftContext) -> "DraftModelDrafter":
        assert context.draft is not None        # SpeculativeDecoder refuses it without one
        return cls(context.draft.forward, context.max_len, context.choose)

    def own_cache(self) -> Cache:
        return self.cache

    def prefill(self, prompt: torch.Tensor) -> None:
        self.forward.forward(prompt, self.cache, last_only=True)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        self.verified_len = seq.shape[1]

        def step(feed: torch.Tensor):
            return self.choose(self.forward.forward(feed, self.cache, last_only=True)[:, -1])

        # The first feed catches up on every token the draft has not seen (at least the
        # pending one).
        draft = draft_chain(seq[:, self.cache.length:], limit, policy, step)
        self.drafted = draft.k
        return draft

    def observe(self, n_accepted: int) -> None:
        # The cache holds the sequence plus drafts 1..k-1 (the last draft was never fed);
        # keep what the verifier confirmed.
        self.cache.crop(self.verified_len + min(n_accepted, self.drafted - 1))

    # Draft trees: the root pass catches up like a chain's first step; the tree's
    # scratch is dropped afterwards and the accepted tokens are caught up on in the next
    # round's root pass, batched with the new pending token.
    def tree_root(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
        self.verified_len = seq.shape[1]
        logits = self.forward.forward(seq[:, self.cache.length:], self.cache, last_only=True)
        return logits[0, -1], None

    def tree_level(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, list[int] | None]:
        logits = self.forward.forward(tokens, self.cache, tree_mask=mask, position_ids=positions)
        return logits[0], None

    def tree_finish(self) -> None:
        self.cache.crop(self.verified_len)
