"""The n-gram drafter's agreement: its own lookup (under the config's engine rules) at
every prefix, exactly the first draft token of a round that starts there."""

from __future__ import annotations

from autotune.schema.config import DecodeConfig
from autotune.measure.agreement import Scorer
from autotune.methods.ngram.drafter import NgramProposer
from autotune.models.loading import LoadedModel


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    """The drafter's own lookup, one token at every prefix (-1 where it finds none)."""
    eos = target.eos_token_ids

    def ngram(ids: list[int]) -> list[int]:
        out = []
        # Asked at every prefix, in order.
        propose = NgramProposer(config, eos, vocab_size=target.forward.vocab_size,
                                device=str(target.device))
        for t in range(len(ids)):
            found = propose(ids[:t + 1], 1)
            out.append(found[0] if found else -1)
        return out

    return ngram
