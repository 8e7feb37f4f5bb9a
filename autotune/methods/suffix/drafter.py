"""Suffix decoding's drafter, as vLLM's SuffixDecodingProposer drives arctic_inference.

vLLM (PROVENANCE["vllm"]) v1/spec_decode/suffix_decoding.py `propose`, per request
and step: on its first step `start_request(req_id, prompt)` (the prompt's own tree, and
a slot in the shared tree of outputs unless max_cached_requests is 0); every step
`add_active_response(req_id, sampled_ids)` (the tokens the step emitted, so the first
token from the prefill too), then `speculate(req_id, last max_tree_depth tokens,
max_spec_tokens=min(num_speculative_tokens, max_model_len - num_tokens - 1),
max_spec_factor, min_token_prob)`, a chain (no tree spec); a request gone from the batch
is stopped at the next step (its prompt tree dropped, its output kept in the shared tree
until evicted, FIFO). Suffix decoding runs on Model Runner V1 (vllm/config/vllm.py
L3066-3068), which drafts a variable number of tokens per step.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from autotune.schema.config import DecodeConfig
from autotune.decoding.drafters.base import Draft, DraftContext, Drafter
from autotune.decoding.policies import ExitPolicy


class SuffixState:
    """What suffix decoding keeps across the requests one arm serves: arctic_inference's
    SuffixDecodingCache (the outputs of up to `suffix_max_cached_requests` earlier
    requests, FIFO) and the next request id."""

    def __init__(self, config: DecodeConfig) -> None:
        from arctic_inference.suffix_decoding import SuffixDecodingCache

        self.config = config
        self.cache: Any = SuffixDecodingCache(
            max_tree_depth=config.suffix_max_tree_depth,
            max_cached_requests=config.suffix_max_cached_requests)
        self._next_id = 0

    def start(self, prompt: Sequence[int]) -> int:
        """A new request over `prompt`: its id."""
        request = self._next_id
        self._next_id += 1
        self.cache.start_request(request, list(prompt))
        return request

    def absorb(self, prompt: Sequence[int], response: Sequence[int],
               max_new_tokens: int) -> None:
        """A request served untimed: its prompt and output filed as serving it would
        (the cache takes whole tokens whatever the rounds, so the budget is not read)."""
        request = self.start(prompt)
        if response:
            self.cache.add_active_response(request, list(response))
        self.cache.stop_request(request)


class SuffixProposer:
    """One request's drafts: call it once per round, in order, with the whole sequence
    (prompt + tokens generated so far); `finish` files the last round's tokens."""

    def __init__(self, state: SuffixState, prompt: Sequence[int]) -> None:
        self.state, self.config = state, state.config
        self.request = state.start(prompt)
        self.seen = len(prompt)
        self.active = True

    def _file(self, tokens: Sequence[int]) -> None:
        if len(tokens) > self.seen:
            self.state.cache.add_active_response(self.request, list(tokens[self.seen:]))
            self.seen = len(tokens)

    def __call__(self, tokens: Sequence[int], limit: int) -> tuple[list[int], list[float]]:
        """Up to `limit` draft tokens after `tokens`, with their frequency estimates."""
        self._file(tokens)
        depth = self.config.suffix_max_tree_depth
        draft = self.state.cache.speculate(
            self.request, list(tokens[-depth:]), max_spec_tokens=limit,
            max_spec_factor=self.config.suffix_max_spec_factor,
            min_token_prob=self.config.suffix_min_token_prob)
        return list(draft.token_ids), list(draft.probs)

    def finish(self, tokens: Sequence[int]) -> None:
        """The request is done: its last tokens filed, its prompt tree dropped."""
        if self.active:
            self._file(tokens)
            self.state.cache.stop_request(self.request)
            self.active = False


class SuffixDrafter(Drafter):
    """The chain arctic_inference speculates; a draft token's confidence is its frequency
    estimate. Deterministic: under sampling q is one-hot (as vLLM verifies it)."""

    def __init__(self, state: SuffixState, vocab_size: int, sampling: bool) -> None:
        self.state, self.vocab_size, self.sampling = state, vocab_size, sampling
        self.proposer: SuffixProposer | None = None

    @classmethod
    def build(cls, context: DraftContext) -> "SuffixDrafter":
        state = context.shared if context.shared is not None else SuffixState(context.config)
        return cls(state, context.vocab_size, not context.config.greedy)

    def prefill(self, prompt: torch.Tensor) -> None:
        self.proposer = SuffixProposer(self.state, prompt[0].tolist())

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        assert self.proposer is not None, "prefill comes first"
        found, probs = self.proposer(seq[0].tolist(), limit)
        return Draft.fixed_tokens(seq, found, probs, policy, self.vocab_size, self.sampling)

    def finish(self, seq: torch.Tensor) -> None:
        if self.proposer is not None:
            self.proposer.finish(seq[0].tolist())
