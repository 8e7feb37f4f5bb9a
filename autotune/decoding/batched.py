"""The batched decoder: B prompts decode together, as a server's batch does.

Each round every active row drafts (its own drafter, exit policy and budget, exactly as
the single-row decoder's chain round), then ONE target pass verifies all rows: the
input is [B, 1 + K] with K the longest draft of the round (shorter drafts padded; the
padding costs compute, as it does in an engine that pads, and is never accepted), each
row written at its own cache position with its own causal mask (`LlamaForward.
forward_rows`). Each row keeps its own accepted prefix: row caches are ragged, so their
lengths live per row. A row that finishes (EOS or budget) leaves the batch: the cache
rows of those still running are moved to the front, so the next verify pass runs on
the active rows only, as an engine drops a finished request.

Prefill is row by row (prompts differ in length; no padding), so each row's prefill is
the single-row decoder's. The AR baseline at the same B is this loop with no drafter:
every round is one batched target step.

Drafting runs row by row with batch-1 passes: an n-gram lookup is per row in every
engine anyway; a model drafter (draft_model, layer_skip, sorted_exit) therefore pays B
small draft passes where an engine would batch them, which overstates drafting's cost
at large B (the report and notes say so). Draft trees are refused (a clear error): one
tree mask per row in one pass is not built yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import (
    MAX_DRAFT_TOKENS,
    Generation,
    RoundTrace,
    SpeculativeDecoder,
    _through_first,
    chain_limit,
)
from autotune.decoding.drafters.base import Draft, Drafter, TokenChooser
from autotune.decoding.numerics import NumericsRecorder, records
from autotune.decoding.policies import ExitPolicy, make_policy
from autotune.models.llama import KVCache, LlamaForward
from autotune.models.loading import LoadedModel


@dataclass
class BatchRound:
    """One batched round: rows in the verify pass, its width, and the clock split."""

    rows: int                    # active rows verified
    width: int                   # tokens per row in the verify pass (1 + longest draft)
    drafted: int                 # draft tokens proposed, over all rows
    emitted: int                 # tokens appended, over all rows
    draft_s: float
    verify_s: float
    other_s: float


@dataclass
class BatchGeneration:
    """A batch's outputs and timings.

    `rows`: one Generation per prompt, in input order (tokens, per-row round traces
    without times; `decode_s` is the time from the batch's decode start until that row
    finished). `prefill_s`: all rows' prefills; `decode_s`: the batch's decode phase,
    which every row's decode tokens share (throughput = decoded / decode_s).
    """

    rows: list[Generation]
    prefill_s: float
    decode_s: float
    rounds: list[BatchRound] = field(default_factory=list)

    @property
    def decoded(self) -> int:
        """Decode-phase tokens over all rows (each row's prefill token excluded)."""
        return sum(g.decoded for g in self.rows)


@dataclass
class _Row:
    """One prompt's moving parts in the batch."""

    index: int                   # position in the caller's prompt list
    prompt_len: int
    cache: KVCache               # a view of this row's slot in the batch cache
    drafter: Drafter
    policy: ExitPolicy
    buffer: torch.Tensor         # [1, max_len] the sequence so far
    length: int
    budget_left: int
    generated: list[int] = field(default_factory=list)
    rounds: list[RoundTrace] = field(default_factory=list)
    finished_at: float = 0.0
    # Greedy low precision: the rows that chose each token (decoding/numerics.py).
    numerics: NumericsRecorder | None = None

    @property
    def seq(self) -> torch.Tensor:
        return self.buffer[:, : self.length]


def cache_span(longest_prompt: int, max_new_tokens: int) -> int:
    """Positions each row of `BatchedDecoder.generate`'s batch cache holds: the longest
    prompt, the new tokens, and room for a padded verify pass, which writes up to the
    longest draft past any row's prefix."""
    return longest_prompt + max_new_tokens + MAX_DRAFT_TOKENS + 1


class BatchedDecoder:
    """Generates for B prompts at once with one DecodeConfig (see the module doc)."""

    def __init__(self, target: LoadedModel, config: DecodeConfig,
                 draft: LoadedModel | None = None) -> None:
        # The single-row decoder checks the config, the models and the method, and
        # lends its drafter factory and verification.
        self.single = SpeculativeDecoder(target, config, draft)
        if config.is_tree:
            raise AutotuneError("batched decoding drafts chains only; a draft tree "
                                "(tree_width > 0) runs at batch size 1")
        if self.single.spec.own_trees:
            raise AutotuneError(f"batched decoding drafts chains only; method={config.method} "
                                "drafts its own trees and runs at batch size 1")
        if self.single.spec.reads_target_features:
            raise AutotuneError(f"batched decoding does not run method={config.method} yet "
                                "(its head reads per-row target features); it runs at "
                                "batch size 1")
        if not isinstance(target.forward, LlamaForward):
            raise AutotuneError(
                f"batched decoding needs the compact Llama-family forward; {target.name} "
                f"({target.hf_model.config.model_type}) runs on HF's own forward")
        self.target, self.config = target, config
        self.forward: LlamaForward = target.forward

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_new_tokens: int,
                 clock: Callable[[], float],
                 generator: torch.Generator | None = None,
                 on_features: Callable[[int, torch.Tensor], None] | None = None,
                 categories: list[str] | None = None) -> BatchGeneration:
        """Generate up to `max_new_tokens` after each prompt, each row stopping after
        its EOS token; rows are independent (each equals its own single-row run).

        `on_features(row, features [T, H])`: the target's features of the positions
        each pass kept for that row, in order (the prefill: every prompt position; a
        round: the pending token and the accepted drafts): training data for free.
        `categories`: each prompt's workload category (`drafter=routed` drafts each row
        with its own category's member of a per-category folder)."""
        if max_new_tokens < 1:
            raise AutotuneError("max_new_tokens must be at least 1")
        if not prompts or any(not p for p in prompts):
            raise AutotuneError("batched decoding needs at least one non-empty prompt")
        max_len = cache_span(max(len(p) for p in prompts), max_new_tokens)
        batch_cache = self.forward.new_cache(len(prompts), max_len)
        rows = self._rows(prompts, max_new_tokens, max_len, batch_cache, generator, categories)

        start_time = clock()
        for row in rows:
            self._prefill(row, generator, on_features)
        decode_start = clock()
        active = [row for row in rows if not self._done(row)]
        for row in rows:
            row.finished_at = decode_start
            if row not in active:
                row.drafter.finish(row.seq)
        if len(active) < len(rows):
            self._compact(batch_cache, rows, active)
        batch_rounds: list[BatchRound] = []
        round_start = decode_start
        while active:
            still, batch_round, round_end = self._round(active, batch_cache, clock,
                                                        round_start, generator, on_features)
            batch_rounds.append(batch_round)
            active, round_start = still, round_end
        end_time = clock()
        per_row = [Generation(prompt_len=row.prompt_len, tokens=row.generated,
                              prefill_s=0.0, decode_s=row.finished_at - decode_start,
                              rounds=row.rounds, cache_bytes=0, timed_parts=False,
                              numerics=self.single._checked(row.numerics,
                                                            row.buffer[0, :row.prompt_len].tolist(),
                                                            row.generated))
                   for row in rows]
        return BatchGeneration(per_row, prefill_s=decode_start - start_time,
                               decode_s=end_time - decode_start, rounds=batch_rounds)

    def _rows(self, prompts: list[list[int]], max_new_tokens: int, max_len: int,
              batch_cache: KVCache, generator: torch.Generator | None,
              categories: list[str] | None) -> list[_Row]:
        """One row per prompt: its view of the batch cache, its buffer and drafter."""
        single, config, device = self.single, self.config, self.target.device
        choose = TokenChooser(config.temperature, config.top_p, single.vocab_size, generator,
                              greedy_drafts=single.greedy_drafts,
                              drafted_confidence=single.rules.drafted_token_confidence,
                              draft_top_p=not single.rules.sampled_drafts_skip_top_p)
        rows: list[_Row] = []
        for index, prompt in enumerate(prompts):
            cache = batch_cache.rows(index, index + 1)
            buffer = torch.zeros((1, max_len), dtype=torch.long, device=device)
            buffer[0, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
            draft = single.draft_for(categories[index] if categories else None)
            rows.append(_Row(index, len(prompt), cache,
                             single._drafter(cache, max_len, choose, draft),
                             make_policy(config), buffer, len(prompt), max_new_tokens,
                             numerics=(NumericsRecorder(self.target.dtype)
                                       if records(self.target.dtype, config.greedy)
                                       else None)))
        return rows

    def _prefill(self, row: _Row, generator: torch.Generator | None,
                 on_features: Callable[[int, torch.Tensor], None] | None) -> None:
        """The target's pass over one row's prompt and its first token."""
        if on_features is not None:
            logits, features = self.forward.forward_features(row.seq, row.cache,
                                                             last_only=True)
            on_features(row.index, features[0])
        else:
            logits = self.forward.forward(row.seq, row.cache, last_only=True)
        row.drafter.prefill(row.seq)
        first = self._append(row, [int(self.single._target_token(logits[:, -1],
                                                                  generator)[0])])
        if row.numerics is not None:
            row.numerics.add(logits[0, -1:], first)

    def _round(self, active: list[_Row], batch_cache: KVCache, clock: Callable[[], float],
               round_start: float, generator: torch.Generator | None,
               on_features: Callable[[int, torch.Tensor], None] | None
               ) -> tuple[list[_Row], BatchRound, float]:
        """One round over the active rows: each drafts, one padded verify pass over all,
        each accepts; rows that finished are compacted out. Returns the rows still
        active, the round's record and when it ended."""
        drafts = [self._propose(row) for row in active]
        draft_done = clock()
        width = 1 + max(d.k for d in drafts)
        ids = torch.zeros((len(active), width), dtype=torch.long, device=self.target.device)
        for i, (row, d) in enumerate(zip(active, drafts)):
            ids[i, 0] = row.buffer[0, row.length - 1]
            ids[i, 1:1 + d.k] = d.tokens[0]
        starts = [row.cache.length for row in active]
        verify_cache = batch_cache.rows(0, len(active))
        if on_features is not None:
            logits, features = self.forward.forward_rows_features(ids, verify_cache, starts)
        else:
            logits = self.forward.forward_rows(ids, verify_cache, starts)
        forward_done = clock()
        emitted = 0
        for i, (row, d) in enumerate(zip(active, drafts)):
            kept = self._accept(row, d, logits[i:i + 1, : d.k + 1], starts[i], generator)
            emitted += kept
            if on_features is not None:
                on_features(row.index, features[i, :kept])
        still = [row for row in active if not self._done(row)]
        for row in active:
            if row not in still:          # its outputs filed where a method keeps them
                row.drafter.finish(row.seq)
        round_end = clock()
        for row in active:
            if row not in still:
                row.finished_at = round_end
        if len(still) < len(active):
            self._compact(batch_cache, active, still)
        return still, BatchRound(
            rows=len(active), width=width, drafted=sum(d.k for d in drafts),
            emitted=emitted, draft_s=draft_done - round_start,
            verify_s=forward_done - draft_done, other_s=round_end - forward_done), round_end

    def _done(self, row: _Row) -> bool:
        return row.budget_left <= 0 or row.generated[-1] in self.single.eos

    def _append(self, row: _Row, tokens: list[int]) -> list[int]:
        """Append up to the budget and the first EOS; returns what was appended."""
        tokens = _through_first(tokens[: row.budget_left], self.single.eos)
        row.buffer[0, row.length:row.length + len(tokens)] = torch.tensor(tokens)
        row.length += len(tokens)
        row.budget_left -= len(tokens)
        row.generated.extend(tokens)
        return tokens

    def _propose(self, row: _Row) -> Draft:
        limit = chain_limit(row.policy.limit(), row.budget_left, self.config, self.single.rules)
        return row.drafter.propose(row.seq, limit, row.policy) if limit > 0 else Draft.empty(row.seq)

    def _accept(self, row: _Row, draft: Draft, logits: torch.Tensor, start: int,
                generator: torch.Generator | None) -> int:
        """Verify row's draft against its logits [1, k+1, V], keep the accepted prefix
        (its cache entries) and the target's token; returns the tokens appended."""
        n_accepted, next_token = self.single._verify(draft, logits, generator)
        row.cache.length = start + 1 + n_accepted
        if draft.k:
            row.drafter.observe(n_accepted)
        row.policy.update(draft.k, n_accepted, draft.confidences)
        new = self._append(row, draft.tokens[0, :n_accepted].tolist() + [next_token])
        if row.numerics is not None:
            # Row j of this row's pass chose the slot after its j-th kept token.
            row.numerics.add(logits[0, :len(new)], new)
        row.rounds.append(RoundTrace(
            drafted=draft.k, accepted=min(n_accepted, len(new)), emitted=len(new),
            confidences=draft.confidences, draft_s=0.0, verify_s=0.0, verified=draft.k + 1,
            exit_layers=draft.exit_layers, draft_depth=draft.k))
        return len(new)

    @staticmethod
    def _compact(batch_cache: KVCache, active: list[_Row], still: list[_Row]) -> None:
        """Move the cache rows of `still` to the front (in order) and re-point each
        row's view (and so its drafter's) at its new slot."""
        slots = [active.index(row) for row in still]
        # One row at a time, not `k[:, :n] = k[:, keep]`: that gathers every kept row into
        # a new tensor first, half the batch cache again at its peak (issue 51). Slots
        # rise and slot >= its new place, so a row never overwrites one still to move.
        for place, slot in enumerate(slots):
            if slot != place:
                batch_cache.k[:, place] = batch_cache.k[:, slot]
                batch_cache.v[:, place] = batch_cache.v[:, slot]
        for slot, row in enumerate(still):
            view = batch_cache.rows(slot, slot + 1)
            row.cache.k, row.cache.v = view.k, view.v
