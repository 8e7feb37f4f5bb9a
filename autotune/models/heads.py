"""Trainable draft heads over a frozen target: EAGLE's feature head, Medusa's heads.

Both read the target's *features*: the final-normed hidden states its LM head reads
(`LlamaForward.forward_features`), and both score tokens with the target's own LM head,
so the target's weights are never trained and never copied.

- `EagleHead` (EAGLE-1, Li et al., 2024): the pair (feature of position j, embedding of
  token j+1) -> `fc` [2H -> H] -> one Llama decoder layer (no norm before its attention)
  -> a predicted feature of position j+1, which the target's LM head turns into the
  draft distribution of token j+2. Drafting feeds each predicted feature back in.
- `MedusaHeads` (Cai et al., 2024): head i maps the feature of position j through a
  residual block, x + SiLU(W x + b), and the target's LM head to a guess at token
  j+2+i; no head reads another's token, so one root pass drafts every depth.
- `ExitAdapters` (S2D's early exits, Kavehzadeh et al., 2024, with the target frozen):
  per exit layer e, a low-rank residual adapter on the *pre-norm* hidden state after
  the target's first e layers, h + up(down(RMSNorm(h))), read by the target's own final
  norm and LM head. S2D fine-tunes the whole stack so that every sub-model exits well;
  a frozen target cannot move, so each exit learns a correction of its own instead.

Module and parameter names follow the checkpoints serving engines load (EAGLE:
`fc.*`, `layers.0.*`; Medusa: `blocks.{i}.layers.0.*`), so `state_dict()` is the
exported checkpoint (exit adapters: `exits.{e}.norm|down|up.weight`; no engine loads
them). Shapes: B batch, T tokens, H hidden, D head size, V vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from autotune.models.drafter_folder import EagleGeometry
from autotune.models.llama import LlamaForward, _Layer, _rotate_half


class RMSNorm(nn.Module):
    """HF LlamaRMSNorm's arithmetic: normalise in float32, scale in the model dtype."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class _Attention(nn.Module):
    def __init__(self, hidden: int, n_heads: int, n_kv_heads: int, head_dim: int,
                 bias: bool) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, n_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, n_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, n_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(n_heads * head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                scaling: float) -> torch.Tensor:
        """Causal self-attention over x [B, T, H] with rotary tables cos, sin [T, D]."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling,
                                             enable_gqa=self.n_heads != self.n_kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class _MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _DecoderLayer(nn.Module):
    """A Llama decoder layer without the norm before attention (EAGLE-1's layer 0: its
    input is already the fused pair)."""

    def __init__(self, hidden: int, n_heads: int, n_kv_heads: int, head_dim: int,
                 intermediate: int, eps: float, attention_bias: bool) -> None:
        super().__init__()
        self.self_attn = _Attention(hidden, n_heads, n_kv_heads, head_dim, attention_bias)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = _MLP(hidden, intermediate)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                scaling: float) -> torch.Tensor:
        h = x + self.self_attn(x, cos, sin, scaling)
        return h + self.mlp(self.post_attention_layernorm(h))


def head_geometry(target: LlamaForward) -> EagleGeometry:
    """The attention geometry a head shares with its target (its rotary tables too)."""
    config = target.config
    return EagleGeometry(hidden=int(config.hidden_size), n_heads=target.n_heads,
                         n_kv_heads=target.n_kv_heads, head_dim=target.head_dim,
                         intermediate=int(config.intermediate_size), eps=target.eps,
                         attention_bias=bool(getattr(config, "attention_bias", False)))


class EagleHead(nn.Module):
    """fc + one decoder layer: (features [B, T, H], next tokens' embeddings [B, T, H])
    -> predicted next features [B, T, H] (training: causal over the T pairs)."""

    def __init__(self, hidden: int, n_heads: int, n_kv_heads: int, head_dim: int,
                 intermediate: int, eps: float, attention_bias: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.layers = nn.ModuleList([_DecoderLayer(hidden, n_heads, n_kv_heads, head_dim,
                                                   intermediate, eps, attention_bias)])

    def forward(self, features: torch.Tensor, embeds: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor, scaling: float) -> torch.Tensor:
        x = self.fc(torch.cat((embeds, features), dim=-1))
        return self.layers[0](x, cos, sin, scaling)

    def init_from(self, target: LlamaForward) -> None:
        """Start as the identity on the feature: fc passes it through (plus a small
        share of the embedding) and the layer's residual branches (o_proj, down_proj)
        start at zero, so the first prediction of feature j+1 is feature j and training
        learns the correction. (The target's own last layer is no starting point: it
        expects the un-normed residual stream, and on final-normed features its outputs
        are 20x too large.)"""
        h = target.config.hidden_size
        layer = self.layers[0]
        with torch.no_grad():
            for linear in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                           layer.self_attn.v_proj, layer.mlp.gate_proj, layer.mlp.up_proj):
                nn.init.normal_(linear.weight, std=0.02)
            nn.init.zeros_(layer.self_attn.o_proj.weight)
            nn.init.zeros_(layer.mlp.down_proj.weight)
            eye = torch.eye(h)
            self.fc.weight.copy_(torch.cat((0.02 * torch.randn(h, h) / math.sqrt(h), eye), 1))

    def inference_layer(self) -> _Layer:
        """The decoder layer as the compact forward's plain tensors (q/k/v fused)."""
        layer = self.layers[0]
        attn = layer.self_attn
        qkv_b = (torch.cat((attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias)).detach()
                 if attn.q_proj.bias is not None else None)
        return _Layer(
            input_norm=None,
            qkv_weight=torch.cat((attn.q_proj.weight, attn.k_proj.weight,
                                  attn.v_proj.weight)).detach(),
            qkv_bias=qkv_b, o_weight=attn.o_proj.weight.detach(), o_bias=None,
            q_norm=None, k_norm=None, post_norm=layer.post_attention_layernorm.weight.detach(),
            gate_up_weight=torch.cat((layer.mlp.gate_proj.weight,
                                      layer.mlp.up_proj.weight)).detach(),
            gate_up_bias=None, down_weight=layer.mlp.down_proj.weight.detach(), down_bias=None)


class _MedusaBlock(nn.Module):
    """`n_layers` residual steps x + SiLU(W x + b); the linears sit directly in
    `layers` so the parameters are named `layers.{j}.weight` as vLLM loads them."""

    def __init__(self, hidden: int, n_layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(n_layers)])
        for linear in self.layers:
            # Medusa's init: every block starts as the identity.
            nn.init.zeros_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.layers:
            x = x + F.silu(linear(x))
        return x


