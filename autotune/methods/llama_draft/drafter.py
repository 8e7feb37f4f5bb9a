"""`llama_draft` in autotune's decoder: refused in one line (it runs in llama-server)."""

from __future__ import annotations

from autotune.common.errors import AutotuneError
from autotune.decoding.drafters.base import DraftContext, Drafter

REFUSAL = ("method llama_draft (llama-server's draft-simple) runs in llama-server only: "
           "measure it there (measure --in llama_server, search --target llama_server)")


class LlamaDraftDrafter(Drafter):
    """Never built: llama-server's draft-simple drafts from a quantised GGUF draft with
    its own sampler, which autotune's decoder does not reproduce."""

    @classmethod
    def build(cls, context: DraftContext) -> "LlamaDraftDrafter":
        raise AutotuneError(REFUSAL)

    def propose(self, seq, limit, policy):  # type: ignore[no-untyped-def]
        raise AutotuneError(REFUSAL)

    def tree_root(self, seq):  # type: ignore[no-untyped-def]
        raise AutotuneError(REFUSAL)
