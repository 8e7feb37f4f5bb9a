"""Replay of the SA drafter: its own automaton over the sequence the decoder would hold
and the arm's draft buffer, the prompts in serving order, exact under greedy decoding;
one lookup per round (the n-gram lookup's cost part)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.schema.config import DecodeConfig
from autotune.decoding.policies import ExitPolicy
from autotune.methods.sa.drafter import SAProposer, SAState
from autotune.replay.draft_cost import DraftCost
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, ReplayRound, TrackBase
from autotune.replay.sources import ReplaySource, ServedInOrder

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel


class SATrack(TrackBase):
    def __init__(self, ref: Reference, state: SAState, config: DecodeConfig) -> None:
        self.ref, self.sequence = ref, ref.sequence
        self.proposer = SAProposer(config, len(ref.prompt), state)

    def chain(self, g: int, limit: int, policy: ExitPolicy) -> ChainDraft:
        found = self.proposer(self.sequence[:len(self.ref.prompt) + g], limit)
        draft = ChainDraft.along(found, [1.0] * len(found), policy, self.ref.tokens[g:])
        self.proposer.observe(draft.accepted)
        return draft

    def finish(self) -> None:
        self.proposer.finish(self.sequence)


def source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    """One draft buffer per config and replay pass, the references served in order (a
    request's last lookups write the slots the next request's first drafts read)."""
    return ServedInOrder(SAState, SATrack,
                         "sa: the draft buffer holds lookups over the greedy references, "
                         "not over the sampled outputs")


class SACost(DraftCost):
    """One automaton update and lookup per round (priced as an n-gram lookup)."""

    def round_ms(self, r: ReplayRound) -> float:
        return self.parts.ngram_lookup
