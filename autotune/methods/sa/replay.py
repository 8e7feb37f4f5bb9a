"""Replay of the SA drafter: its own automaton over the sequence the decoder would hold,
exact for every policy; one lookup per round (the n-gram lookup's cost part)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.decoding.config import DecodeConfig
from autotune.decoding.policies import ExitPolicy
from autotune.methods.sa.drafter import SAProposer
from autotune.replay.draft_cost import DraftCost
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, ReplayRound, Track

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.replay.sources import ReplaySource


class SATrack:
    def __init__(self, ref: Reference, config: DecodeConfig) -> None:
        self.ref, self.sequence = ref, ref.sequence
        self.proposer = SAProposer(config)

    def chain(self, g: int, limit: int, policy: ExitPolicy) -> ChainDraft:
        found = self.proposer(self.sequence[:len(self.ref.prompt) + g], limit)
        return ChainDraft.along(found, [1.0] * len(found), policy, self.ref.tokens[g:])


class SASource:
    def track(self, config: DecodeConfig, ref: Reference) -> Track:
        return SATrack(ref, config)

    def fidelity(self, config: DecodeConfig) -> tuple[bool, list[str]]:
        return True, []


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    return SASource()


class SACost(DraftCost):
    """One automaton update and lookup per round (priced as an n-gram lookup)."""

    def round_ms(self, r: ReplayRound) -> float:
        return self.parts.ngram_lookup
