"""`eagle`: a trained feature head over the target's own features (EAGLE-1, Li et al. 2024).

The head's cache entry j is the pair (target feature of position j, token j+1): a
feature is the final-normed hidden state the target's LM head reads. Entries are only
ever kept for pairs whose feature came from the target (the verify pass hands the
features of the tokens it kept to `target_features`); the entries a round writes from
the head's *predicted* features are dropped when the round ends and rebuilt from the
target's real ones at the start of the next (one pass over the accepted tokens). So a
drafted token depends only on the verified sequence and the target's features of it,
which is what makes the replay of this drafter exact.

Rotary positions: entry j sits at position j (its token's position minus one). The
tree's node positions (token positions) are shifted by one to match.
"""

from __future__ import annotations

import torch

from autotune.common.errors import AutotuneError
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
from autotune.models.llama import KVCache, LlamaForward
from autotune.models.trained import HeadForward, TrainedDraft


def trained_head(context: DraftContext, kind: str) -> HeadForward:
    """The `kind` head of `--draft`, or one line saying what was given instead."""
    draft = context.draft
    if not isinstance(draft, TrainedDraft) or draft.kind != kind:
        given = draft.name if draft is not None else "none"
        raise AutotuneError(f"method={kind} needs a trained {kind} drafter as --draft "
                            f"(autotune train-draft --kind {kind}), not {given}")
    if not isinstance(context.target.forward, LlamaForward):
        raise AutotuneError(f"method={kind} reads the target's features, which only the "
                            "compact Llama-family forward gives")
    return draft.forward      # type: ignore[return-value]


class EagleDrafter(Drafter, TreeHooks):
    """Chains and trees from an EAGLE head; see the module docstring for its cache."""

    reads_target_features = True

    def __init__(self, head: HeadForward, max_len: int, choose: TokenChooser) -> None:
        assert head.layer_forward is not None
        self.forward: LlamaForward = head.layer_forward
        self.fc = head.fc_weight
        self.cache: KVCache = self.forward.new_cache(1, max_len)
        self.features = torch.zeros((1, max_len, self.fc.shape[0]), dtype=self.fc.dtype,
                                    device=self.fc.device)
        self.known = 0                      # positions whose target feature is stored
        self.choose = choose
        self.verified = 0                   # tree: entries kept before the scratch
        self.root_feature: torch.Tensor | None = None
        self.node_features: list[torch.Tensor] = []     # tree scratch slot -> its output

    @classmethod
    def build(cls, context: DraftContext) -> "EagleDrafter":
        return cls(trained_head(context, "eagle"), context.max_len, context.choose)

    def own_cache(self) -> Cache:
        return self.cache

    # ------------------------------------------------------------ the target's side
    def target_features(self, features: torch.Tensor) -> None:
        """The target's features [1, T, H] of the next T positions it has kept."""
        t = features.shape[1]
        self.features[:, self.known:self.known + t] = features
        self.known += t

    # ------------------------------------------------------------------ the head
    def _pass(self, features: torch.Tensor, tokens: torch.Tensor,
              tree_mask: torch.Tensor | None = None,
              positions: torch.Tensor | None = None) -> torch.Tensor:
        """Append the pairs (features [1, T, H], tokens [1, T]) to the head's cache:
        the predicted features [1, T, H]."""
        step = self.forward.begin(tokens, self.cache, None, tree_mask, positions)
        step.hidden = self.forward._linear(torch.cat((step.hidden, features), dim=-1),
                                           self.fc, None)
        self.forward.run_layers(step, 0, 1)
        return step.hidden

    def _catch_up(self, seq: torch.Tensor) -> torch.Tensor:
        """Entries for every pair whose feature the target gave (seq [1, L]: features
        of positions < L-1 are known, token L-1 is pending): the head's predicted
        feature of position L-1 [1, 1, H]."""
        length = seq.shape[1]
        if self.known != length - 1:
            raise AutotuneError(f"eagle drafter out of step: {self.known} target features "
                                f"for a sequence of {length} tokens")
        start = self.cache.length
        out = self._pass(self.features[:, start:length - 1], seq[:, start + 1:length])
        return out[:, -1:]

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        feature = self._catch_up(seq)
        kept = self.cache.length
        state = {"feature": feature, "first": True}

        def step(feed: torch.Tensor):
            # The first call scores the caught-up feature; each later one feeds the
            # drafted token with the feature that drafted it.
            if not state["first"]:
                state["feature"] = self._pass(state["feature"], feed)
            state["first"] = False
            return self.choose(self.forward.head_logits(state["feature"])[:, -1])

        draft = draft_chain(seq[:, -1:], limit, policy, step)
        self.cache.crop(kept)         # drop the entries built from predicted features
        return draft

    # Trees: a node's pair is (its parent's predicted feature, its token); the parent is
    # the latest scratch slot the node's mask shows (its deepest fed ancestor), else the
    # root.
    def tree_root(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
        self.root_feature = self._catch_up(seq)
        self.verified = self.cache.length
        self.node_features = []
        return self.forward.head_logits(self.root_feature)[0, -1], None

    def tree_level(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, list[int] | None]:
        assert self.root_feature is not None
        t = tokens.shape[1]
        earlier = mask.shape[1] - t                  # scratch slots of earlier levels
        parents = []
        for row in range(t):
            seen = torch.nonzero(mask[row, :earlier]).flatten()
            parents.append(self.node_features[int(seen[-1])] if seen.numel()
                           else self.root_feature[0, 0])
        features = torch.stack(parents)[None]                       # [1, T, H]
        out = self._pass(features, tokens, mask, positions - 1)
        self.node_features.extend(out[0])
        return self.forward.head_logits(out)[0], None

    def tree_finish(self) -> None:
        self.cache.crop(self.verified)
        self.node_features = []
        self.root_feature = None
