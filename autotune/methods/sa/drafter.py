"""TensorRT-LLM's SA drafter: a suffix automaton per request, extended as tokens arrive.

Read through the code index in NVIDIA/TensorRT-LLM (no single snapshot holds every file;
commits as the index gave them):
- tensorrt_llm/llmapi/llm_args.py `SADecodingConfig` (index file 55143598664, commit
  not given): `decoding_type: "SA"`, `max_matching_ngram_size` default -1 ("longest
  possible match via suffix automaton"; > 0 fixed-size matching; 0 invalid),
  `max_draft_len` required > 0, a chain (`max_total_draft_tokens = max_draft_len`),
  `enable_global_pool` default False (each request's own automaton).
- tensorrt_llm/_torch/speculative/suffix_automaton.py @ 1412a497a5db05a5a88c1a9c105f1858e814da90:
  the automaton is built from the prompt on the first context chunk;
  suffixAutomatonKernels.cu @ a070a1f73dd0cadf0ddfe3430a9f6fafc6d908d5 L114: every step
  extends it with the step's accepted tokens (the first sampled and bonus tokens too)
  before the lookup, so it holds prompt + generated tokens.
- suffixAutomaton.h @ b120c7c9436f2f3e20da1fa64df67da73fce51b8: a standard suffix
  automaton whose states keep the end of their first occurrence (L185, L215: a new
  state's is its own end, a clone copies it). Longest mode (L260-294): from the last
  state follow suffix links to the first state whose occurrence ends before the last
  token (the longest repeated suffix); the root means no match; the draft is the up to
  max_draft_len tokens after that first occurrence, cut at the sequence's end (L380-381).
  Fixed mode (cu L128-130, h L322, L352): sizes n, n-1, ..., 1, the first one found: the
  suffix of min(n, longest) tokens, drafted after its first occurrence.
- sa_worker.py @ ec4eb98041d0a2d71c2e316c3ae30c018a674814: the draft buffer is returned
  as is and verified whole (`max_draft_len` + 1 tokens every step, strict prefix match);
  slots the lookup did not write keep the previous step's contents. autotune pads them
  with the sequence's last token (its engine rule: what those stale slots hold is not
  reproduced, only that they are verified).
"""

from __future__ import annotations

from typing import Collection

import torch

from autotune.decoding.config import DecodeConfig
from autotune.decoding.drafters.base import Draft, DraftContext, Drafter
from autotune.decoding.policies import ExitPolicy

LONGEST = -1        # sa_max_matching_ngram_size: the longest repeated suffix


class SuffixAutomaton:
    """An online suffix automaton over a token sequence (`extend` one token at a time),
    each state keeping the end index of its first occurrence."""

    def __init__(self) -> None:
        self.length = [0]                    # longest string of each state
        self.link = [-1]                     # suffix link
        self.first_end = [-1]                # end index of the first occurrence
        self.next: list[dict[int, int]] = [{}]
        self.last = 0
        self.tokens: list[int] = []

    def extend(self, token: int) -> None:
        end = len(self.tokens)
        self.tokens.append(token)
        current = len(self.length)
        self.length.append(self.length[self.last] + 1)
        self.link.append(-1)
        self.first_end.append(end)
        self.next.append({})
        state = self.last
        while state != -1 and token not in self.next[state]:
            self.next[state][token] = current
            state = self.link[state]
        if state == -1:
            self.link[current] = 0
        else:
            following = self.next[state][token]
            if self.length[state] + 1 == self.length[following]:
                self.link[current] = following
            else:
                clone = len(self.length)
                self.length.append(self.length[state] + 1)
                self.link.append(self.link[following])
                self.first_end.append(self.first_end[following])
                self.next.append(dict(self.next[following]))
                while state != -1 and self.next[state].get(token) == following:
                    self.next[state][token] = clone
                    state = self.link[state]
                self.link[following] = self.link[current] = clone
        self.last = current

    def draft(self, limit: int, max_ngram: int = LONGEST) -> list[int]:
        """Up to `limit` tokens after the first occurrence of the longest suffix that
        occurred before (at most `max_ngram` tokens of it unless LONGEST); [] when none
        did."""
        n = len(self.tokens)
        state = self.link[self.last] if self.last else -1
        while state > 0 and self.first_end[state] + 1 >= n:
            state = self.link[state]
        if state <= 0:
            return []
        if max_ngram != LONGEST:
            wanted = min(max_ngram, self.length[state])
            while self.length[self.link[state]] >= wanted:
                state = self.link[state]
        start = self.first_end[state] + 1
        return self.tokens[start:start + limit]


class SAProposer:
    """One request's drafts: call it once per round, in order, with the whole sequence;
    the automaton takes the tokens it has not seen first. Drafts are padded to `limit`
    with the last token (TensorRT-LLM verifies max_draft_len tokens every step)."""

    def __init__(self, config: DecodeConfig) -> None:
        self.max_ngram = config.sa_max_matching_ngram_size
        self.automaton = SuffixAutomaton()

    def __call__(self, tokens: list[int], limit: int) -> list[int]:
        for token in tokens[len(self.automaton.tokens):]:
            self.automaton.extend(token)
        found = self.automaton.draft(limit, self.max_ngram)
        return found + [tokens[-1]] * (limit - len(found))


class SADrafter(Drafter):
    """The automaton's draft; deterministic: q one-hot, confidence 1."""

    def __init__(self, config: DecodeConfig, vocab_size: int, eos: Collection[int]) -> None:
        self.proposer = SAProposer(config)
        self.vocab_size = vocab_size
        self.sampling = not config.greedy

    @classmethod
    def build(cls, context: DraftContext) -> "SADrafter":
        return cls(context.config, context.vocab_size, context.target.eos_token_ids)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        found = self.proposer(seq[0].tolist(), limit)
        return Draft.fixed_tokens(seq, found, [1.0] * len(found), policy, self.vocab_size,
                                  self.sampling)
