"""Fallback forward for architectures outside the Llama family: HF's own model call.

It offers what the methods without layer access need (the AR baseline, `draft_model`,
`ngram`): a cache cut back after a rejection and many tokens verified in one pass.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import DynamicCache


class HFCache:
    """An HF DynamicCache behind the same `length` / `crop` surface as KVCache."""

    def __init__(self, config: Any, max_len: int) -> None:
        self.inner = DynamicCache(config=config)
        self.max_len = max_len

    @property
    def length(self) -> int:
        return self.inner.get_seq_length()

    def crop(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of length {self.length} to {length}")
        # transformers 5 takes the number of tokens to remove, as a negative count.
        if length < self.length:
            self.inner.crop(length - self.length)

    def nbytes(self) -> int:
        # DynamicCache grows as it goes; count what it holds now.
        total = 0
        for layer in getattr(self.inner, "layers", []):
            for name in ("keys", "values"):
                t = getattr(layer, name, None)
                if isinstance(t, torch.Tensor):
                    total += t.element_size() * t.nelement()
        return total


class HFForward:
    """Drives `hf_model(...)` with an HFCache; no layer skipping, no early exits."""

    supports_layers = False

    def __init__(self, hf_model: nn.Module) -> None:
        self.model = hf_model
        self.config = hf_model.config
        self.n_layers: int = int(getattr(hf_model.config, "num_hidden_layers", 0) or 0)
        self.vocab_size: int = hf_model.get_output_embeddings().weight.shape[0]
        first = next(hf_model.parameters())
        self.dtype, self.device = first.dtype, first.device

    def new_cache(self, batch: int, max_len: int) -> HFCache:
        return HFCache(self.config, max_len)

    def decode_cache(self, max_len: int, role: str = "target") -> HFCache:
        """The cache one generation decodes into: a fresh one (see LlamaForward)."""
        return self.new_cache(1, max_len)

    def nbytes(self) -> int:
        return sum(p.element_size() * p.nelement() for p in self.model.parameters())

    def forward(self, input_ids: torch.Tensor, cache: HFCache, *, start: int | None = None,
                last_only: bool = False) -> torch.Tensor:
        """Logits [B, T, V] (or [B, 1, V]) for input_ids [B, T] written from `start`."""
        if start is not None and start != cache.length:
            cache.crop(start)
        first = cache.length
        positions = torch.arange(first, first + input_ids.shape[1], device=input_ids.device)
        out = self.model(input_ids=input_ids, past_key_values=cache.inner, use_cache=True,
                         cache_position=positions, logits_to_keep=1 if last_only else 0)
        return out.logits
