"""TensorRT-LLM's SA drafter: a suffix automaton per request, extended as tokens arrive.

Read through the code index in NVIDIA/TensorRT-LLM (no single snapshot holds every file;
each file at its commit in PROVENANCE["trtllm"], autotune/schema/engines.py):
- tensorrt_llm/llmapi/llm_args.py `SADecodingConfig`
  (the commit tests/engine_fields.py pins): `decoding_type: "SA"`,
  `max_matching_ngram_size` default -1 ("longest possible match via suffix
  automaton"; > 0 fixed-size matching; 0 invalid),
  `max_draft_len` required > 0, a chain (`max_total_draft_tokens = max_draft_len`),
  `enable_global_pool` default False (each request's own automaton).
- tensorrt_llm/_torch/speculative/suffix_automaton.py:
  the automaton is built from the prompt on the first context chunk;
  suffixAutomatonKernels.cu L114: every step
  extends it with the step's accepted tokens (the first sampled and bonus tokens too)
  before the lookup, so it holds prompt + generated tokens.
- suffixAutomaton.h: a standard suffix
  automaton whose states keep the end of their first occurrence (L185, L215: a new
  state's is its own end, a clone copies it). Longest mode (L260-294): from the last
  state follow suffix links to the first state whose occurrence ends before the last
  token (the longest repeated suffix); the root means no match; the draft is the up to
  max_draft_len tokens after that first occurrence, cut at the sequence's end (L380-381).
  Fixed mode (cu L128-130, h L322, L352): sizes n, n-1, ..., 1, the first one found: the
  suffix of min(n, longest) tokens, drafted after its first occurrence.
- sa_worker.py: the draft buffer the kernel
  wrote is returned as is and verified whole (`max_draft_len` + 1 tokens every step,
  strict prefix match). suffix_automaton.py
  `SuffixAutomatonManager`: that buffer, `_gpu_draft_tokens` [max_num_requests,
  max_draft_len], is allocated zeroed once per engine and indexed by the request's
  position in the batch, not its slot; the kernel (`suffixAutomatonExtendNgramKernel`)
  runs after every step (the prefill's too), extends the automaton with the step's
  accepted tokens, looks up, and writes only the tokens found (up to max_draft_len, cut
  at the sequence's end): slots it does not write keep what an earlier lookup, of this
  request or an earlier one, left there. `SAState` is that buffer (one per arm): exact
  at batch size 1; in the batched decoder each request keeps the row it was given at
  its prefill (TensorRT-LLM's rows follow batch positions, which shift as requests
  finish: named). Two assumptions: the buffer is taken to be zero when serving starts
  (CUDA-graph warm-up runs dummy requests through it), and the last step's lookup is
  over the tokens emitted (the kernel extends with the step's accepted tokens before
  the sampler cuts them at an EOS or the budget: they differ only when that step
  accepted past the stop).
"""

from __future__ import annotations

from typing import Sequence

import torch

from autotune.schema.config import DecodeConfig
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


class SAState:
    """TensorRT-LLM's draft buffer, one row per batch position, kept across requests:
    what a row's slots hold when a lookup writes fewer than max_draft_len tokens."""

    def __init__(self, config: DecodeConfig) -> None:
        self.config = config
        self.rows: list[list[int]] = []
        self._busy: set[int] = set()

    def claim(self) -> int:
        """The lowest free row (a new request's batch position)."""
        row = next(i for i in range(len(self.rows) + 1) if i not in self._busy)
        if row == len(self.rows):
            self.rows.append([0] * self.config.k)
        self._busy.add(row)
        return row

    def release(self, row: int) -> None:
        self._busy.discard(row)

    def absorb(self, prompt: Sequence[int], response: Sequence[int],
               max_new_tokens: int) -> None:
        """A request served untimed, its steps replayed along `response` (greedy: a
        round accepts its leading drafts equal to the response), so the buffer is left
        as serving it left it."""
        proposer = SAProposer(self.config, len(prompt), self)
        sequence = list(prompt) + list(response)
        g = 1
        while g < len(response):
            limit = min(self.config.k, max_new_tokens - g - 1)
            if limit <= 0:
                break
            drafted = proposer(sequence[:len(prompt) + g], limit)
            accepted = 0
            for token, truth in zip(drafted, response[g:]):
                if token != truth:
                    break
                accepted += 1
            proposer.observe(accepted)
            g += accepted + 1
        proposer.finish(sequence[:len(prompt) + len(response)])


