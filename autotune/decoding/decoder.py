"""The decoder loop: prefill, then rounds of draft -> verify -> accept, with a trace.

A round drafts a chain (up to k tokens under the exit policy) or, with tree knobs, a
draft tree (tree_drafting.py) that one target pass verifies with a tree mask before the
accepted path's cache entries are compacted (tree.py).

The same loop runs the AR baseline (the `none` drafter proposes nothing, so every round
is one target step) and every speculative method, so the baseline pays exactly the
loop's own overhead and nothing else. The loop does not time itself: it reads a clock
handed in by `autotune.measure`, the one module that times anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from autotune.decoding.config import LAYER_METHODS, DecodeConfig
from autotune.decoding.drafters import (Draft, Drafter, DraftModelDrafter, LayerSkipDrafter,
                                        NgramDrafter, SortedExitDrafter, TokenChooser)
from autotune.decoding.policies import make_policy
from autotune.decoding.sampling import probabilities
from autotune.decoding.tree import DraftTree, compact_cache
from autotune.decoding.tree_drafting import TreeDrafter
from autotune.decoding.verify import (greedy_tree_verify, greedy_verify, rejection_sample,
                                      tree_rejection_sample)
from autotune.errors import AutotuneError
from autotune.models.loading import LoadedModel, check_shared_vocabulary

# HF's heuristic schedule grows K without bound; a cap keeps one runaway round from
# drafting far past what any verify pass should carry.
MAX_DRAFT_TOKENS = 64


@dataclass
class RoundTrace:
    """One draft/verify round: what a replay or a plot needs."""

    drafted: int                 # draft tokens proposed
    accepted: int                # of them accepted by the verifier
    emitted: int                 # tokens appended (accepted + the target's own), after EOS/limit
    confidences: list[float]     # top-1 probability of each draft token's distribution
    draft_s: float               # proposing the draft
    verify_s: float              # the target's forward over the verify tokens
    verified: int                # tokens in the verify pass (drafted + 1)
    other_s: float = 0.0         # accept/reject, cache crop, bookkeeping, streaming
    exit_layers: list[int] = field(default_factory=list)
    draft_depth: int = 0         # deepest drafted level (a chain: its length)


@dataclass
class Generation:
    """One prompt's output and timings. `tokens` are the generated ids (EOS included)."""

    prompt_len: int
    tokens: list[int]
    prefill_s: float
    decode_s: float
    rounds: list[RoundTrace]
    cache_bytes: int


