"""`ngram`: prompt lookup (Saxena, 2023; vLLM's and HF's n-gram drafting)."""

from __future__ import annotations

from typing import Collection

import torch

from autotune.decoding.config import DecodeConfig
from autotune.decoding.drafters.base import Draft, DraftContext, Drafter
from autotune.decoding.engines import EARLIEST, engine_rules
from autotune.decoding.policies import ExitPolicy


def lookup(tokens: list[int], ngram_min: int, ngram_max: int, limit: int,
           earliest: bool = False) -> list[int]:
    """Up to `limit` tokens that followed an earlier occurrence of the longest suffix of
    `tokens` (n from ngram_max down to ngram_min) that occurs earlier: its most recent
    occurrence, or with `earliest` its first one; [] when none does. An occurrence
    overlapping the suffix counts; its continuation runs at most to the sequence's end."""
    n_tokens = len(tokens)
    for n in range(min(ngram_max, n_tokens - 1), ngram_min - 1, -1):
        pattern = tokens[-n:]
        first = pattern[0]
        # Every start before the suffix's own has a continuation of at least one token.
        starts = range(n_tokens - n) if earliest else range(n_tokens - n - 1, -1, -1)
        for start in starts:
            if tokens[start] == first and tokens[start:start + n] == pattern:
                return tokens[start + n:start + n + limit]
    return []


def ngram_proposal(tokens: list[int], config: DecodeConfig, limit: int,
                   eos: Collection[int]) -> list[int]:
    """The n-gram draft of `config` after `tokens`, under its engine's rules: the match
    rule (most recent or earliest occurrence), and a draft cut before its first EOS token
    where the engine does that (transformers)."""
    rules = engine_rules(config.engine)
    found = lookup(tokens, config.ngram_min, config.ngram_max, limit,
                   earliest=rules.ngram_match == EARLIEST)
    if rules.ngram_stops_at_eos:
        for i, token in enumerate(found):
            if token in eos:
                return found[:i]
    return found


class NgramDrafter(Drafter):
    """The tokens `lookup` finds are the draft. Deterministic: q is one-hot, confidence 1
    (so a confidence exit rule never stops it)."""

    def __init__(self, config: DecodeConfig, vocab_size: int, eos: Collection[int]) -> None:
        self.config = config
        self.vocab_size = vocab_size
        self.eos = frozenset(eos)
        self.sampling = not config.greedy          # greedy verification needs no q

    @classmethod
    def build(cls, context: DraftContext) -> "NgramDrafter":
        return cls(context.config, context.vocab_size, context.target.eos_token_ids)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        found = ngram_proposal(seq[0].tolist(), self.config, limit, self.eos)
        kept: list[int] = []
        for token in found:
            kept.append(token)
            if not policy.keep_going(1.0):
                break
        draft_tokens = torch.tensor(kept, dtype=seq.dtype, device=seq.device).reshape(1, -1)
        q = (torch.nn.functional.one_hot(draft_tokens, self.vocab_size).float()
             if self.sampling else None)
        return Draft(draft_tokens, q, [1.0] * len(kept))