class SAProposer:
    """One request's drafts: call it once per round, in order, with the whole sequence;
    the automaton takes the tokens it has not seen first. A draft is `limit` slots of
    the request's buffer row after the lookup wrote what it found (TensorRT-LLM verifies
    max_draft_len tokens every step); `observe` the accepted count after each round, and
    `finish` at the end (the kernel's lookups after the last rounds)."""

    def __init__(self, config: DecodeConfig, prompt_len: int,
                 state: SAState | None = None) -> None:
        self.max_ngram = config.sa_max_matching_ngram_size
        self.k = config.k
        self.automaton = SuffixAutomaton()
        self.state = state if state is not None else SAState(config)
        self.row = self.state.claim()
        self.looked = 0          # sequence length at the last lookup
        # Where the next round starts, as far as known: after the prefill's token, then
        # after each drafted round's accepted tokens and the target's own.
        self.next_start = prompt_len + 1

    def _lookup(self, tokens: Sequence[int], width: int = 0) -> list[int]:
        """Extend, look up and write the found tokens into the row, which is (at least)
        `width` slots wide: max_draft_len, or a policy's larger K outside TensorRT-LLM's
        fixed rule (new slots start at zero, as the engine's buffer does)."""
        for token in tokens[len(self.automaton.tokens):]:
            self.automaton.extend(token)
        slots = self.state.rows[self.row]
        width = max(self.k, width)
        if len(slots) < width:
            slots.extend([0] * (width - len(slots)))
        found = self.automaton.draft(width, self.max_ngram)
        slots[:len(found)] = found
        self.looked = len(tokens)
        return slots

    def __call__(self, tokens: Sequence[int], limit: int) -> list[int]:
        slots = list(self._lookup(tokens, limit)[:limit])
        self.next_start = self.looked
        return slots

    def observe(self, accepted: int) -> None:
        self.next_start = self.looked + accepted + 1

    def finish(self, tokens: Sequence[int]) -> None:
        """The request ended at `tokens`: the lookups the kernel ran that the decoder
        asked for no draft (rounds with one token left emit one token each), then the
        one after the last step; the row is freed."""
        if self.row < 0:
            return
        for length in range(max(self.next_start, self.looked + 1), len(tokens)):
            self._lookup(tokens[:length])
        self._lookup(tokens)
        self.state.release(self.row)
        self.row = -1


class SADrafter(Drafter):
    """The automaton's draft over the arm's buffer; deterministic: q one-hot,
    confidence 1."""

    def __init__(self, config: DecodeConfig, vocab_size: int, state: SAState) -> None:
        self.config, self.state = config, state
        self.proposer: SAProposer | None = None
        self.vocab_size = vocab_size
        self.sampling = not config.greedy

    @classmethod
    def build(cls, context: DraftContext) -> "SADrafter":
        state = context.shared if context.shared is not None else SAState(context.config)
        return cls(context.config, context.vocab_size, state)

    def prefill(self, prompt: torch.Tensor) -> None:
        self.proposer = SAProposer(self.config, prompt.shape[1], self.state)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        assert self.proposer is not None, "prefill comes first"
        found = self.proposer(seq[0].tolist(), limit)
        return Draft.fixed_tokens(seq, found, [1.0] * len(found), policy, self.vocab_size,
                                  self.sampling)

    def observe(self, n_accepted: int) -> None:
        if self.proposer is not None:
            self.proposer.observe(n_accepted)

    def finish(self, seq: torch.Tensor) -> None:
        if self.proposer is not None:
            self.proposer.finish(seq[0].tolist())
            self.proposer = None
