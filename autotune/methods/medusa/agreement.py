"""Trained Medusa heads' agreement: head 0's draft at every position, teacher-forced on
the target's own features (what the drafter does for the first token of a round): index
t predicts token t+1 from the feature of position t-1."""

from __future__ import annotations

import torch

from autotune.schema.config import DecodeConfig
from autotune.measure.agreement import Scorer, feature_scorer
from autotune.models.loading import LoadedModel


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    assert draft is not None and draft.trained_kind == config.method   # the decoder's check
    head = draft.hf_model

    def predict(features: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return head(features)[:, :, 0]

    return feature_scorer(target, draft, predict)
