"""Replay of SGLang's NGRAM: the same corpus fed the reference continuations in the
order the decoder serves the prompts (exact under greedy decoding, where the decoder's
outputs are the references); each round verifies the whole tree (k nodes + the root)
and drafting costs one trie match and insert (the parts' `ngram_lookup`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.decoding.policies import ExitPolicy
from autotune.methods.sglang_ngram.drafter import NgramProposer, NgramState, accepted_along
from autotune.replay.draft_cost import DraftCost
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, ReplayRound, TrackBase
from autotune.replay.sources import ReplaySource, ServedInOrder

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel


class NgramTrack(TrackBase):
    """One prompt's trees along its reference, through the pass's shared corpus."""

    def __init__(self, ref: Reference, state: NgramState) -> None:
        self.ref, self.sequence = ref, ref.sequence
        self.proposer = NgramProposer(state, ref.prompt)

    def chain(self, g: int, limit: int, policy: ExitPolicy) -> ChainDraft:
        raise TypeError("sglang_ngram drafts trees: replay it with own_tree")

    def own_tree(self, g: int) -> tuple[int, int, int]:
        """(tree nodes, accepted depth, deepest node) of the round after g tokens."""
        tree = self.proposer(self.sequence[:len(self.ref.prompt) + g])
        accepted = accepted_along(tree, self.ref.tokens[g:])
        return len(tree.parents), accepted, max(tree.depths(), default=0)

    def finish(self) -> None:
        self.proposer.finish()


def source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    """One trie per config and replay pass, the references served in order."""
    return ServedInOrder(NgramState, lambda ref, state, config: NgramTrack(ref, state),
                         "sglang_ngram: the trie holds the greedy references, not the "
                         "sampled outputs the decoder inserts")


class NgramCost(DraftCost):
    """One trie match and insert per round (priced as an n-gram lookup)."""

    def round_ms(self, r: ReplayRound) -> float:
        return self.parts.ngram_lookup
