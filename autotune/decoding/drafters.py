"""Drafters: one interface, one class per drafting method.

A drafter `propose`s up to `limit` draft tokens after the current sequence, with the
probabilities it drew them from, asking the exit policy after each token whether to go
on; then it is told how many were accepted (`observe`) so it can cut its own cache back.
A drafter lives for one generation: nothing carries over between runs or trials.

Cache conventions (batch size 1 for now; every tensor keeps its batch dimension):
the target's cache holds every token of the sequence but the last, which is still
"pending" (its keys and values are computed by the next verify pass). Self-drafters
(`layer_skip`, `sorted_exit` on the target) write scratch keys/values past that point
and cut the cache back before verification, which then overwrites those positions in
every layer. A drafter with its own cache (`draft_model`, `sorted_exit` over `--draft`)
catches up on the tokens it has not seen at the start of each round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from autotune.decoding.policies import ExitPolicy
from autotune.decoding.sampling import probabilities
from autotune.models.hf_forward import HFForward
from autotune.models.llama import LlamaForward


@dataclass
class Draft:
    """tokens: [B, k] int64; q: [B, k, V] draft probabilities (sampling only, else None);
    confidences: top-1 probability of each draft distribution; exit_layers: the layer
    each token left at (early-exit drafters only)."""

    tokens: torch.Tensor
    q: torch.Tensor | None
    confidences: list[float]
    exit_layers: list[int] = field(default_factory=list)

    @property
    def k(self) -> int:
        return self.tokens.shape[1]


class TokenChooser:
    """Turns a draft distribution's logits [B, V] into a token, its probabilities, and
    its top-1 confidence, greedily or by sampling (same temperature/top-p as the target)."""

    def __init__(self, temperature: float, top_p: float, vocab_size: int,
                 generator: torch.Generator | None) -> None:
        self.temperature, self.top_p = temperature, top_p
        self.vocab_size = vocab_size           # the shared vocabulary of draft and target
        self.generator = generator

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, float]:
        logits = logits[..., : self.vocab_size]
        if self.temperature == 0.0:
            confidence, token = torch.softmax(logits.float(), dim=-1).max(dim=-1)
            return token[:, None], None, float(confidence[0])
        q = probabilities(logits, self.temperature, self.top_p)
        token = torch.multinomial(q, 1, generator=self.generator)
        return token, q, float(q.max(dim=-1).values[0])


class Drafter:
    """`none`: proposes nothing; every round is one plain target step."""

    def prefill(self, prompt: torch.Tensor) -> None:
        """See the prompt [B, N] before decoding starts (timed as prefill)."""

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        """Up to `limit` (>= 1) draft tokens after seq [B, N]."""
        return Draft(seq.new_empty((seq.shape[0], 0)), None, [])

    def observe(self, n_accepted: int) -> None:
        """The verifier accepted the first `n_accepted` tokens of the last proposal."""


class _Collector:
    """Accumulates draft tokens one at a time and packs them into a Draft."""

    def __init__(self) -> None:
        self.tokens: list[torch.Tensor] = []
        self.qs: list[torch.Tensor] = []
        self.confidences: list[float] = []

    def add(self, token: torch.Tensor, q: torch.Tensor | None, confidence: float) -> None:
        self.tokens.append(token)
        if q is not None:
            self.qs.append(q)
        self.confidences.append(confidence)

    def draft(self) -> Draft:
        q = torch.stack(self.qs, dim=1) if self.qs else None
        return Draft(torch.cat(self.tokens, dim=1), q, self.confidences)


DraftStep = Callable[[torch.Tensor], tuple[torch.Tensor, "torch.Tensor | None", float]]


def _draft_chain(first_feed: torch.Tensor, limit: int, policy: ExitPolicy, step: DraftStep) -> Draft:
    """Draft token by token: `step(feed)` scores the tokens fed [B, T] and returns the
    next draft token [B, 1], its probabilities and confidence; each token is fed back in
    turn. Stops after `limit` tokens or when the policy says so (the last token is never
    fed, so it costs no draft pass)."""
    out = _Collector()
    feed = first_feed
    for _ in range(limit):
        token, q, confidence = step(feed)
        out.add(token, q, confidence)
        if len(out.tokens) == limit or not policy.keep_going(confidence):
            break
        feed = token
    return out.draft()


class DraftModelDrafter(Drafter):
    """`draft_model`: a separate, smaller model with its own cache (Leviathan et al.)."""

    def __init__(self, forward: LlamaForward | HFForward, max_len: int, choose: TokenChooser) -> None:
        self.forward = forward
        self.cache = forward.new_cache(1, max_len)
        self.choose = choose
        self.verified_len = 0        # sequence length at the last proposal
        self.drafted = 0

    def prefill(self, prompt: torch.Tensor) -> None:
        self.forward.forward(prompt, self.cache, last_only=True)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        self.verified_len = seq.shape[1]

        def step(feed: torch.Tensor):
            return self.choose(self.forward.forward(feed, self.cache, last_only=True)[:, -1])

        # The first feed catches up on every token the draft has not seen (at least the
        # pending one).
        draft = _draft_chain(seq[:, self.cache.length:], limit, policy, step)
        self.drafted = draft.k
        return draft

    def observe(self, n_accepted: int) -> None:
        # The cache holds the sequence plus drafts 1..k-1 (the last draft was never fed);
        # keep what the verifier confirmed.
        self.cache.crop(self.verified_len + min(n_accepted, self.drafted - 1))

    # Draft trees (see TreeDrafter): the root pass catches up like a chain's first step;
    # the tree's scratch is dropped afterwards and the accepted tokens are caught up on
    # in the next round's root pass, batched with the new pending token.
    def tree_root(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
        self.verified_len = seq.shape[1]
        logits = self.forward.forward(seq[:, self.cache.length:], self.cache, last_only=True)
        return logits[0, -1], None

    def tree_level(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, list[int] | None]:
        logits = self.forward.forward(tokens, self.cache, tree_mask=mask, position_ids=positions)
        return logits[0], None

    def tree_finish(self) -> None:
        self.cache.crop(self.verified_len)


class LayerSkipDrafter(Drafter):
    """`layer_skip`: Draft & Verify self-speculation. The draft is the target itself with
    the attention sublayers in `attn_skip` and the MLP sublayers in `mlp_skip` skipped.

    It writes into the target's cache: at non-skipped attention layers each draft token's
    keys/values go to the scratch positions past the verified prefix, where later draft
    tokens of the round attend to them; at skipped attention layers nothing is written
    or read. The cache is cut back to the verified prefix before verification, and the
    verify pass recomputes every layer's keys/values for the pending and draft tokens,
    so the draft's approximate values never reach the target.
    """

    def __init__(self, forward: LlamaForward, cache, attn_skip: tuple[int, ...],
                 mlp_skip: tuple[int, ...], choose: TokenChooser) -> None:
        self.forward, self.cache, self.choose = forward, cache, choose
        self.attn_skip, self.mlp_skip = frozenset(attn_skip), frozenset(mlp_skip)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        verified = self.cache.length

        def step(feed: torch.Tensor):
            logits = self.forward.forward(feed, self.cache, attn_skip=self.attn_skip,
                                          mlp_skip=self.mlp_skip, last_only=True)
            return self.choose(logits[:, -1])

        draft = _draft_chain(seq[:, -1:], limit, policy, step)
        self.cache.crop(verified)
        return draft

    def tree_root(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
        self.verified = self.cache.length
        logits = self.forward.forward(seq[:, -1:], self.cache, attn_skip=self.attn_skip,
                                      mlp_skip=self.mlp_skip, last_only=True)
        return logits[0, -1], None

    def tree_level(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, list[int] | None]:
        logits = self.forward.forward(tokens, self.cache, attn_skip=self.attn_skip,
                                      mlp_skip=self.mlp_skip, tree_mask=mask,
                                      position_ids=positions)
        return logits[0], None

    def tree_finish(self) -> None:
        self.cache.crop(self.verified)


class SortedExitDrafter(Drafter):
    """`sorted_exit`: S2D's Algorithm 1 over a draft stack (the target, or a draft model).

    Each draft token runs the stack's layers up to the first exit n1, scores the exit
    (final norm + LM head) and is taken there if its top-1 probability reaches that
    exit's threshold; otherwise the same hidden state continues to the next exit (no
    layer is run twice). The deepest exit always emits. A token that left early gets
    keys/values for the deeper layers of the stack from its exit hidden state (CALM's
    state propagation), so later draft tokens that go deeper attend to it.

    With the target as the stack it shares the target's cache (scratch past the verified
    prefix, cut back before verification). With a separate draft model it keeps its own
    cache and only ever keeps the full-stack keys/values of verified tokens.
    """

    def __init__(self, forward: LlamaForward, cache, exits: tuple[int, ...],
                 thresholds: tuple[float, ...], choose: TokenChooser) -> None:
        self.forward, self.cache, self.choose = forward, cache, choose
        self.exits, self.thresholds = exits, thresholds
        self.depth = exits[-1]

    def _run_stack(self, tokens: torch.Tensor) -> None:
        """Full draft stack, no head: for tokens the own cache has not seen yet."""
        step = self.forward.begin(tokens, self.cache)
        self.forward.run_layers(step, 0, self.depth)

    def prefill(self, prompt: torch.Tensor) -> None:
        if self.cache.length < prompt.shape[1] - 1:          # own cache only
            self._run_stack(prompt[:, self.cache.length:])

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        if self.cache.length < seq.shape[1] - 1:
            self._run_stack(seq[:, self.cache.length:-1])
        verified = self.cache.length
        exit_layers: list[int] = []

        def step(feed: torch.Tensor):
            state = self.forward.begin(feed, self.cache)
            done = 0
            for exit_layer, threshold in zip(self.exits, self.thresholds):
                self.forward.run_layers(state, done, exit_layer)
                done = exit_layer
                token, q, confidence = self.choose(self.forward.logits(state)[:, -1])
                if confidence >= threshold:
                    break
            if done < self.depth:
                self.forward.fill_kv(state, done, self.depth)
            exit_layers.append(done)
            return token, q, confidence

        draft = _draft_chain(seq[:, -1:], limit, policy, step)
        draft.exit_layers = exit_layers
        self.cache.crop(verified)
        return draft

    def _score_at_exits(self, tokens: torch.Tensor, mask: torch.Tensor | None = None,
                        positions: torch.Tensor | None = None
                        ) -> tuple[torch.Tensor, list[int]]:
        """Several tokens [1, T] through the exits at once (a tree level): each token
        takes the distribution of the first exit where its top-1 probability reaches
        that exit's threshold; the pass goes on while any token is still undecided, so
        tokens decided early get real deeper keys/values rather than propagated ones.
        Returns (logits [T, V], exit layer per token)."""
        state = self.forward.begin(tokens, self.cache, None, mask, positions)
        t = tokens.shape[1]
        chosen: list[torch.Tensor | None] = [None] * t
        exits = [0] * t
        done = 0
        for exit_layer, threshold in zip(self.exits, self.thresholds):
            self.forward.run_layers(state, done, exit_layer)
            done = exit_layer
            logits = self.forward.logits(state)[0]
            deepest = exit_layer == self.depth
            confidence = torch.softmax(
                logits[:, : self.choose.vocab_size].float(), dim=-1).max(dim=-1).values.tolist()
            for i in range(t):
                if chosen[i] is None and (deepest or confidence[i] >= threshold):
                    chosen[i], exits[i] = logits[i], exit_layer
            if all(c is not None for c in chosen):
                break
        if done < self.depth:
            self.forward.fill_kv(state, done, self.depth)
        return torch.stack(chosen), exits  # type: ignore[arg-type]

    def tree_root(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
        if self.cache.length < seq.shape[1] - 1:
            self._run_stack(seq[:, self.cache.length:-1])
        self.verified = self.cache.length
        logits, exits = self._score_at_exits(seq[:, -1:])
        return logits[0], exits

    def tree_level(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, list[int] | None]:
        return self._score_at_exits(tokens, mask, positions)

    def tree_finish(self) -> None:
        self.cache.crop(self.verified)


class NgramDrafter(Drafter):
    """`ngram`: prompt lookup. The last n tokens (n from ngram_max down to ngram_min) are
    searched for earlier in the sequence; the tokens that followed their most recent
    earlier occurrence are the draft. Deterministic: q is one-hot, confidence 1."""

    def __init__(self, ngram_min: int, ngram_max: int, vocab_size: int, sampling: bool) -> None:
        self.ngram_min, self.ngram_max = ngram_min, ngram_max
        self.vocab_size = vocab_size
        self.sampling = sampling          # greedy verification needs no q

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        tokens = seq[0].tolist()
        found = _lookup(tokens, self.ngram_min, self.ngram_max, limit)
        kept: list[int] = []
        for token in found:
            kept.append(token)
            if not policy.keep_going(1.0):
                break
        draft_tokens = torch.tensor(kept, dtype=seq.dtype, device=seq.device).reshape(1, -1)
        q = (torch.nn.functional.one_hot(draft_tokens, self.vocab_size).float()
             if self.sampling else None)
        return Draft(draft_tokens, q, [1.0] * len(kept))


def _lookup(tokens: list[int], ngram_min: int, ngram_max: int, limit: int) -> list[int]:
    """Continuation of the most recent earlier match of the longest matching suffix."""
    n_tokens = len(tokens)
    for n in range(min(ngram_max, n_tokens - 1), ngram_min - 1, -1):
        pattern = tokens[-n:]
        first = pattern[0]
        # Scan right to left for the most recent occurrence that has a continuation.
        for start in range(n_tokens - n - 1, -1, -1):
            if tokens[start] == first and tokens[start:start + n] == pattern:
                return tokens[start + n:start + n + limit]
    return []

