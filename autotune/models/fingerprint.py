"""A loaded model's identity: what decides its greedy output here (caches key on it)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel


def model_fingerprint(model: "LoadedModel") -> str:
    """A short hash of what decides a model's greedy output here: its name, path, config,
    dtype, device type and a checksum of its embedding, first and last layer and head
    weights (an in-memory model, e.g. a truncated copy, differs in its config)."""
    import torch

    digest = hashlib.sha256()
    config = getattr(model.hf_model, "config", None)
    digest.update(json.dumps([model.name, model.path, str(model.dtype), model.device.type,
                              config.to_json_string() if config is not None else ""]).encode())
    with torch.inference_mode():
        tensors = [p for _, p in list(model.hf_model.named_parameters())[:3]]
        tensors += [p for _, p in list(model.hf_model.named_parameters())[-3:]]
        for tensor in tensors:
            flat = tensor.detach().float().flatten()
            digest.update(f"{flat.sum().item():.6e}:{flat.abs().sum().item():.6e}:"
                          f"{flat[:16].tolist()}".encode())
    return digest.hexdigest()[:16]
