"""Teacher-forced draft tables: what a method's draft predicts at every position of a
reference continuation, from one pass over prompt + continuation.

A `Table` row r is the draft's distribution for the token `tokens[r]` of the reference,
i.e. at sequence position P-1+r: rows 0..C (C = continuation length; row C predicts
past the end). Each row keeps its W most likely ids with their log-probabilities, the
top-1 probability (the confidence an exit policy reads) and, for early-exit drafters,
the exit the row took. Under greedy verification the k-th draft token of a round that
starts after g generated tokens is row g+k-1 as long as the round's earlier drafts were
accepted (they equal the reference), which is what makes replay possible.

How each method's pass relates to its drafter in the decoder (the registry names the
source: `MethodSpec.replay`):
- `draft_model`: the draft's own causal pass. Exact for every accepted draft token: the
  draft's cache holds its own keys/values of exactly these tokens.
- `layer_skip`: each row's skipping pass attends to the *full target's* keys/values at
  earlier positions and to its own at its position, as the decoder's first draft token
  of a round does (the verified prefix is in the target's cache). Exact for the first
  draft token of a round; later in-round tokens attend in the decoder to skip-path
  keys/values of the round's earlier drafts, here to the full model's (approximate).
- `sorted_exit`: the stack's own causal pass read at each exit (the first e layers of a
  full pass are what a draft token exiting at e computes when the prefix is verified).
  Exact for the first draft token of a round; a later in-round token in the decoder sees
  CALM-propagated keys/values of earlier drafts that exited early (approximate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from autotune.replay.reference import Reference

if TYPE_CHECKING:
    from autotune.decoding.config import DecodeConfig
    from autotune.models.loading import LoadedModel

DEFAULT_WIDTH = 10


@dataclass
class Table:
    """ids: [R, W] int64, most likely first; logp: [R, W] float32; conf: [R] top-1
    probabilities; exit_layer: [R] the exit each row took (early-exit drafters), else None.
    R = len(reference tokens) + 1."""

    ids: torch.Tensor
    logp: torch.Tensor
    conf: list[float]
    exit_layer: list[int] | None = None

    @property
    def rows(self) -> int:
        return self.ids.shape[0]

    @property
    def width(self) -> int:
        return self.ids.shape[1]


def table_width(config: "DecodeConfig") -> int:
    """Ids a table row keeps for `config`: DEFAULT_WIDTH, or more for a static tree that
    lists deeper ranks (one past its deepest, so the reference token's rank is known
    to be unlisted) or a wider dynamic tree."""
    from autotune.decoding.shape import STATIC

    shape = config.shape
    if shape.kind == STATIC:
        return max(DEFAULT_WIDTH, max(r for p in shape.choices for r in p) + 2)
    return max(DEFAULT_WIDTH, shape.width)


def table_from_logits(logits: torch.Tensor, vocab: int, width: int) -> Table:
    """A Table from draft logits [R, V] over the shared vocabulary."""
    logp = torch.log_softmax(logits[:, :vocab].float(), dim=-1)
    values, indices = logp.topk(min(width, logp.shape[-1]), dim=-1)
    return Table(indices, values, values[:, 0].exp().tolist())


class TableSource:
    """Makes one method's Table per reference; `key` says which config knobs decide it
    (tables are shared by every config with the same key)."""

    exact_depth: int | None = None      # in-round draft tokens that are exact (None: all)

    def key(self, config: "DecodeConfig") -> tuple[Any, ...]:
        raise NotImplementedError

    def table(self, config: "DecodeConfig", ref: Reference, width: int) -> Table:
        raise NotImplementedError

    def tables(self, config: "DecodeConfig", refs: list[Reference], width: int
               ) -> list[Table]:
        """Several prompts' tables (a source may batch them)."""
        return [self.table(config, ref, width) for ref in refs]


def _ids(model: "LoadedModel", ref: Reference) -> torch.Tensor:
    return torch.tensor([ref.sequence], dtype=torch.long, device=model.device)


def _vocab(target: "LoadedModel", draft: "LoadedModel | None") -> int:
    return target.forward.vocab_size if draft is None else min(
        target.forward.vocab_size, draft.forward.vocab_size)


