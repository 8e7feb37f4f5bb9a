"""Suffix decoding's agreement: the first draft token at every prefix, from one request
served in order over a fresh cache (the prompt's own tree only: the proxy scores one
prompt at a time, so no earlier outputs)."""

from __future__ import annotations

from autotune.schema.config import DecodeConfig
from autotune.measure.agreement import Scorer
from autotune.methods.suffix.drafter import SuffixProposer, SuffixState
from autotune.models.loading import LoadedModel


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    """One token at every prefix (-1 where the trees propose none)."""

    def suffix(ids: list[int]) -> list[int]:
        proposer = SuffixProposer(SuffixState(config), ids[:1])
        out = []
        for t in range(len(ids)):
            found, _ = proposer(ids[:t + 1], 1)
            out.append(found[0] if found else -1)
        return out

    return suffix
