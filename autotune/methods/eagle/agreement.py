"""A trained EAGLE head's agreement: its first draft at every position, teacher-forced on
the target's own features (what its drafter does for the first token of a round): index
t predicts token t+1 from the head's pair (feature of position t-1, token t)."""

from __future__ import annotations

import torch

from autotune.schema.config import DecodeConfig
from autotune.measure.agreement import Scorer, feature_scorer
from autotune.models.loading import LoadedModel


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    assert draft is not None and draft.trained_kind == config.method   # the decoder's check
    forward, head = target.forward, draft.hf_model

    def predict(features: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1] - 1
        return head(features, torch.nn.functional.embedding(x[:, 1:], forward.embed),
                    forward.cos[:t], forward.sin[:t], forward.scaling)

    return feature_scorer(target, draft, predict)
