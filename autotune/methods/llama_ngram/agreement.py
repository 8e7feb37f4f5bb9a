"""ngram-simple's agreement: its first draft token at every prefix, exactly the first
draft token of a round that starts there (-1 where it drafts nothing)."""

from __future__ import annotations

from autotune.schema.config import DecodeConfig
from autotune.measure.agreement import Scorer
from autotune.methods.llama_ngram.drafter import LlamaNgramDrafter, ngram_simple_draft
from autotune.models.loading import LoadedModel


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    """One token at every prefix (the types the server alone runs are refused)."""
    LlamaNgramDrafter(config, 0, ())

    def simple(ids: list[int]) -> list[int]:
        out = []
        for end in range(len(ids)):
            found = ngram_simple_draft(ids[:end], ids[end], config.llama_ngram_size_n,
                                       config.k)
            out.append(found[0] if found else -1)
        return out

    return simple
