"""The draft model's agreement: its own causal pass over the whole sequence, exactly the
first draft token of a round that starts at each position (a separate draft keeps its
own keys/values of verified tokens)."""

from __future__ import annotations

import torch

from autotune.schema.config import DecodeConfig
from autotune.measure.agreement import Scorer, no_grad, shared_vocab, top1
from autotune.models.loading import LoadedModel


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    """The draft model's own pass over the whole sequence."""
    assert draft is not None                 # checked by SpeculativeDecoder
    vocab = shared_vocab(target, draft)

    def draft_model(ids: list[int]) -> list[int]:
        x = torch.tensor([ids], dtype=torch.long, device=draft.device)
        return top1(draft.forward.forward(x, draft.forward.new_cache(1, len(ids))), vocab)

    return no_grad(draft_model)
