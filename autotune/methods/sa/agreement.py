"""The SA drafter's agreement: the automaton's first draft token at every prefix,
exactly the first draft token of a round that starts there (-1 where it finds none;
a padded slot is not a draft)."""

from __future__ import annotations

from autotune.schema.config import DecodeConfig
from autotune.measure.agreement import Scorer
from autotune.methods.sa.drafter import SuffixAutomaton
from autotune.models.loading import LoadedModel


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    """One token at every prefix, the automaton extended token by token."""

    def sa(ids: list[int]) -> list[int]:
        automaton = SuffixAutomaton()
        out = []
        for token in ids:
            automaton.extend(token)
            found = automaton.draft(1, config.sa_max_matching_ngram_size)
            out.append(found[0] if found else -1)
        return out

    return sa