class DraftModelSource(TableSource):
    """The draft model's causal pass over prompt + continuation."""

    def __init__(self, target: "LoadedModel", draft: "LoadedModel") -> None:
        self.draft, self.vocab = draft, _vocab(target, draft)

    def key(self, config: "DecodeConfig") -> tuple[Any, ...]:
        return ("draft_model",)

    @torch.inference_mode()
    def table(self, config: "DecodeConfig", ref: Reference, width: int) -> Table:
        forward = self.draft.forward
        ids = _ids(self.draft, ref)
        logits = forward.forward(ids, forward.new_cache(1, ids.shape[1]))[0]
        return table_from_logits(logits[len(ref.prompt) - 1:], self.vocab, width)


class LayerSkipSource(TableSource):
    """Each row's skipping pass over the target's full keys/values of the prefix."""

    exact_depth = 1

    def __init__(self, target: "LoadedModel", draft: "LoadedModel | None") -> None:
        self.target, self.vocab = target, _vocab(target, draft)
        self._full: dict[str, Any] = {}        # prompt id -> the full pass's cache

    def key(self, config: "DecodeConfig") -> tuple[Any, ...]:
        return ("layer_skip", tuple(config.attn_skip), tuple(config.mlp_skip))

    def _full_cache(self, ref: Reference) -> Any:
        cached = self._full.get(ref.prompt_id)
        if cached is None or cached[0] != ref.sequence:
            forward = self.target.forward
            ids = _ids(self.target, ref)
            cache = forward.new_cache(1, ids.shape[1])
            forward.forward(ids, cache, last_only=True)
            cached = (ref.sequence, cache)
            self._full[ref.prompt_id] = cached
        return cached[1]

    def table(self, config: "DecodeConfig", ref: Reference, width: int) -> Table:
        return self.tables(config, [ref], width)[0]

    @torch.inference_mode()
    def tables(self, config: "DecodeConfig", refs: list[Reference], width: int
               ) -> list[Table]:
        """All prompts' rows in one skipping pass: the projections and MLPs of every
        prompt's rows run as one batch (a small model's pass costs its weights' reading,
        not its rows); only attention is per prompt (its own keys and values)."""
        from autotune.models.llama import Step

        forward = self.target.forward
        device = self.target.device
        spans: list[tuple[int, int, Any, torch.Tensor]] = []      # (start row, rows, cache, mask)
        ids: list[int] = []
        positions: list[int] = []
        for ref in refs:
            first, n = len(ref.prompt) - 1, len(ref.sequence)
            rows = torch.arange(first, n, device=device)
            # Row i (position first+i) sees the full model's keys at positions before
            # its own, and its own key: the prefix part is masked strictly causally.
            mask = torch.arange(n, device=device)[None, :] < rows[:, None]
            spans.append((len(ids), n - first, self._full_cache(ref), mask))
            ids += ref.sequence[first:]
            positions += range(first, n)
        index_tensor = torch.tensor(positions, device=device)
        step = Step(hidden=forward.embed[torch.tensor([ids], device=device)], cache=None,
                    start=0, cos=forward.cos[index_tensor], sin=forward.sin[index_tensor],
                    mask=None, causal=False)
        attn_skip, mlp_skip = frozenset(config.attn_skip), frozenset(config.mlp_skip)
        for index in range(forward.n_layers):
            if index not in attn_skip:
                _own_attention(forward, index, step, spans)
            if index not in mlp_skip:
                forward._mlp(index, step)
        logits = forward.logits(step)[0]
        return [table_from_logits(logits[start:start + rows], self.vocab, width)
                for start, rows, _, _ in spans]


