"""`llama_draft` in autotune's decoder: refused in one line (it runs in llama-server)."""

from __future__ import annotations

import torch

from autotune.common.errors import AutotuneError
from autotune.decoding.drafters.base import Draft, DraftContext, Drafter
from autotune.decoding.policies import ExitPolicy

REFUSAL = ("method llama_draft (llama-server's draft-simple) runs in llama-server only: "
           "measure it there (measure --in llama_server, search --target llama_server)")


class LlamaDraftDrafter(Drafter):
    """Never built: llama-server's draft-simple drafts from a quantised GGUF draft with
    its own top-10 sampler, which autotune's decoder does not reproduce."""

    @classmethod
    def build(cls, context: DraftContext) -> "LlamaDraftDrafter":
        raise AutotuneError(REFUSAL)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        raise AutotuneError(REFUSAL)

    def tree_root(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
        raise AutotuneError(REFUSAL)
