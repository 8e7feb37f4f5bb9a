"""Replay of suffix decoding: the same arctic_inference cache fed the reference
continuations in the order the decoder serves the prompts, so each prompt sees the
outputs of the prompts before it (exact under greedy decoding, where the decoder's
outputs are the references); its drafting costs one speculate per round (the parts'
`suffix_speculate`, timed by `SuffixCost.loop_parts`, or an n-gram lookup in parts
measured without it)."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, Callable

from autotune.schema.config import DecodeConfig
from autotune.decoding.policies import ExitPolicy
from autotune.methods.suffix.drafter import SuffixProposer, SuffixState
from autotune.replay.draft_cost import DraftCost
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, ReplayRound, TrackBase
from autotune.replay.sources import ReplaySource, ServedInOrder

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel

# Its part of the replay cost parts (`CostParts.method_parts`): one speculate, in ms.
SPECULATE = "suffix_speculate"


class SuffixTrack(TrackBase):
    """One prompt's drafts along its reference, through the pass's shared cache."""

    def __init__(self, ref: Reference, state: SuffixState) -> None:
        self.ref, self.sequence = ref, ref.sequence
        self.proposer = SuffixProposer(state, ref.prompt)

    def chain(self, g: int, limit: int, policy: ExitPolicy) -> ChainDraft:
        found, probs = self.proposer(self.sequence[:len(self.ref.prompt) + g], limit)
        return ChainDraft.along(found, probs, policy, self.ref.tokens[g:])

    def finish(self) -> None:
        """The decoder files every generated token when a request ends."""
        self.proposer.finish(self.sequence)


def source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    """One cache per config and replay pass, the references served in order."""
    return ServedInOrder(SuffixState, lambda ref, state, config: SuffixTrack(ref, state),
                         "suffix: earlier outputs in the cache are the greedy references, "
                         "not the sampled outputs the decoder files")


class SuffixCost(DraftCost):
    """One speculate per round that drafted (measured in the decoder loop)."""

    @staticmethod
    def loop_parts(rounds: Callable[[DecodeConfig], list[Any]]) -> dict[str, float]:
        """A speculate, file included (one per round), timed over a chain of 8."""
        measured = rounds(DecodeConfig(method="suffix", k=8))
        return {SPECULATE: 1000 * statistics.median(r.draft_s for r in measured)}

    def round_ms(self, r: ReplayRound) -> float:
        measured = self.parts.method_parts.get(SPECULATE)
        return measured if measured is not None else self.parts.ngram_lookup
