"""Replay of suffix decoding: the same arctic_inference cache fed the reference
continuations in the order the decoder serves the prompts, so each prompt sees the
outputs of the prompts before it (exact under greedy decoding, where the decoder's
outputs are the references); its drafting costs one speculate per round (the parts'
`suffix_speculate`, or an n-gram lookup in parts measured without it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.decoding.config import DecodeConfig
from autotune.decoding.policies import ExitPolicy
from autotune.methods.suffix.drafter import SuffixProposer, SuffixState
from autotune.replay.draft_cost import DraftCost
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, ReplayRound, Track

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.replay.sources import ReplaySource


class SuffixTrack:
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


class SuffixSource:
    """One cache per config and replay pass (`prepare` starts a pass); tracks are asked
    for in the decoder's prompt order, each request finished before the next starts."""

    def __init__(self) -> None:
        self._states: dict[DecodeConfig, SuffixState] = {}
        self._open: dict[DecodeConfig, SuffixTrack] = {}

    def prepare(self, config: DecodeConfig, refs: list[Reference]) -> None:
        self._states[config] = SuffixState(config)
        self._open.pop(config, None)

    def track(self, config: DecodeConfig, ref: Reference) -> Track:
        if config not in self._states:
            self.prepare(config, [ref])
        last = self._open.pop(config, None)
        if last is not None:
            last.finish()
        track = SuffixTrack(ref, self._states[config])
        self._open[config] = track
        return track

    def fidelity(self, config: DecodeConfig) -> tuple[bool, list[str]]:
        if config.greedy:
            return True, []
        return False, ["suffix: earlier outputs in the cache are the greedy references, "
                       "not the sampled outputs the decoder files"]


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    return SuffixSource()


class SuffixCost(DraftCost):
    """One speculate per round that drafted (measured in the decoder loop)."""

    def round_ms(self, r: ReplayRound) -> float:
        measured = getattr(self.parts, "suffix_speculate", None)
        return measured if measured is not None else self.parts.ngram_lookup
