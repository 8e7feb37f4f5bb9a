"""`ngram`: prompt lookup (Saxena, 2023; vLLM's and HF's n-gram drafting)."""

from __future__ import annotations

from typing import Collection, Sequence

import torch

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.drafters.base import Draft, DraftContext, Drafter
from autotune.schema.engines import EARLIEST, engine_rules
from autotune.decoding.policies import ExitPolicy


def lookup(tokens: list[int], ngram_min: int, ngram_max: int, limit: int,
           earliest: bool = False, masked: frozenset[int] = frozenset()) -> list[int]:
    """Up to `limit` tokens that followed an earlier occurrence of the longest suffix of
    `tokens` (n from ngram_max down to ngram_min) that occurs earlier: its most recent
    occurrence, or with `earliest` its first one; [] when none does. An occurrence
    overlapping the suffix counts; its continuation runs at most to the sequence's end.
    A continuation is cut before its first token in `masked`, and one cut to nothing
    gives way to the next occurrence (transformers' sampled prompt lookup:
    hf_stand_in.py)."""
    n_tokens = len(tokens)
    for n in range(min(ngram_max, n_tokens - 1), ngram_min - 1, -1):
        pattern = tokens[-n:]
        first = pattern[0]
        # Every start before the suffix's own has a continuation of at least one token.
        starts = range(n_tokens - n) if earliest else range(n_tokens - n - 1, -1, -1)
        for start in starts:
            if tokens[start] == first and tokens[start:start + n] == pattern:
                found = tokens[start + n:start + n + limit]
                if masked:
                    found = found[:next((i for i, t in enumerate(found) if t in masked),
                                        len(found))]
                if found:
                    return found
    return []


def _drop_shorter(filed: list[tuple[int, ...]], length: int) -> None:
    """Drop the continuations shorter than `length` as TensorRT-LLM's code does, not as
    its comment says ("Drop all existed matches with small length"): ngram.py L123-125
    (PROVENANCE["trtllm"]; the same at c4dc529f) removes them from the OrderedSet it is
    iterating over, and ordered-set 4.1.0 iterates its item list (`iter(self.items)`)
    while `remove` deletes from that list, so the continuation after each one removed
    moves under the iterator's last position and is skipped, kept whatever its length
    (tests/oracles/trtllm_ngram_transcript.json records TensorRT-LLM's own code)."""
    position = 0
    while position < len(filed):
        if len(filed[position]) < length:
            del filed[position]     # the next one shifts into `position`, passed already
        position += 1


class MatchPool:
    """TensorRT-LLM's n-gram pool for one request (NGramDecodingConfig with is_keep_all,
    is_use_oldest and a private pool; tensorrt_llm/_torch/speculative/ngram.py at
    its commit in PROVENANCE["trtllm"]). On every draft call it first files every
    n-gram (sizes max down to 1) of the tokens since its window start with the up to
    `max_draft` tokens that follow it, keeping a pattern's earlier continuations unless
    the new one is longer (shorter ones are then dropped, as TensorRT-LLM's loop drops
    them: `_drop_shorter`, which keeps some); the window then restarts
    max_draft + max_ngram - 1 tokens before the end. The draft is the oldest continuation
    filed under the longest suffix of the sequence that has one."""

    def __init__(self, max_ngram: int, max_draft: int,
                 pool: dict[tuple[int, ...], list[tuple[int, ...]]] | None = None) -> None:
        self.max_ngram, self.max_draft = max_ngram, max_draft
        # A public pool is one dict shared by every request (`PublicPool`); the window
        # start is always this request's own.
        self.pool: dict[tuple[int, ...], list[tuple[int, ...]]] = {} if pool is None else pool
        self.start = 0

    def _file(self, prefix: list[int]) -> None:
        sequence = prefix[self.start:]
        for size in range(min(self.max_ngram, len(prefix) - 1), 0, -1):
            for left in range(len(sequence) - size):
                right = min(left + size + self.max_draft, len(sequence))
                pattern = tuple(sequence[left:left + size])
                match = tuple(sequence[left + size:right])
                filed = self.pool.get(pattern)
                if filed is None:
                    self.pool[pattern] = [match]
                elif match not in filed:
                    _drop_shorter(filed, len(match))
                    filed.append(match)
        self.start = max(0, len(prefix) - (self.max_draft + self.max_ngram - 1))

    def draft(self, prefix: list[int], limit: int) -> list[int]:
        self._file(prefix)
        for size in range(min(self.max_ngram, len(prefix) - 1), 0, -1):
            filed = self.pool.get(tuple(prefix[-size:]))
            if filed:
                return list(filed[0][:limit])
        return []


