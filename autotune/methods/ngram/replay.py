"""Replay of the n-gram drafter: its own lookup over the sequence the decoder would hold
(prompt + reference so far), under the config's engine rules, exact for every policy;
its drafting costs one lookup per round (the parts' `ngram_lookup`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Collection

from autotune.schema.config import DecodeConfig
from autotune.decoding.policies import ExitPolicy
from autotune.methods.ngram.drafter import NgramProposer, PublicPool, ngram_state
from autotune.replay.draft_cost import DraftCost
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, ReplayRound, Track, TrackBase
from autotune.replay.sources import ReplaySource, ReplaySourceBase

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel


class NgramTrack(TrackBase):
    """Prompt lookup over the sequence the decoder holds after g generated tokens."""

    def __init__(self, ref: Reference, config: DecodeConfig, eos: Collection[int],
                 shared: PublicPool | None = None, vocab_size: int | None = None,
                 device: str = "cpu") -> None:
        self.ref, self.sequence = ref, ref.sequence
        # One proposer per prompt, asked once per round in order, as the decoder's is.
        self.proposer = NgramProposer(config, eos, shared, vocab_size, device)

    def chain(self, g: int, limit: int, policy: ExitPolicy) -> ChainDraft:
        end = len(self.ref.prompt) + g
        found = self.proposer(self.sequence[:end], limit)
        return ChainDraft.along(found, [1.0] * len(found), policy, self.ref.tokens[g:])


class NgramSource(ReplaySourceBase):
    """The drafter's own lookup over the reference so far, under the config's engine
    rules: exact. TensorRT-LLM's public pool is one per config and replay pass
    (`prepare` starts a pass), the references served in order through it."""

    def __init__(self, eos: frozenset[int], vocab_size: int | None = None,
                 device: str = "cpu") -> None:
        # vocab_size and device: where transformers' sampled drafts are filtered by
        # top-p on stand-in logits (NgramProposer), as the decoder on this target does.
        self.eos, self.vocab_size, self.device = eos, vocab_size, device
        self._pools: dict[DecodeConfig, PublicPool | None] = {}

    def prepare(self, config: DecodeConfig, refs: list[Reference]) -> None:
        self._pools[config] = ngram_state(config)

    def track(self, config: DecodeConfig, ref: Reference) -> Track:
        if config not in self._pools:
            self.prepare(config, [ref])
        return NgramTrack(ref, config, self.eos, self._pools[config], self.vocab_size,
                          self.device)

    def fidelity(self, config: DecodeConfig) -> tuple[bool, list[str]]:
        return True, []


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    return NgramSource(target.eos_token_ids, target.forward.vocab_size, str(target.device))


class NgramCost(DraftCost):
    """One lookup per round that drafted (measured in the decoder loop, so no factor)."""

    def round_ms(self, r: ReplayRound) -> float:
        return self.parts.ngram_lookup