def _own_attention(forward: Any, index: int, step: Any,
                   spans: list[tuple[int, int, Any, torch.Tensor]]) -> None:
    """One attention sublayer for rows [1, T] of several prompts. `spans`: per prompt,
    (first row, rows, its full cache, mask [rows, N] of the prefix positions each row
    sees); a row attends to the full cache's keys/values there and to its own."""
    layer = forward.layers[index]
    h = step.hidden
    q, k, v = forward._qkv(layer, step, forward._rms(h, layer.input_norm))   # [1, H|Hkv, T, D]
    group = forward.n_heads // forward.n_kv_heads
    if group > 1:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = forward.scaling
    outs = []
    for start, rows, full, mask in spans:
        n = mask.shape[1]
        keys, values = full.k[index, :, :, :n], full.v[index, :, :, :n]      # [1, Hkv, N, D]
        if group > 1:
            keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        qs, ks, vs = (x[:, :, start:start + rows] for x in (q, k, v))
        prefix = (qs @ keys.transpose(-1, -2)) * scale                         # [1, H, r, N]
        prefix = prefix.masked_fill(~mask, float("-inf"))
        own = (qs * ks).sum(-1, keepdim=True) * scale                          # [1, H, r, 1]
        weights = torch.softmax(torch.cat((prefix, own), dim=-1).float(), dim=-1).to(q.dtype)
        outs.append(weights[..., :n] @ values + weights[..., n:] * vs)          # [1, H, r, D]
    out = torch.cat(outs, dim=2).transpose(1, 2).reshape(h.shape[0], h.shape[1], -1)
    step.hidden = h + forward._linear(out, layer.o_weight, layer.o_bias)


class SortedExitSource(TableSource):
    """The stack's causal pass read at every exit; a config's rule picks per row."""

    exact_depth = 1

    def __init__(self, target: "LoadedModel", draft: "LoadedModel | None") -> None:
        from autotune.models.loading import draft_model
        from autotune.models.trained import exit_adapters

        # A draft model's stack, else the target's (a trained `exits` drafter runs on the
        # target's own stack and reads each exit through its adapter, as the drafter does).
        model = draft_model(draft)
        self.stack = model if model is not None else target
        self.adapters = exit_adapters(draft)
        self.vocab = _vocab(target, model)
        self._hidden: dict[str, Any] = {}      # prompt id -> (sequence, {layer: [R, hidden]})
        self._layer_tables: dict[tuple[str, int, int], Table] = {}

    def key(self, config: "DecodeConfig") -> tuple[Any, ...]:
        return ("sorted_exit", tuple(config.exits), tuple(config.exit_thresholds()))

    def _hidden_states(self, ref: Reference) -> dict[int, torch.Tensor]:
        cached = self._hidden.get(ref.prompt_id)
        if cached is None or cached[0] != ref.sequence:
            forward = self.stack.forward
            ids = _ids(self.stack, ref)
            step = forward.begin(ids, forward.new_cache(1, ids.shape[1]))
            first = len(ref.prompt) - 1
            states = {}
            for layer in range(forward.n_layers):
                forward.run_layers(step, layer, layer + 1)
                states[layer + 1] = step.hidden[:, first:].clone()
            cached = (ref.sequence, states)
            self._hidden[ref.prompt_id] = cached
            self._layer_tables = {k: v for k, v in self._layer_tables.items()
                                  if k[0] != ref.prompt_id}
        return cached[1]

    def _layer_table(self, ref: Reference, layer: int, width: int) -> Table:
        key = (ref.prompt_id, layer, width)
        if key not in self._layer_tables:
            hidden = self._hidden_states(ref)[layer]
            if self.adapters is not None:
                hidden = self.adapters.adapt(layer, hidden)
            forward = self.stack.forward
            logits = forward._linear(forward._rms(hidden, forward.final_norm),
                                     forward.lm_head, forward.lm_head_bias)[0]
            self._layer_tables[key] = table_from_logits(logits, self.vocab, width)
        return self._layer_tables[key]

    @torch.inference_mode()
    def table(self, config: "DecodeConfig", ref: Reference, width: int) -> Table:
        exits, thresholds = config.exits, config.exit_thresholds()
        tables = [self._layer_table(ref, e, width) for e in exits]
        rows = tables[0].rows
        pick = []
        for row in range(rows):
            chosen = len(exits) - 1
            for i, threshold in enumerate(thresholds[:-1]):
                if tables[i].conf[row] >= threshold:
                    chosen = i
                    break
            pick.append(chosen)
        index = torch.tensor(pick)
        ids = torch.stack([t.ids for t in tables])[index, torch.arange(rows)]
        logp = torch.stack([t.logp for t in tables])[index, torch.arange(rows)]
        return Table(ids, logp, [tables[c].conf[r] for r, c in enumerate(pick)],
                     [exits[c] for c in pick])
