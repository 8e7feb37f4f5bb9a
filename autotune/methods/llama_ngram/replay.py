"""Replay of llama-server's ngram-simple: the drafter's own lookup over the sequence the
decoder would hold (prompt + reference so far), exact; the other spec types run in the
server only, and are refused here as the drafter refuses them. Drafting costs one lookup
per round (the parts' `ngram_lookup`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.schema.llama_spec import reproduced
from autotune.decoding.policies import ExitPolicy
from autotune.methods.llama_ngram.drafter import ngram_simple_draft
from autotune.replay.draft_cost import DraftCost
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, ReplayRound, Track, TrackBase
from autotune.replay.sources import ReplaySource, ReplaySourceBase

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel


class SimpleTrack(TrackBase):
    """ngram-simple over the sequence the decoder holds after g generated tokens (its
    last token the one just sampled, as the server passes it)."""

    def __init__(self, ref: Reference, config: DecodeConfig) -> None:
        self.ref, self.sequence = ref, list(ref.sequence)
        self.size_n, self.size_m = config.llama_ngram_size_n, config.k

    def chain(self, g: int, limit: int, policy: ExitPolicy) -> ChainDraft:
        held = self.sequence[:len(self.ref.prompt) + g]
        found = ngram_simple_draft(held[:-1], held[-1], self.size_n, self.size_m)[:limit]
        return ChainDraft.along(found, [1.0] * len(found), policy, self.ref.tokens[g:])


class SimpleSource(ReplaySourceBase):
    """Exact for ngram-simple (no state across requests)."""

    def track(self, config: DecodeConfig, ref: Reference) -> Track:
        if not reproduced(config.llama_spec_type):
            raise AutotuneError(f"llama_spec_type {config.llama_spec_type} runs in "
                                "llama-server only: it has no replay (measure it there)")
        return SimpleTrack(ref, config)

    def fidelity(self, config: DecodeConfig) -> tuple[bool, list[str]]:
        return True, []


def source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    return SimpleSource()


class LlamaNgramCost(DraftCost):
    """One lookup per round that drafted (measured in the decoder loop, so no factor)."""

    def round_ms(self, r: ReplayRound) -> float:
        return self.parts.ngram_lookup
