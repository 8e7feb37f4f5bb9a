"""SGLang NGRAM's agreement: whether the tree's first level holds the next token, at
every prefix of one request served alone over a fresh trie (the proxy scores one prompt
at a time, so no earlier requests)."""

from __future__ import annotations

from autotune.schema.config import DecodeConfig
from autotune.measure.agreement import Scorer
from autotune.methods.sglang_ngram.drafter import NgramProposer, NgramState
from autotune.models.loading import LoadedModel


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    """One token at every prefix: the next token when a first-level node holds it, else
    the first-level node drafted first (-1 where the trie gave none: padding only)."""

    def ngram(ids: list[int]) -> list[int]:
        proposer = NgramProposer(NgramState(config), ids[:1])
        out = []
        for t in range(len(ids)):
            tree = proposer(ids[:t + 1])
            first = [tok for tok, parent in zip(tree.tokens[1:tree.drafted + 1], tree.parents)
                     if parent == 0]
            nxt = ids[t + 1] if t + 1 < len(ids) else None
            out.append(nxt if nxt in first else (first[0] if first else -1))
        return out

    return ngram