class SpeculativeDecoder:
    """Generates with one DecodeConfig over a target (and optionally a draft) model."""

    def __init__(self, target: LoadedModel, config: DecodeConfig,
                 draft: LoadedModel | None = None) -> None:
        config.validate()
        self.target, self.draft, self.config = target, draft, config
        method = config.method
        if draft is not None:
            check_shared_vocabulary(target, draft)
        if method == "draft_model" and draft is None:
            raise AutotuneError("method=draft_model needs a draft model: pass --draft")
        stack = draft if (method == "sorted_exit" and draft is not None) else target
        if method in LAYER_METHODS and not stack.forward.supports_layers:
            raise AutotuneError(
                f"method={method} needs layer access, which {stack.name} "
                f"({stack.hf_model.config.model_type}) does not offer: only Llama-family "
                "models run on the compact forward; use draft_model or ngram")
        if method == "layer_skip":
            config.validate(n_layers=target.n_layers)
        if method == "sorted_exit":
            config.validate(n_layers=stack.n_layers)
        if config.is_tree:
            # Tree masks and per-node positions exist only in the compact forward.
            uses_draft = method in ("draft_model", "sorted_exit")
            for role, model in (("target", target), ("draft", draft if uses_draft else None)):
                if model is not None and not model.forward.supports_layers:
                    raise AutotuneError(
                        f"draft trees need the compact Llama-family forward for the {role} "
                        f"({model.name}, {model.hf_model.config.model_type}); use a chain "
                        "(tree_width=0) with this model")
        self.vocab_size = target.forward.vocab_size if draft is None else min(
            target.forward.vocab_size, draft.forward.vocab_size)
        self.eos = target.eos_token_ids

    def _drafter(self, target_cache, max_len: int, choose: TokenChooser) -> Drafter:
        c, method = self.config, self.config.method
        if method == "draft_model":
            return DraftModelDrafter(self.draft.forward, max_len, choose)
        if method == "layer_skip":
            return LayerSkipDrafter(self.target.forward, target_cache, c.attn_skip,
                                    c.mlp_skip, choose)
        if method == "sorted_exit":
            if self.draft is None:
                return SortedExitDrafter(self.target.forward, target_cache, c.exits,
                                         c.exit_thresholds(), choose)
            return SortedExitDrafter(self.draft.forward, self.draft.forward.new_cache(1, max_len),
                                     c.exits, c.exit_thresholds(), choose)
        if method == "ngram":
            return NgramDrafter(c.ngram_min, c.ngram_max, self.vocab_size, not c.greedy)
        return Drafter()

    def _target_token(self, logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """The target's own next token from logits [B, V]: argmax, or a sample."""
        if self.config.greedy:
            return logits.argmax(dim=-1)
        p = probabilities(logits[..., : self.vocab_size], self.config.temperature,
                          self.config.top_p)
        return torch.multinomial(p, 1, generator=generator).squeeze(1)

    def _verify(self, draft: Draft, logits: torch.Tensor, generator: torch.Generator | None
                ) -> tuple[int, int]:
        """(n_accepted, next token) for target logits [B, k+1, V]."""
        if self.config.greedy:
            n, nxt = greedy_verify(draft.tokens, logits)
        else:
            p = probabilities(logits[..., : self.vocab_size], self.config.temperature,
                              self.config.top_p)
            # A round without drafts (the AR baseline, a budget of one token, no n-gram
            # match) is rejection sampling with k = 0: a plain draw from p.
            q = draft.q if draft.q is not None else p[:, :0]
            n, nxt = rejection_sample(draft.tokens, q, p, generator)
        return int(n[0]), int(nxt[0])

    def _tree_round(self, tree_drafter: TreeDrafter, seq: torch.Tensor, cache, limit: int,
                    generator: torch.Generator | None, clock: Callable[[], float]
                    ) -> tuple[DraftTree, list[int], list[int], float, float]:
        """One tree round: draft, verify every node in one pass, keep the accepted path.
        Returns (tree, accepted path, new tokens, draft_done, forward_done)."""
        forward = self.target.forward
        tree = tree_drafter.propose(seq, limit)
        draft_done = clock()
        base = cache.length
        verify_ids = torch.cat((seq[:, -1:], tree.tokens), dim=1)
        device = verify_ids.device
        logits = forward.forward(verify_ids, cache, start=base,
                                 tree_mask=tree.attention_mask(device),
                                 position_ids=tree.position_ids(seq.shape[1] - 1, device))
        forward_done = clock()
        children, node_tokens = tree.children(), tree.tokens[0].tolist()
        if self.config.greedy:
            path, next_token = greedy_tree_verify(children, node_tokens,
                                                  logits[0].argmax(dim=-1).tolist())
        else:
            def p_at(node: int) -> torch.Tensor:
                return probabilities(logits[0, node, : self.vocab_size],
                                     self.config.temperature, self.config.top_p)

            path, next_token = tree_rejection_sample(children, node_tokens, p_at, generator)
        compact_cache(cache, base, path)
        return tree, path, tree.path_tokens(path) + [next_token], draft_done, forward_done

    @torch.inference_mode()
    def generate(self, prompt: list[int], max_new_tokens: int, clock: Callable[[], float],
                 generator: torch.Generator | None = None,
                 on_tokens: Callable[[list[int]], None] | None = None) -> Generation:
        """Generate up to `max_new_tokens` after `prompt`, stopping after an EOS token.

        `on_tokens(ids)` is called with each round's new tokens (the first one, from
        the prefill, included) for streaming; its time counts as the round's `other_s`.
        """
        if max_new_tokens < 1:
            raise AutotuneError("max_new_tokens must be at least 1")
        forward, device = self.target.forward, self.target.device
        # Drafts never run past the token budget, so this many positions always suffice
        # for a chain; a tree also needs room for its side branches: the verify pass
        # writes every node, and a tree drafter writes every node it feeds.
        c = self.config
        tree_room = max(c.tree_node_count(), c.tree_width * (c.tree_depth - 1)) + 1 \
            if c.is_tree else 0
        max_len = len(prompt) + max_new_tokens + tree_room
        cache = forward.new_cache(1, max_len)
        policy = make_policy(self.config)
        choose = TokenChooser(self.config.temperature, self.config.top_p, self.vocab_size,
                              generator)
        drafter = self._drafter(cache, max_len, choose)
        tree_drafter = (TreeDrafter(drafter, self.config, self.vocab_size, device)
                        if self.config.is_tree else None)
        # The sequence lives in one preallocated buffer; `seq` views its filled part.
        buffer = torch.zeros((1, max_len), dtype=torch.long, device=device)
        buffer[0, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
        length = len(prompt)
        no_draft = Draft(buffer.new_empty((1, 0)), None, [])

        start_time = clock()
        logits = forward.forward(buffer[:, :length], cache, last_only=True)
        drafter.prefill(buffer[:, :length])
        first = int(self._target_token(logits[:, -1], generator)[0])
        buffer[0, length] = first
        length += 1
        generated = [first]
        if on_tokens is not None:
            on_tokens([first])
        decode_start = clock()
        rounds: list[RoundTrace] = []
        round_start = decode_start
        while len(generated) < max_new_tokens and generated[-1] not in self.eos:
            budget = max_new_tokens - len(generated)
            # Never draft past the budget: k drafts can yield k+1 tokens.
            limit = min(policy.limit(), budget - 1, MAX_DRAFT_TOKENS)
            seq = buffer[:, :length]
            if tree_drafter is not None:
                # A tree never grows deeper than the budget: a path of d nodes yields d+1.
                tree, path, new_tokens, draft_done, forward_done = self._tree_round(
                    tree_drafter, seq, cache, min(budget - 1, MAX_DRAFT_TOKENS), generator,
                    clock)
                n_accepted, drafted, verified = len(path), tree.size, tree.size + 1
                confidences, exit_layers, depth = tree.probs, tree.exit_layers, tree.depth
            else:
                draft = drafter.propose(seq, limit, policy) if limit > 0 else no_draft
                draft_done = clock()
                verified_len = cache.length
                verify_ids = torch.cat((seq[:, -1:], draft.tokens), dim=1)
                logits = forward.forward(verify_ids, cache, start=verified_len)
                forward_done = clock()
                n_accepted, next_token = self._verify(draft, logits, generator)
                cache.crop(verified_len + 1 + n_accepted)
                if draft.k:
                    drafter.observe(n_accepted)
                policy.update(draft.k, n_accepted)
                new_tokens = draft.tokens[0, :n_accepted].tolist() + [next_token]
                drafted, verified = draft.k, verify_ids.shape[1]
                confidences, exit_layers, depth = draft.confidences, draft.exit_layers, draft.k
            # At most limit + 1 <= budget tokens; cut after the first EOS.
            for i, token in enumerate(new_tokens):
                if token in self.eos:
                    new_tokens = new_tokens[: i + 1]
                    break
            buffer[0, length:length + len(new_tokens)] = torch.tensor(new_tokens)
            length += len(new_tokens)
            generated.extend(new_tokens)
            if on_tokens is not None:
                on_tokens(new_tokens)
            round_end = clock()
            rounds.append(RoundTrace(
                drafted=drafted, accepted=n_accepted, emitted=len(new_tokens),
                confidences=confidences, draft_s=draft_done - round_start,
                verify_s=forward_done - draft_done, verified=verified,
                other_s=round_end - forward_done, exit_layers=exit_layers, draft_depth=depth))
            round_start = round_end
        end_time = clock()
        own_cache = getattr(drafter, "cache", None)      # a drafter's cache of its own
        cache_bytes = cache.nbytes() + (
            own_cache.nbytes() if own_cache is not None and own_cache is not cache else 0)
        return Generation(prompt_len=len(prompt), tokens=generated,
                          prefill_s=decode_start - start_time, decode_s=end_time - decode_start,
                          rounds=rounds, cache_bytes=cache_bytes)
