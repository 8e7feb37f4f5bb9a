"""`llama_draft`'s agreement: refused in one line, as its drafter is (the server's
quantised draft and top-10 sampler are not reproduced here)."""

from __future__ import annotations

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.measure.agreement import Scorer
from autotune.methods.llama_draft.drafter import REFUSAL
from autotune.models.loading import LoadedModel


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    raise AutotuneError(REFUSAL)
