"""Our own speculative decoder as a measurement backend: every knob (skip masks, S2D
exits, trees over any drafter, every engine's drafting rules), on the compact forward."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.backends.base import BackendBase, RunnerBase
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.schema.methods import get_method

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel

NAME = "autotune"


class EmbeddedRunner(SpeculativeDecoder, RunnerBase):
    """The decoder itself as a `Runner`: its own cross-request state (`stateful`,
    `forget`, `absorb`), the base's `close` (nothing beyond its tensors to free)."""


class EmbeddedBackend(BackendBase):
    """`Backend` over `SpeculativeDecoder` (the runner is the decoder itself)."""

    name = NAME
    # Our lossless check stays binding: greedy speculative output must equal greedy AR.
    token_exact = True

    def __init__(self, target: "LoadedModel", draft: "LoadedModel | None" = None) -> None:
        self.target = target
        self.draft = draft
        self.label = "autotune's decoder"
        self.device = str(target.device)
        self.memory_kind = ("cuda_max_allocated" if target.device.type == "cuda"
                            else "weights_plus_kv_cache")

    def runner(self, config: DecodeConfig) -> EmbeddedRunner:
        return EmbeddedRunner(self.target, config, self.draft)

    def weights_bytes(self, config: DecodeConfig) -> int:
        # A method that never touches the draft is not charged for its weights.
        reads_draft = self.draft is not None and get_method(config.method).uses_draft
        return self.target.forward.nbytes() + (self.draft.forward.nbytes() if reads_draft
                                               else 0)
