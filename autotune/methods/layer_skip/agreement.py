"""Layer skipping's agreement: the skipping pass over the whole sequence.

The draft pass skips its sublayers at every position, so its keys and values at the
non-skipped layers come from the skipped path, where the decoder's drafter would attend
to the full model's. Errors compound along the sequence, so this proxy ranks skip sets
the way SWIFT does but reads lower than real first-token acceptance.
"""

from __future__ import annotations

import torch

from autotune.schema.config import DecodeConfig
from autotune.measure.agreement import Scorer, no_grad, shared_vocab, top1
from autotune.models.loading import LoadedModel


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    """The skipping pass over the whole sequence (see the module docstring for how it
    differs from the drafter's)."""
    forward, vocab = target.forward, shared_vocab(target, draft)
    attn_skip, mlp_skip = frozenset(config.attn_skip), frozenset(config.mlp_skip)

    def layer_skip(ids: list[int]) -> list[int]:
        x = torch.tensor([ids], dtype=torch.long, device=target.device)
        cache = forward.new_cache(1, len(ids))
        return top1(forward.forward(x, cache, attn_skip=attn_skip, mlp_skip=mlp_skip), vocab)

    return no_grad(layer_skip)