class MedusaHeads(nn.Module):
    """`n_heads` residual stacks: features [..., H] -> [..., n_heads, H], head i's
    transformed feature for the token i+1 places past the next one."""

    def __init__(self, hidden: int, n_heads: int, n_layers: int = 1) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_MedusaBlock(hidden, n_layers) for _ in range(n_heads)])

    @property
    def n_heads(self) -> int:
        return len(self.blocks)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.stack([block(features) for block in self.blocks], dim=-2)


class _ExitAdapter(nn.Module):
    """h + up(down(RMSNorm(h))): hidden [..., H] -> [..., H], rank r in the middle.
    `up` starts at zero, so an untrained adapter returns h itself (the plain exit)."""

    def __init__(self, hidden: int, rank: int, eps: float) -> None:
        super().__init__()
        self.norm = RMSNorm(hidden, eps)
        self.down = nn.Linear(hidden, rank, bias=False)
        self.up = nn.Linear(rank, hidden, bias=False)
        nn.init.zeros_(self.up.weight)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.up(self.down(self.norm(hidden)))


class ExitAdapters(nn.Module):
    """One `_ExitAdapter` per exit layer e (an exit after the target's first e layers,
    1 <= e < the target's depth), keyed by e: parameters `exits.{e}.norm.weight`,
    `exits.{e}.down.weight` [r, H], `exits.{e}.up.weight` [H, r]."""

    def __init__(self, hidden: int, layers: tuple[int, ...] | list[int], rank: int,
                 eps: float) -> None:
        super().__init__()
        self.layers = tuple(int(e) for e in layers)
        self.rank = rank
        self.exits = nn.ModuleDict({str(e): _ExitAdapter(hidden, rank, eps)
                                    for e in self.layers})

    def adapt(self, layer: int, hidden: torch.Tensor) -> torch.Tensor:
        """The hidden state [..., H] after `layer` layers as exit `layer`'s LM head
        should read it (before the target's final norm): adapted where that exit has
        an adapter, else unchanged (a plain exit)."""
        key = str(layer)
        return self.exits[key](hidden) if key in self.exits else hidden

    def forward(self, layer: int, hidden: torch.Tensor) -> torch.Tensor:
        return self.adapt(layer, hidden)
