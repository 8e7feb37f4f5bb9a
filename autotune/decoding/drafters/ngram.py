"""`ngram`: prompt lookup (Saxena, 2023; vLLM's and HF's n-gram drafting)."""

from __future__ import annotations

import torch

from autotune.decoding.drafters.base import Draft, DraftContext, Drafter
from autotune.decoding.policies import ExitPolicy


def lookup(tokens: list[int], ngram_min: int, ngram_max: int, limit: int) -> list[int]:
    """Up to `limit` tokens that followed the most recent earlier occurrence of the
    longest suffix of `tokens` (n from ngram_max down to ngram_min) that occurs earlier;
    [] when none does."""
    n_tokens = len(tokens)
    for n in range(min(ngram_max, n_tokens - 1), ngram_min - 1, -1):
        pattern = tokens[-n:]
        first = pattern[0]
        # Scan right to left for the most recent occurrence that has a continuation.
        for start in range(n_tokens - n - 1, -1, -1):
            if tokens[start] == first and tokens[start:start + n] == pattern:
                return tokens[start + n:start + n + limit]
    return []


class NgramDrafter(Drafter):
    """The tokens `lookup` finds are the draft. Deterministic: q is one-hot, confidence 1
    (so a confidence exit rule never stops it)."""

    def __init__(self, ngram_min: int, ngram_max: int, vocab_size: int, sampling: bool) -> None:
        self.ngram_min, self.ngram_max = ngram_min, ngram_max
        self.vocab_size = vocab_size
        self.sampling = sampling          # greedy verification needs no q

    @classmethod
    def build(cls, context: DraftContext) -> "NgramDrafter":
        config = context.config
        return cls(config.ngram_min, config.ngram_max, context.vocab_size, not config.greedy)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        found = lookup(seq[0].tolist(), self.ngram_min, self.ngram_max, limit)
        kept: list[int] = []
        for token in found:
            kept.append(token)
            if not policy.keep_going(1.0):
                break
        draft_tokens = torch.tensor(kept, dtype=seq.dtype, device=seq.device).reshape(1, -1)
        q = (torch.nn.functional.one_hot(draft_tokens, self.vocab_size).float()
             if self.sampling else None)
        return Draft(draft_tokens, q, [1.0] * len(kept))
