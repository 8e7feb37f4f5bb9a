"""Replay of the SA drafter: its own automaton over the sequence the decoder would hold
and the arm's draft buffer, the prompts in serving order, exact under greedy decoding;
one lookup per round (the n-gram lookup's cost part)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.decoding.config import DecodeConfig
from autotune.decoding.policies import ExitPolicy
from autotune.methods.sa.drafter import SAProposer, SAState
from autotune.replay.draft_cost import DraftCost
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, ReplayRound, Track

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.replay.sources import ReplaySource


class SATrack:
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


class SASource:
    """One draft buffer per config and replay pass (`prepare` starts a pass); tracks
    are asked for in the decoder's prompt order, each request finished before the next
    starts (its last lookups write the buffer the next request's first drafts read)."""

    def __init__(self) -> None:
        self._states: dict[DecodeConfig, SAState] = {}
        self._open: dict[DecodeConfig, SATrack] = {}

    def prepare(self, config: DecodeConfig, refs: list[Reference]) -> None:
        self._states[config] = SAState(config)
        self._open.pop(config, None)

    def track(self, config: DecodeConfig, ref: Reference) -> Track:
        if config not in self._states:
            self.prepare(config, [ref])
        last = self._open.pop(config, None)
        if last is not None:
            last.finish()
        track = SATrack(ref, self._states[config], config)
        self._open[config] = track
        return track

    def fidelity(self, config: DecodeConfig) -> tuple[bool, list[str]]:
        return True, []


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    return SASource()


class SACost(DraftCost):
    """One automaton update and lookup per round (priced as an n-gram lookup)."""

    def round_ms(self, r: ReplayRound) -> float:
        return self.parts.ngram_lookup
