"""A trained head as the draft checkpoints serving engines load (written by train-draft).

`autotune train-draft` writes, inside the drafter folder, one subfolder per engine that
loads such a head: `vllm/` (EAGLE-1 and Medusa) and `sglang/` (EAGLE-1). The exporters
point the engine there (`<drafter>/vllm`, `<drafter>/sglang`). What each loader wants,
read in their sources (docs/trained-drafters.md; the commits: docs/engines/vllm.md
and sglang.md, `PROVENANCE` in autotune/schema/engines.py):

EAGLE-1 (both engines): weights unprefixed, `fc.weight` [H, 2H] over concat(embedding,
feature), `layers.0.self_attn.{q,k,v,o}_proj.weight`, `layers.0.mlp.{gate,up,down}_
proj.weight`, `layers.0.post_attention_layernorm.weight`; no `layers.0.input_layernorm`
(layer 0's is an identity), no final norm; the target's final-normed hidden state is
the feature; the target's embedding and LM head are shared when the checkpoint has none.
- vLLM (vllm/model_executor/models/llama_eagle.py): `fc` has no bias (`bias=False`; a
  `fc.bias` would be an unknown parameter); a plain LlamaConfig with `architectures:
  ["LlamaForCausalLM"]` is renamed to `EagleLlamaForCausalLM`
  (vllm/transformers_utils/configs/eagle.py).
- SGLang (python/sglang/srt/models/llama_eagle.py): `fc` has a bias (nn.Linear's
  default): we write zeros, the same function; the class is looked up by
  `architectures: ["LlamaForCausalLMEagle"]`.
Medusa (vLLM only; SGLang has none: vllm/model_executor/models/medusa.py, its config
transformers_utils/configs/medusa.py): `architectures: ["MedusaModel"]`,
`model_type: medusa`, `num_heads`, `num_hidden_layers` (residual blocks per head),
`hidden_size`, `vocab_size`, `truncated_vocab_size`; `medusa_fc_bias: true` for our
blocks' biases; `original_lm_head: true` shares one LM head, loaded from
`lm_heads.0.weight` (the target's, copied in). Weights `blocks.{i}.layers.{j}.weight`
/ `.bias`; each block is x + SiLU(Linear(x)) on the final-normed hidden state.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Loaded by write_engine_checkpoints only: the exporters import this module for the
    # folder names, and `import autotune.exports` (the --format list of `--help`) must
    # not load torch.
    import torch
    from torch import nn

VLLM_DIR = "vllm"
SGLANG_DIR = "sglang"


def _llama_config(target_config: Any, architecture: str) -> dict[str, Any]:
    config = target_config.to_dict()
    config.pop("quantization_config", None)
    config.update({"architectures": [architecture], "num_hidden_layers": 1,
                   "model_type": "llama"})
    return config


def _write(folder: Path, config: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    scratch = folder / ".model.safetensors.tmp"
    save_file({k: v.detach().to("cpu").contiguous() for k, v in state.items()}, str(scratch))
    os.replace(scratch, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def write_engine_checkpoints(out: Path, kind: str, head: nn.Module, target: Any) -> list[str]:
    """Write the engine subfolders of drafter folder `out`; returns their names."""
    import torch

    state = dict(head.state_dict())
    hf_config = target.hf_model.config
    if kind == "eagle":
        _write(out / VLLM_DIR, _llama_config(hf_config, "LlamaForCausalLM"), state)
        sglang = dict(state)
        sglang["fc.bias"] = torch.zeros(state["fc.weight"].shape[0], dtype=state["fc.weight"].dtype)
        _write(out / SGLANG_DIR, _llama_config(hf_config, "LlamaForCausalLMEagle"), sglang)
        return [VLLM_DIR, SGLANG_DIR]
    n_heads = len(head.blocks)                       # type: ignore[arg-type]
    vocab = int(target.forward.vocab_size)
    config = {"architectures": ["MedusaModel"], "model_type": "medusa",
              "hidden_size": int(hf_config.hidden_size), "vocab_size": vocab,
              "truncated_vocab_size": vocab, "num_heads": n_heads,
              "num_hidden_layers": len(head.blocks[0].layers),     # type: ignore[index]
              "medusa_fc_bias": True, "original_lm_head": True}
    medusa = {k: v for k, v in state.items()}
    medusa["lm_heads.0.weight"] = target.forward.lm_head.detach().float()
    _write(out / VLLM_DIR, config, medusa)
    return [VLLM_DIR]
