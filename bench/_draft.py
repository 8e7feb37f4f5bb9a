"""A truncated copy of a loaded Llama-family model, to serve as a draft model offline.

No second small model with the default model's vocabulary exists offline, so the draft
is the target's first D decoder layers plus its final norm and LM head: a real
LlamaForCausalLM with its own weights, saved with the tokenizer into a folder and
loaded back through autotune's own `load_model`, so our decoder and HF `generate` use
exactly the same draft weights.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import torch

from autotune.models.loading import LoadedModel, load_model

_LAYER_KEY = re.compile(r"^model\.layers\.(\d+)\.")


def save_truncated(target: LoadedModel, n_layers: int, folder: Path) -> Path:
    """Write `target`'s first `n_layers` layers + final norm + head as a HF model folder."""
    from transformers import LlamaForCausalLM

    full = target.hf_model.config.num_hidden_layers
    if not 1 <= n_layers < full:
        raise ValueError(f"draft layers must be in 1..{full - 1}, got {n_layers}")
    config = copy.deepcopy(target.hf_model.config)
    config.num_hidden_layers = n_layers
    if getattr(config, "layer_types", None):             # per-layer lists must shrink too
        config.layer_types = list(config.layer_types)[:n_layers]
    config.dtype = "float32"
    state = {}
    for key, value in target.hf_model.state_dict().items():
        match = _LAYER_KEY.match(key)
        if match and int(match.group(1)) >= n_layers:
            continue
        state[key] = value.detach().to("cpu", torch.float32).clone()
    model = LlamaForCausalLM(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # A tied head has no weight of its own; everything else must come from the target.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"truncated draft: missing {missing}, unexpected {unexpected}")
    model.generation_config = copy.deepcopy(target.hf_model.generation_config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    target.tokenizer.save_pretrained(folder)
    return folder


def truncated_draft(target: LoadedModel, n_layers: int, folder: Path, device: str,
                    dtype: str | None) -> LoadedModel:
    """Save the truncated copy into `folder` and load it with autotune's `load_model`."""
    save_truncated(target, n_layers, folder)
    draft = load_model(str(folder), device=device, dtype=dtype)
    draft.name = f"{target.name}-first{n_layers}"
    return draft