class PublicPool:
    """TensorRT-LLM's public n-gram pool (`is_public_pool`, its default): one pattern ->
    continuations map filed by every request's draft calls and never emptied
    (NGramPoolManager in tensorrt_llm/_torch/speculative/ngram.py, PROVENANCE["trtllm"]:
    `pool = self.pool if self.is_public_pool else self.pool[request_id]`;
    `update_resources` returns early for a public pool,
    "TODO: Here should be an strategy to update the pool"). The state an arm keeps
    across requests for `ngram_pool=public`."""

    def __init__(self, config: DecodeConfig) -> None:
        self.config = config
        self.patterns: dict[tuple[int, ...], list[tuple[int, ...]]] = {}

    def absorb(self, prompt: Sequence[int], response: Sequence[int],
               max_new_tokens: int) -> None:
        """File a request served untimed as serving it files it: the pool grows inside
        each draft call, so the request's rounds are replayed along its response (its
        own drafts, accepted while they equal the response; greedy, fixed K)."""
        pool = MatchPool(self.config.ngram_max, self.config.k, self.patterns)
        tokens, generated = list(prompt), 1
        while generated < len(response):
            limit = min(self.config.k, max_new_tokens - generated - 1)
            if limit <= 0:
                break
            drafted = pool.draft(tokens + list(response[:generated]), limit)
            accepted = 0
            for token, truth in zip(drafted, response[generated:]):
                if token != truth:
                    break
                accepted += 1
            generated += accepted + 1


def ngram_state(config: DecodeConfig) -> PublicPool | None:
    """The n-gram method's cross-request state: TensorRT-LLM's public pool, or None
    (every other config keeps nothing across requests)."""
    if config.ngram_pool == "public" and engine_rules(config.engine).ngram_pool:
        return PublicPool(config)
    return None


class NgramProposer:
    """The n-gram drafts of `config` for one generation, under its engine's rules: the
    match rule (most recent or earliest occurrence, or TensorRT-LLM's pool, which keeps
    state between calls: call it once per round, in order), a draft cut before its
    first EOS token where the engine does that (transformers), under sampling with
    top_p < 1 a draft cut before the first token transformers' top-p filter masks on
    stand-in logits (which needs `vocab_size`, and the `device` that filter runs on),
    and a draft padded to `limit` with the last token where the engine does that (vLLM's
    V2 runner)."""

    def __init__(self, config: DecodeConfig, eos: Collection[int],
                 shared: PublicPool | None = None, vocab_size: int | None = None,
                 device: str = "cpu") -> None:
        self.config, self.eos = config, frozenset(eos)
        self.rules = engine_rules(config.engine)
        self.pool = (MatchPool(config.ngram_max, config.k,
                               shared.patterns if shared is not None else None)
                     if self.rules.ngram_pool else None)
        self.masked: frozenset[int] = frozenset()
        if self.rules.ngram_top_p_crop and not config.greedy and config.top_p < 1.0:
            if vocab_size is None:
                raise AutotuneError(f"{self.rules.label}'s sampled n-gram drafts with "
                                    f"top_p={config.top_p} need the vocabulary size")
            # transformers: the ids it refuses to draft (hf_stand_in.py); imported here,
            # so that only these configs load transformers' generation code.
            from autotune.methods.ngram.hf_stand_in import stand_in_masked
            self.masked = stand_in_masked(vocab_size, config.temperature, config.top_p,
                                          device)

    def __call__(self, tokens: list[int], limit: int) -> list[int]:
        if self.pool is not None:
            found = self.pool.draft(tokens, limit)
        else:
            found = lookup(tokens, self.config.ngram_min, self.config.ngram_max, limit,
                           earliest=self.rules.ngram_match == EARLIEST, masked=self.masked)
        if self.rules.ngram_stops_at_eos:
            for i, token in enumerate(found):
                if token in self.eos:
                    return found[:i]
        if self.rules.ngram_pads_drafts and tokens:
            found = found + [tokens[-1]] * (limit - len(found))
        return found


def ngram_proposal(tokens: list[int], config: DecodeConfig, limit: int,
                   eos: Collection[int], vocab_size: int | None = None) -> list[int]:
    """One n-gram draft after `tokens` by a fresh NgramProposer (stateless rules; a
    pool sees `tokens` for the first time)."""
    return NgramProposer(config, eos, vocab_size=vocab_size)(tokens, limit)


class NgramDrafter(Drafter):
    """The tokens `lookup` finds are the draft. Deterministic: q is one-hot, confidence 1
    (so a confidence exit rule never stops it)."""

    def __init__(self, config: DecodeConfig, vocab_size: int, eos: Collection[int],
                 shared: PublicPool | None = None, device: str = "cpu") -> None:
        self.proposer = NgramProposer(config, eos, shared, vocab_size, device)
        self.vocab_size = vocab_size
        self.sampling = not config.greedy          # greedy verification needs no q

    @classmethod
    def build(cls, context: DraftContext) -> "NgramDrafter":
        return cls(context.config, context.vocab_size, context.target.eos_token_ids,
                   context.shared, str(context.target.device))

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        found = self.proposer(seq[0].tolist(), limit)
        return Draft.fixed_tokens(seq, found, [1.0] * len(found), policy, self.vocab_size,
                                  self.sampling)
