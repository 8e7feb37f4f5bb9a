"""Replay of the AR baseline: no draft, one target step per round (exact). It drafts at
no cost, so its spec names no draft cost."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, Track, TrackBase
from autotune.replay.sources import ReplaySource, ReplaySourceBase

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig
    from autotune.decoding.policies import ExitPolicy
    from autotune.models.loading import LoadedModel


class _NoDraftTrack(TrackBase):
    def chain(self, g: int, limit: int, policy: "ExitPolicy") -> ChainDraft:
        return ChainDraft(0, 0, [], [])


class NoDraftSource(ReplaySourceBase):
    """The AR baseline: one target step per round."""

    def track(self, config: "DecodeConfig", ref: Reference) -> Track:
        return _NoDraftTrack()

    def fidelity(self, config: "DecodeConfig") -> tuple[bool, list[str]]:
        return True, []


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    return NoDraftSource()
