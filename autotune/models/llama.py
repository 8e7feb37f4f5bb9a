"""A compact Llama-family forward pass over Hugging Face weights.

The speculative decoder owns this forward (docs/architecture.md) because it needs what a
stock `model(...)` call does not give cheaply: a preallocated KV cache that is cut back
by resetting one integer, per-sublayer skipping (Draft & Verify), leaving at any layer
(early exits, S2D), verifying many tokens in one pass and an explicit attention mask for
the new tokens (draft trees). It reads the weights of a loaded `transformers` model in
place; the q/k/v and gate/up projections are fused into one matrix each, and the HF
modules' parameters are re-pointed at views of the fused storage, so no weight is held
twice and the HF model keeps working unchanged (tests compare both).

Supported `model_type`s: llama, mistral, qwen2, qwen3 (SmolLM, TinyLlama, Vicuna are
llama). Tensor shapes: B batch, T new tokens, L cache positions, H query heads, Hkv
key/value heads, D head size, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection

import torch
import torch.nn.functional as F
from torch import nn

from autotune.common.errors import AutotuneError

SUPPORTED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


class KVCache:
    """Static per-layer key/value storage for one model.

    `k`, `v`: [layers, B, Hkv, max_len, D]. Positions `[0, length)` hold the keys and
    values of the tokens the cache vouches for; anything beyond is scratch. Cutting the
    cache back after a rejection is `crop(n)`: nothing is copied or freed.
    """

    def __init__(self, n_layers: int, batch: int, n_kv_heads: int, max_len: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        shape = (n_layers, batch, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    def crop(self, length: int) -> None:
        """Forget every position from `length` on (a rejected draft's keys and values)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of length {self.length} to {length}")
        self.length = length

    def nbytes(self) -> int:
        return self.k.element_size() * self.k.nelement() * 2

    def rows(self, first: int, stop: int) -> "KVCache":
        """A cache over rows [first, stop) that shares this one's storage (views, no
        copy), with its own `length`: the batched decoder gives each row one, and its
        verify pass one over every active row."""
        view = KVCache.__new__(KVCache)
        view.k, view.v = self.k[:, first:stop], self.v[:, first:stop]
        view.length = 0
        return view


@dataclass
class _Layer:
    """One decoder layer's weights, as plain tensors (no module-call overhead)."""

    input_norm: torch.Tensor | None   # None: no norm before attention (EAGLE's layer 0)
    qkv_weight: torch.Tensor          # [(H + 2*Hkv)*D, hidden]
    qkv_bias: torch.Tensor | None
    o_weight: torch.Tensor
    o_bias: torch.Tensor | None
    q_norm: torch.Tensor | None       # Qwen3 per-head norms, [D]
    k_norm: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up_weight: torch.Tensor      # [2*intermediate, hidden]
    gate_up_bias: torch.Tensor | None
    down_weight: torch.Tensor
    down_bias: torch.Tensor | None


@dataclass
class Step:
    """The state of one forward pass as it moves through the layers.

    `hidden`: [B, T, hidden]. `start`: the cache position of the first new token.
    `cos`, `sin`: [T, D] rotary tables for the new tokens. `mask`: [T, start+T] bool
    (True = may attend) or None when one token attends to the whole prefix, or when a
    fresh cache's prefill is plainly causal (`causal`).

    Ragged rows (`begin_rows`): `positions` [B, T] are each row's cache positions for
    its new tokens (rows start at different lengths); `start` is then 0, `end` the
    columns attention reads, `cos`/`sin` [B, 1, T, D] and `mask` [B, 1, T, end].
    """

    hidden: torch.Tensor
    cache: KVCache
    start: int
    cos: torch.Tensor
    sin: torch.Tensor
    mask: torch.Tensor | None
    causal: bool
    positions: torch.Tensor | None = None
    end: int = 0
    # `mask` as an additive bias over grouped query rows (see `_grouped_bias`), made by
    # the first layer that needs it and shared by the rest of the pass.
    grouped_bias: torch.Tensor | None = None


def _fuse(linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate linears along the output dim; re-point their parameters at views."""
    weight = torch.cat([lin.weight.data for lin in linears], dim=0)
    has_bias = [lin.bias is not None for lin in linears]
    bias = torch.cat([lin.bias.data for lin in linears], dim=0) if all(has_bias) else None
    if any(has_bias) and bias is None:
        raise ValueError("mixed biases in fused projections")
    offset = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight.data = weight[offset:offset + rows]
        if bias is not None:
            lin.bias.data = bias[offset:offset + rows]
        offset += rows
    return weight, bias


def _bias(linear: nn.Linear) -> torch.Tensor | None:
    return None if linear.bias is None else linear.bias.data


def _linear_cpu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] @ weight[out, in].T on CPU, computed as weight @ X^T with >= 2 columns.

    Why: for a single row, `F.linear` dispatches to MKL's matrix-vector kernel, which on
    this class of machine runs on one thread; and for 2..8 rows its GEMM path is slower
    still. `weight @ X^T` with at least two columns takes a GEMM path that uses every
    core: about 2x faster per decode step and 2-3x per short verify pass on the 2-core
    development machine (bench/linear_kernels.py prints the figures). A single row is
    duplicated to make two.
    """
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    if n == 1:
        rows = torch.cat((rows, rows))
    out = torch.mm(weight, rows.t()).t()[:n]
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaForward:
    """The decoder's own forward pass over a loaded HF Llama-family causal LM."""

    supports_layers = True

    def __init__(self, hf_model: nn.Module) -> None:
        config = hf_model.config
        if config.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model_type {config.model_type!r} is not Llama-family")
        base = hf_model.model
        self.config = config
        self.n_layers: int = config.num_hidden_layers
        self.n_heads: int = config.num_attention_heads
        self.n_kv_heads: int = config.num_key_value_heads
        self.head_dim: int = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        self.eps: float = config.rms_norm_eps
        self.vocab_size: int = hf_model.lm_head.weight.shape[0]
        self.embed = base.embed_tokens.weight.data
        self.final_norm = base.norm.weight.data
        self.lm_head = hf_model.lm_head.weight.data
        self.lm_head_bias = _bias(hf_model.lm_head)
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        self._linear = _linear_cpu if self.device.type == "cpu" else F.linear
        # Fewer, larger kernels on CUDA, where a decode step is bound by kernel launches
        # even inside a CUDA graph (~2.5 us each; a layer was ~40 of them): a fused RMS
        # norm and grouped-query attention over a shared additive mask. The CPU keeps
        # HF's exact arithmetic (its tests compare token for token); tests switch these
        # on over the CPU to check the CUDA arithmetic against it.
        self.fused_kernels: bool = self.device.type == "cuda"
        first_attn = base.layers[0].self_attn
        self.scaling: float = getattr(first_attn, "scaling", self.head_dim ** -0.5)
        self.sliding_window: int | None = getattr(config, "sliding_window", None) \
            if getattr(config, "use_sliding_window", True) else None
        self.layers: list[_Layer] = []
        for layer in base.layers:
            attn, mlp = layer.self_attn, layer.mlp
            qkv_w, qkv_b = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])
            gu_w, gu_b = _fuse([mlp.gate_proj, mlp.up_proj])
            self.layers.append(_Layer(
                input_norm=layer.input_layernorm.weight.data,
                qkv_weight=qkv_w, qkv_bias=qkv_b,
                o_weight=attn.o_proj.weight.data, o_bias=_bias(attn.o_proj),
                q_norm=attn.q_norm.weight.data if hasattr(attn, "q_norm") else None,
                k_norm=attn.k_norm.weight.data if hasattr(attn, "k_norm") else None,
                post_norm=layer.post_attention_layernorm.weight.data,
                gate_up_weight=gu_w, gate_up_bias=gu_b,
                down_weight=mlp.down_proj.weight.data, down_bias=_bias(mlp.down_proj),
            ))
        # Rotary tables from HF's own rotary module, so every rope type it knows
        # (llama3, yarn, linear...) carries over; computed once for all positions.
        rotary = base.rotary_emb
        max_pos = int(getattr(config, "max_position_embeddings", 8192))
        positions = torch.arange(max_pos, device=self.device, dtype=torch.float32)
        freqs = positions[:, None] * rotary.inv_freq.to(self.device, torch.float32)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = float(getattr(rotary, "attention_scaling", 1.0))
        self.cos = (emb.cos() * scale).to(self.dtype)
        self.sin = (emb.sin() * scale).to(self.dtype)

    @classmethod
    def over_layers(cls, base: "LlamaForward", layers: list[_Layer]) -> "LlamaForward":
        """A forward over `layers` that shares `base`'s embedding, final norm, LM head,
        rotary tables and attention geometry (no copy): a trained draft head's decoder
        layer(s) run with the target's own machinery (cache, tree masks, rows)."""
        forward = cls.__new__(cls)
        forward.__dict__.update(base.__dict__)
        forward.layers = list(layers)
        forward.n_layers = len(layers)
        return forward

    # ----------------------------------------------------------------- cache
    def new_cache(self, batch: int, max_len: int) -> KVCache:
        if max_len > self.cos.shape[0]:
            raise AutotuneError(f"prompt + max_new_tokens = {max_len} tokens exceeds the "
                                f"model's {self.cos.shape[0]} positions")
        if self.sliding_window and max_len > self.sliding_window:
            raise AutotuneError(f"prompt + max_new_tokens = {max_len} tokens exceeds the "
                                f"sliding window {self.sliding_window}, which the compact "
                                "forward does not implement")
        return KVCache(self.n_layers, batch, self.n_kv_heads, max_len, self.head_dim,
                       self.dtype, self.device)

    def cache_bytes(self, batch: int, max_len: int) -> int:
        """Bytes `new_cache(batch, max_len)` takes (keys and values, every layer), known
        before it is made: callers size their batches by it."""
        per_position = 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype.itemsize
        return batch * max_len * per_position

    def decode_cache(self, max_len: int, role: str = "target") -> KVCache:
        """The cache one generation decodes into (`role`: whose it is, the target's or a
        draft's). Here a fresh `new_cache(1, max_len)`; the static forward
        (models/static_forward.py) hands back one reused cache per role, which its
        captured graphs are bound to."""
        return self.new_cache(1, max_len)

    def nbytes(self) -> int:
        """Bytes of the weights this forward reads (the tied head counted once)."""
        tensors = [self.embed, self.final_norm] + ([] if self.lm_head.data_ptr() == self.embed.data_ptr() else [self.lm_head])
        for layer in self.layers:
            tensors += [t for t in vars(layer).values() if t is not None]
        return sum(t.element_size() * t.nelement() for t in tensors)

    # ----------------------------------------------------------- the pieces
    def begin(self, input_ids: torch.Tensor, cache: KVCache, start: int | None = None,
              tree_mask: torch.Tensor | None = None,
              position_ids: torch.Tensor | None = None) -> Step:
        """Embed `input_ids` [B, T] to be written at cache positions [start, start+T).

        `start` defaults to `cache.length`; afterwards `cache.length == start + T`.
        `tree_mask` [T, M] bool (T <= M <= start + T) says which of the last M cache
        positions, the new tokens included, each new token may see; every position
        before those is visible to all (the verified prefix). M = T is a mask over the
        new tokens alone (a verify pass over a tree); M > T also covers scratch written
        by earlier passes (a draft tree grown level by level). Default: causal.
        `position_ids` [T] are the rotary positions (default start..start+T-1; a tree
        gives a node the position its depth implies, siblings alike).
        """
        start = cache.length if start is None else start
        t = input_ids.shape[1]
        if start + t > cache.max_len:
            raise ValueError(f"cache of {cache.max_len} positions cannot hold {start + t}")
        if position_ids is None:
            cos, sin = self.cos[start:start + t], self.sin[start:start + t]
        else:
            cos, sin = self.cos[position_ids], self.sin[position_ids]
        causal = False
        mask = None
        if tree_mask is not None:
            visible = start + t - tree_mask.shape[1]
            if tree_mask.shape[0] != t or visible < 0:
                raise ValueError(f"tree_mask {tuple(tree_mask.shape)} does not fit {t} new "
                                 f"tokens after {start} cache positions")
            prefix = torch.ones(t, visible, dtype=torch.bool, device=self.device)
            mask = torch.cat((prefix, tree_mask.to(device=self.device, dtype=torch.bool)), dim=1)
        elif t > 1 and start == 0:
            causal = True
        elif t > 1:
            mask = torch.ones(t, start + t, dtype=torch.bool, device=self.device).tril(start)
        cache.length = start + t
        return Step(F.embedding(input_ids, self.embed), cache, start, cos, sin, mask, causal)

    def begin_rows(self, input_ids: torch.Tensor, cache: KVCache, starts: list[int]) -> Step:
        """Embed `input_ids` [B, T] for a batch whose rows continue at different cache
        positions: row b's tokens go to [starts[b], starts[b] + T) and each sees its
        own prefix and its own earlier new tokens (causal within the row). Columns past
        a row's new tokens (another row's longer prefix, stale scratch) are masked.
        `cache` holds exactly B rows; `cache.length` is left alone (each row keeps
        its own length).
        """
        b, t = input_ids.shape
        if len(starts) != b:
            raise ValueError(f"{len(starts)} row starts for a batch of {b}")
        begin = torch.tensor(starts, dtype=torch.long, device=self.device)
        positions = begin[:, None] + torch.arange(t, device=self.device)[None, :]   # [B, T]
        end = max(starts) + t
        if end > cache.max_len:
            raise ValueError(f"cache of {cache.max_len} positions cannot hold {end}")
        columns = torch.arange(end, device=self.device)
        mask = (columns[None, None, :] <= positions[:, :, None]).unsqueeze(1)    # [B,1,T,end]
        cos = self.cos[positions].unsqueeze(1)                                     # [B,1,T,D]
        sin = self.sin[positions].unsqueeze(1)
        return Step(F.embedding(input_ids, self.embed), cache, 0, cos, sin, mask, False,
                    positions=positions, end=end)

    def _store_kv(self, index: int, step: Step, k: torch.Tensor, v: torch.Tensor) -> int:
        """Write the new tokens' k, v [B, Hkv, T, D] at layer `index`; returns the
        number of cache columns attention then reads."""
        cache = step.cache
        if step.positions is None:
            end = step.start + k.shape[2]
            cache.k[index, :, :, step.start:end] = k
            cache.v[index, :, :, step.start:end] = v
            return end
        # Advanced indices on the batch and position dims (a slice between them) put
        # the indexed dims first: the target is [B, T, Hkv, D].
        rows = torch.arange(k.shape[0], device=k.device)[:, None]
        cache.k[index][rows, :, step.positions] = k.transpose(1, 2)
        cache.v[index][rows, :, step.positions] = v.transpose(1, 2)
        return step.end

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.fused_kernels:
            # One kernel (float32 inside); the scale rounds once instead of twice.
            return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
        # Same arithmetic as HF's LlamaRMSNorm: normalise in float32, scale in model dtype.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * xf.to(x.dtype)

    def _input(self, layer: _Layer, h: torch.Tensor) -> torch.Tensor:
        return h if layer.input_norm is None else self._rms(h, layer.input_norm)

    def _qkv(self, layer: _Layer, step: Step, x: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project normed input x [B, T, hidden] to rotated q [B,H,T,D], k and v [B,Hkv,T,D]."""
        b, t, _ = x.shape
        d = self.head_dim
        qkv = self._linear(x, layer.qkv_weight, layer.qkv_bias)
        heads = self.n_heads + self.n_kv_heads
        qk, v = qkv.split((heads * d, self.n_kv_heads * d), dim=-1)
        v = v.view(b, t, self.n_kv_heads, d).transpose(1, 2)
        if layer.q_norm is None:
            # q and k rotated together: the same elementwise arithmetic in half the
            # kernels. The result [B, H + Hkv, T, D] is dense, so q and k are too.
            qk = qk.reshape(b, t, heads, d).transpose(1, 2)
            qk = qk * step.cos + _rotate_half(qk) * step.sin
            return qk[:, :self.n_heads], qk[:, self.n_heads:], v
        q, k = qk.split((self.n_heads * d, self.n_kv_heads * d), dim=-1)
        q = self._rms(q.view(b, t, self.n_heads, d).transpose(1, 2), layer.q_norm)
        k = self._rms(k.view(b, t, self.n_kv_heads, d).transpose(1, 2), layer.k_norm)
        q = q * step.cos + _rotate_half(q) * step.sin
        k = k * step.cos + _rotate_half(k) * step.sin
        return q, k, v

    def _attention(self, index: int, step: Step) -> None:
        layer = self.layers[index]
        h = step.hidden
        q, k, v = self._qkv(layer, step, self._input(layer, h))
        cache = step.cache
        end = self._store_kv(index, step, k, v)
        if step.positions is not None:
            # `_linear_cpu`'s output is transposed, so q's last dim is strided; SDPA's
            # fused CPU kernel needs it dense and otherwise falls back to the math path,
            # which copies K/V per head group (GQA): about 20x slower for 16 rows of long
            # prompts. The single-row path keeps its kernel (and its numerics) as it was.
            q = q.contiguous()
        keys, values = cache.k[index, :, :, :end], cache.v[index, :, :, :end]
        if self.fused_kernels and step.mask is not None and self.n_heads != self.n_kv_heads:
            out = self._grouped_attention(q, keys, values, step)
        else:
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=step.mask, is_causal=step.causal,
                scale=self.scaling, enable_gqa=self.n_heads != self.n_kv_heads)
        out = out.transpose(1, 2).reshape(h.shape[0], h.shape[1], -1)
        step.hidden = h + self._linear(out, layer.o_weight, layer.o_bias)

    def _grouped_attention(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                           step: Step) -> torch.Tensor:
        """Masked GQA attention as plain multi-head attention over Hkv heads.

        q [B, H, T, D] is viewed as [B, Hkv, g*T, D] (the g query heads that share a KV
        head are adjacent, as HF's `repeat_kv` has them), so the memory-efficient kernel
        runs with the mask; SDPA's own GQA path takes a mask only on its math path,
        which expands K/V per layer. Returns [B, H, T, D].
        """
        b, h, t, d = q.shape
        if step.grouped_bias is None:
            step.grouped_bias = self._grouped_bias(step.mask, t, q.dtype)
        out = F.scaled_dot_product_attention(
            q.reshape(b, self.n_kv_heads, -1, d), keys, values,
            attn_mask=step.grouped_bias, scale=self.scaling)
        return out.reshape(b, h, t, d)

    def _grouped_bias(self, mask: torch.Tensor, tokens: int, dtype: torch.dtype) -> torch.Tensor:
        """`mask` [.., T, cols] bool as an additive bias [B|1, 1, g*T, cols]: row r*T + t
        is query t of the r-th head in a group."""
        groups = self.n_heads // self.n_kv_heads
        rows = mask.reshape(-1, 1, tokens, mask.shape[-1]).repeat(1, 1, groups, 1)
        bias = torch.zeros(rows.shape, dtype=dtype, device=rows.device)
        return bias.masked_fill_(~rows, float("-inf"))

    def _mlp(self, index: int, step: Step) -> None:
        layer = self.layers[index]
        x = self._rms(step.hidden, layer.post_norm)
        gate, up = self._linear(x, layer.gate_up_weight, layer.gate_up_bias).chunk(2, dim=-1)
        step.hidden = step.hidden + self._linear(F.silu(gate) * up, layer.down_weight, layer.down_bias)

    def run_layers(self, step: Step, first: int, last: int,
                   attn_skip: Collection[int] = (), mlp_skip: Collection[int] = ()) -> None:
        """Run decoder layers [first, last) on `step.hidden`, skipping the given sublayers.

        A skipped attention sublayer neither reads nor writes the cache at that layer, so
        the new positions there keep whatever they held before (scratch beyond the
        verified prefix). Draft passes only ever skip the same layers they skipped for
        earlier draft tokens of the round, and the verify pass rewrites every layer's
        keys and values for all positions it covers, so the stale scratch is never read
        by a full-model pass.
        """
        for index in range(first, last):
            if index not in attn_skip:
                self._attention(index, step)
            if index not in mlp_skip:
                self._mlp(index, step)

    def fill_kv(self, step: Step, first: int, last: int) -> None:
        """Write keys/values for layers [first, last) from the current hidden state.

        Used after an early exit (CALM's state propagation): later draft tokens that go
        deeper then attend to an approximation of this token instead of stale scratch.
        Costs a norm and the k/v projection per layer, not a full layer.
        """
        h = step.hidden
        for index in range(first, last):
            layer = self.layers[index]
            _, k, v = self._qkv(layer, step, self._input(layer, h))
            self._store_kv(index, step, k, v)

    def logits(self, step: Step, last_only: bool = False) -> torch.Tensor:
        """Final norm + LM head on the current hidden state: [B, T or 1, V]."""
        h = step.hidden[:, -1:] if last_only else step.hidden
        return self.head_logits(self._rms(h, self.final_norm))

    def head_logits(self, normed: torch.Tensor) -> torch.Tensor:
        """The LM head alone on final-normed hidden states [B, T, hidden]: [B, T, V].
        Trained draft heads predict such states (the target's features) and read them
        through the target's own head."""
        return self._linear(normed, self.lm_head, self.lm_head_bias)

    def forward_features(self, input_ids: torch.Tensor, cache: KVCache, *,
                         start: int | None = None, last_only: bool = False,
                         tree_mask: torch.Tensor | None = None,
                         position_ids: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` that also returns the features: the final-normed hidden states
        [B, T, hidden] the LM head reads (what EAGLE and Medusa heads draft from). The
        logits are exactly `forward`'s: the same operations in the same order."""
        step = self.begin(input_ids, cache, start, tree_mask, position_ids)
        self.run_layers(step, 0, self.n_layers)
        normed = self._rms(step.hidden, self.final_norm)
        return self.head_logits(normed[:, -1:] if last_only else normed), normed

    # ------------------------------------------------------------ the whole
    def forward(self, input_ids: torch.Tensor, cache: KVCache, *, start: int | None = None,
                attn_skip: Collection[int] = (), mlp_skip: Collection[int] = (),
                exit_layer: int | None = None, last_only: bool = False,
                tree_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, T, V] (or [B, 1, V] with `last_only`) for `input_ids` [B, T].

        `exit_layer` e leaves after layers [0, e) through the final norm and LM head.
        """
        step = self.begin(input_ids, cache, start, tree_mask, position_ids)
        self.run_layers(step, 0, self.n_layers if exit_layer is None else exit_layer,
                        attn_skip, mlp_skip)
        return self.logits(step, last_only)

    def forward_rows(self, input_ids: torch.Tensor, cache: KVCache, starts: list[int],
                     *, attn_skip: Collection[int] = (), mlp_skip: Collection[int] = (),
                     exit_layer: int | None = None) -> torch.Tensor:
        """Logits [B, T, V] for `input_ids` [B, T] whose rows continue at the cache
        positions `starts` (one per row; see `begin_rows`): the batched decoder's
        verify pass over ragged rows."""
        step = self.begin_rows(input_ids, cache, starts)
        self.run_layers(step, 0, self.n_layers if exit_layer is None else exit_layer,
                        attn_skip, mlp_skip)
        return self.logits(step)

    def forward_rows_features(self, input_ids: torch.Tensor, cache: KVCache,
                              starts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward_rows` with the features [B, T, hidden] (see `forward_features`)."""
        step = self.begin_rows(input_ids, cache, starts)
        self.run_layers(step, 0, self.n_layers)
        normed = self._rms(step.hidden, self.final_norm)
        return self.head_logits(normed), normed
