"""Replay of a separate draft model: its own causal pass over prompt + continuation as
the table. Exact for every accepted draft token: the draft's cache holds its own
keys/values of exactly these tokens. Its drafting costs the draft's forward over the
tokens each pass feeds (the first pass of a round catches up on what it has not seen)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from autotune.schema.config import DecodeConfig
from autotune.replay.costs import interpolate
from autotune.replay.draft_cost import PassDraftCost
from autotune.replay.reference import Reference
from autotune.replay.sources import TableSourceAdapter
from autotune.replay.tables import (
    Table,
    TableSource,
    reference_ids,
    shared_vocab,
    table_from_logits,
)

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.replay.sources import ReplaySource


class DraftModelSource(TableSource):
    """The draft model's causal pass over prompt + continuation."""

    def __init__(self, target: "LoadedModel", draft: "LoadedModel") -> None:
        self.draft, self.vocab = draft, shared_vocab(target, draft)

    def key(self, config: DecodeConfig) -> tuple[Any, ...]:
        return ("draft_model",)

    @torch.inference_mode()
    def table(self, config: DecodeConfig, ref: Reference, width: int) -> Table:
        forward = self.draft.forward
        ids = reference_ids(self.draft, ref)
        logits = forward.forward(ids, forward.new_cache(1, ids.shape[1]))[0]
        return table_from_logits(logits[len(ref.prompt) - 1:], self.vocab, width)


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    assert draft is not None                # the decoder's checks refuse it earlier
    return TableSourceAdapter(DraftModelSource(target, draft))


class DraftModelCost(PassDraftCost):
    """The draft's forward over the tokens fed (its measured curve, a token pick
    included), the catch-up in a round's first pass."""

    feeds_catch_up = True

    def pass_ms(self, tokens: int, exit_layer: int | None) -> float:
        assert self.parts.draft_curve is not None
        return interpolate(self.parts.draft_curve, tokens)

    @staticmethod
    def calibration_config(target: "LoadedModel", draft: "LoadedModel | None"
                           ) -> DecodeConfig | None:
        # A trained head serves its own method only (the decoder refuses this one).
        if draft is None or draft.trained_kind is not None:
            return None
        return DecodeConfig(method="draft_model", k=4)
