"""Replay of Draft & Verify's layer skipping: the tables, and the cost of a skipping pass.

Each row's skipping pass attends to the *full target's* keys/values at earlier positions
and to its own at its position, as the decoder's first draft token of a round does (the
verified prefix is in the target's cache). Exact for the first draft token of a round;
later in-round tokens attend in the decoder to skip-path keys/values of the round's
earlier drafts, here to the full model's (approximate).

Drafting time: one skipping pass of the target per draft token (or tree level, scaled
by the tokens a level feeds): the one-token pass without the skipped sublayers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from autotune.decoding.config import DecodeConfig
from autotune.replay.draft_cost import PassDraftCost
from autotune.replay.reference import Reference
from autotune.replay.sources import TableSourceAdapter
from autotune.replay.tables import (
    Table,
    TableSource,
    reference_ids,
    shared_vocab,
    table_from_logits,
)

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.replay.sources import ReplaySource


class LayerSkipSource(TableSource):
    """Each row's skipping pass over the target's full keys/values of the prefix."""

    exact_depth = 1

    def __init__(self, target: "LoadedModel", draft: "LoadedModel | None") -> None:
        self.target, self.vocab = target, shared_vocab(target, draft)
        self._full: dict[str, Any] = {}        # prompt id -> the full pass's cache

    def key(self, config: DecodeConfig) -> tuple[Any, ...]:
        return ("layer_skip", tuple(config.attn_skip), tuple(config.mlp_skip))

    def _full_cache(self, ref: Reference) -> Any:
        cached = self._full.get(ref.prompt_id)
        if cached is None or cached[0] != ref.sequence:
            forward = self.target.forward
            ids = reference_ids(self.target, ref)
            cache = forward.new_cache(1, ids.shape[1])
            forward.forward(ids, cache, last_only=True)
            cached = (ref.sequence, cache)
            self._full[ref.prompt_id] = cached
        return cached[1]

    def table(self, config: DecodeConfig, ref: Reference, width: int) -> Table:
        return self.tables(config, [ref], width)[0]

    @torch.inference_mode()
    def tables(self, config: DecodeConfig, refs: list[Reference], width: int
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


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    return TableSourceAdapter(LayerSkipSource(target, draft))


class LayerSkipCost(PassDraftCost):
    """The target's one-token pass without the skipped sublayers, per draft token."""

    def pass_ms(self, tokens: int, exit_layer: int | None) -> float:
        config = self.config
        one = self.parts.target_layers.skip_pass(len(config.attn_skip), len(config.mlp_skip))
        return one * self.model.ratio(tokens)

    def run_share(self, exit_layer: int | None) -> float | None:
        """The target's pass less the sublayers the mask skips."""
        config, layers = self.config, self.parts.target_layers
        return layers.run_share(layers.layers - len(config.attn_skip),
                                layers.layers - len(config.mlp_skip))

    @staticmethod
    def calibration_config(target: "LoadedModel", draft: "LoadedModel | None"
                           ) -> DecodeConfig | None:
        if not target.forward.supports_layers:
            return None
        n = target.n_layers
        return DecodeConfig(method="layer_skip", k=4, attn_skip=tuple(range(n // 2, n - 1, 2)))
