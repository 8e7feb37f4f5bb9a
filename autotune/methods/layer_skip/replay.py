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

from autotune.common.memory import TrimEvery
from autotune.replay import kept
from autotune.schema.config import DecodeConfig
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


# A prompt's full-model keys/values (what each row's skipping pass attends to) are
# kept between configs while the kept ones fit in this: a screen replays hundreds of
# skip masks over the same prompts, and a prompt not kept costs each of them a full
# pass over the whole prompt, not only over its continuation's rows. The main job's 24
# screen prompts take 0.23 GB on the default model. Past it a prompt's are made for its
# group's pass and dropped: the held-out pool's 80 prompts held 1.0 GB (issue 51).
# One limit for every source of the process (`replay.kept`): the screen's Replayer
# and the pool's no longer keep one each (issue 59, item 6).
KEPT_CACHE_BYTES = 384 * 2**20
KEPT_KIND = "layer_skip.full"
# One skipping pass runs a group of prompts' rows: its logits are rows x vocabulary
# (80 prompts' took 0.5 GB at once) and it makes the caches not kept for them.
GROUP_ROWS = 256
GROUP_CACHE_BYTES = 128 * 2**20
# ... with at least this many rows: for a few rows MKL's GEMM takes another kernel,
# whose sums round differently (below 12 rows here), and a row's table must not depend
# on the group it ran in.
MIN_GROUP_ROWS = 16
# The passes' caches made and logits (with their log-probabilities) before freed pages
# go back: glibc keeps them split by the small tables kept (`TrimEvery`).
TRIM_EVERY_BYTES = 128 * 2**20


class LayerSkipSource(TableSource):
    """Each row's skipping pass over the target's full keys/values of the prefix."""

    exact_depth = 1

    def __init__(self, target: "LoadedModel", draft: "LoadedModel | None") -> None:
        self.target, self.vocab = target, shared_vocab(target, draft)
        self._full: dict[str, tuple[list[int], Any]] = {}   # prompt id -> (sequence, cache)
        self._kept_bytes = 0
        self._trim = TrimEvery(TRIM_EVERY_BYTES)

    def key(self, config: DecodeConfig) -> tuple[Any, ...]:
        return ("layer_skip", tuple(config.attn_skip), tuple(config.mlp_skip))

    def _full_cache(self, ref: Reference) -> Any:
        """`ref`'s full-model keys/values: kept ones, else made now (and kept while they
        fit in KEPT_CACHE_BYTES)."""
        cached = self._full.pop(ref.prompt_id, None)
        if cached is not None:
            if cached[0] == ref.sequence:
                self._full[ref.prompt_id] = cached
                kept.touch(KEPT_KIND, self, ref.prompt_id)
                return cached[1]
            self._kept_bytes -= cached[1].nbytes()
            kept.discard(KEPT_KIND, self, ref.prompt_id)
        forward = self.target.forward
        ids = reference_ids(self.target, ref)
        cache = forward.new_cache(1, ids.shape[1])
        forward.forward(ids, cache, last_only=True)
        if kept.admit(KEPT_KIND, self, ref.prompt_id, cache.nbytes(), KEPT_CACHE_BYTES):
            self._full[ref.prompt_id] = (ref.sequence, cache)
            self._kept_bytes += cache.nbytes()
        return cache

    def forget_kept(self, key: Any) -> None:
        """The process's limit dropped prompt `key`'s keys/values (`replay.kept`)."""
        cached = self._full.pop(key, None)
        if cached is not None:
            self._kept_bytes -= cached[1].nbytes()

    def _made_bytes(self, ref: Reference) -> int:
        """Bytes `_full_cache` makes for `ref` (0 where they are kept)."""
        cached = self._full.get(ref.prompt_id)
        if cached is not None and cached[0] == ref.sequence:
            return 0
        return self.target.forward.cache_bytes(1, len(ref.sequence))

    def _groups(self, refs: list[Reference]) -> list[list[Reference]]:
        """`refs` in order, in groups of at most GROUP_ROWS rows and GROUP_CACHE_BYTES of
        caches made, each of at least MIN_GROUP_ROWS rows (a short last group joins the
        one before)."""
        groups: list[list[Reference]] = [[]]
        rows = made = 0
        for ref in refs:
            ref_rows, ref_made = len(ref.tokens) + 1, self._made_bytes(ref)
            if (rows >= MIN_GROUP_ROWS and (rows + ref_rows > GROUP_ROWS
                                            or made + ref_made > GROUP_CACHE_BYTES)):
                groups.append([])
                rows = made = 0
            groups[-1].append(ref)
            rows, made = rows + ref_rows, made + ref_made
        if len(groups) > 1 and rows < MIN_GROUP_ROWS:
            groups[-2] += groups.pop()
        return groups

    def table(self, config: DecodeConfig, ref: Reference, width: int) -> Table:
        return self.tables(config, [ref], width)[0]

    def tables(self, config: DecodeConfig, refs: list[Reference], width: int
               ) -> list[Table]:
        """The prompts' tables, a group of them per skipping pass (`_groups`): memory is
        one group's, whatever the prompts."""
        out: list[Table] = []
        vocab = self.target.forward.vocab_size
        for group in self._groups(refs):
            made = sum(self._made_bytes(ref) for ref in group)
            out += self._group_tables(config, group, width)
            rows = sum(len(ref.tokens) + 1 for ref in group)
            self._trim.made(made + 2 * rows * vocab * 4)     # caches, logits, log-softmax
        return out

    @torch.inference_mode()
    def _group_tables(self, config: DecodeConfig, refs: list[Reference], width: int
                      ) -> list[Table]:
        """All `refs`' rows in one skipping pass: the projections and MLPs of every
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
