"""llama-server's ngram-simple drafter, as autotune's decoder runs it.

Read in llama.cpp as vendored by PROVENANCE["llama_server"] (no llama.cpp commit recorded;
`autotune.schema.llama_spec`): common/ngram-map.cpp L49-112
`common_ngram_simple_draft`, given the slot's tokens without the token just sampled and
that token:
- no draft while the history holds n + m + 1 tokens or fewer (n = size_n, m = size_m);
- the pattern is the history's last n - 1 tokens and the sampled token;
- it is searched backwards from the latest position that leaves it wholly inside the
  history down to position 1 (position 0 is never matched); the first hit, the most
  recent occurrence, is the only one tried;
- the draft is the up to m history tokens after the match, and none at all when fewer
  than n follow it;
- common/speculative.cpp L2900-2925 cuts it to the slot's limit,
  tools/server/server-context.cpp L517-536: the tokens left to generate minus one.
Draft tokens are verified by sample-and-match (greedy: accepted while equal).
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.drafters.base import Draft, DraftContext, Drafter
from autotune.schema.llama_spec import REPRODUCED, reproduced, spec_types
from autotune.decoding.policies import ExitPolicy


def ngram_simple_draft(history: list[int], sampled: int, size_n: int,
                       size_m: int) -> list[int]:
    """llama.cpp's `common_ngram_simple_draft` on `history` (the sequence before the token
    just sampled) and `sampled`."""
    length = len(history)
    if length <= size_n + size_m + 1:
        return []
    pattern = history[length - size_n + 1:] + [sampled]
    for start in range(length - size_n - 1, 0, -1):
        if history[start:start + size_n] == pattern:
            copy = min(size_m, length - (start + size_n))
            if copy < size_n:
                return []
            return history[start + size_n:start + size_n + copy]
    return []


class LlamaNgramDrafter(Drafter):
    """ngram-simple's draft (size_m = the config's k), cut to the round's limit;
    deterministic: q one-hot, confidence 1."""

    def __init__(self, config: DecodeConfig, vocab_size: int, eos: Collection[int]) -> None:
        if not reproduced(config.llama_spec_type):
            others = [t for t in spec_types(config.llama_spec_type) if t not in REPRODUCED]
            raise AutotuneError(
                f"llama_spec_type {', '.join(others)} runs in llama-server only: measure it "
                "there (measure --in llama_server, search --target llama_server)")
        self.size_n = config.llama_ngram_size_n
        self.size_m = config.k
        self.vocab_size = vocab_size
        self.sampling = not config.greedy

    @classmethod
    def build(cls, context: DraftContext) -> "LlamaNgramDrafter":
        return cls(context.config, context.vocab_size, context.target.eos_token_ids)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        tokens = seq[0].tolist()
        found = ngram_simple_draft(tokens[:-1], tokens[-1], self.size_n, self.size_m)[:limit]
        return Draft.fixed_tokens(seq, found, [1.0] * len(found), policy, self.vocab_size,
                                  self.sampling)
