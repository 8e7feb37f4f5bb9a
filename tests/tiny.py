"""Tiny random-weight models and tokenizers, built offline, for fast tests.

Import from a test module as ``from tiny import ...`` (pytest puts ``tests/`` on
``sys.path`` because the folder has no ``__init__.py``).

Every builder is deterministic given its seed. By default the models have no EOS token
(``eos=None``), so a generation always runs to ``max_new_tokens``; pass ``eos=<id>`` to
get a model (config, generation config and tokenizer) that stops at that id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from autotune.models.hf_forward import HFForward
from autotune.models.llama import SUPPORTED_MODEL_TYPES, LlamaForward
from autotune.models.loading import LoadedModel

CPU = torch.device("cpu")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Autouse in every module that imports it: torch on one thread for the module.

    Tiny models run thousands of small ops, where thread hand-offs cost more than they
    save, and a 2-core machine shared with other jobs is slower still with 2 threads.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _common(vocab: int, layers: int, eos: int | None) -> dict[str, Any]:
    return dict(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=256, bos_token_id=None, eos_token_id=eos,
                pad_token_id=None)


def _finish(model: torch.nn.Module, eos: int | None, scale: float) -> torch.nn.Module:
    model = model.float().eval()
    model.requires_grad_(False)
    if scale != 1.0:
        # Random init (std 0.02) gives almost uniform next-token distributions; scaling
        # every weight but the norms makes them peaked and layers matter more.
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "norm" not in name:
                    param.mul_(scale)
    model.generation_config.eos_token_id = eos
    model.generation_config.bos_token_id = None
    model.generation_config.pad_token_id = None
    return model


def llama_model(seed: int = 0, layers: int = 4, vocab: int = 64, eos: int | None = None,
                scale: float = 1.0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return _finish(LlamaForCausalLM(LlamaConfig(**_common(vocab, layers, eos))), eos, scale)


def mistral_model(seed: int = 0, layers: int = 3, vocab: int = 64, eos: int | None = None,
                  scale: float = 1.0) -> MistralForCausalLM:
    torch.manual_seed(seed)
    cfg = MistralConfig(**_common(vocab, layers, eos), sliding_window=None)
    return _finish(MistralForCausalLM(cfg), eos, scale)


def qwen2_model(seed: int = 0, layers: int = 3, vocab: int = 64, eos: int | None = None,
                scale: float = 1.0) -> Qwen2ForCausalLM:
    """Qwen2: biases on q/k/v projections (randomised, since HF initialises them to 0)."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(**_common(vocab, layers, eos), use_sliding_window=False)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.5)
    return _finish(model, eos, scale)


def qwen3_model(seed: int = 0, layers: int = 3, vocab: int = 64, eos: int | None = None,
                scale: float = 1.0) -> Qwen3ForCausalLM:
    """Qwen3: per-head q_norm/k_norm (randomised, since HF initialises them to 1) and an
    explicit head_dim different from hidden/heads."""
    torch.manual_seed(seed)
    cfg = Qwen3Config(**_common(vocab, layers, eos), head_dim=16, use_sliding_window=False)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_norm.weight.uniform_(0.5, 1.5)
            layer.self_attn.k_norm.weight.uniform_(0.5, 1.5)
    return _finish(model, eos, scale)


def gpt2_model(seed: int = 0, layers: int = 3, vocab: int = 64, eos: int | None = None
               ) -> GPT2LMHeadModel:
    """A non-Llama architecture, for the HF fallback forward."""
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=layers, n_head=4, n_positions=256,
                     bos_token_id=None, eos_token_id=eos, pad_token_id=None)
    return _finish(GPT2LMHeadModel(cfg), eos, 1.0)


def tiny_tokenizer(vocab: int = 64, eos: int | None = None) -> PreTrainedTokenizerFast:
    """WordLevel tokenizer over the words t0 .. t{vocab-1} (id i is "t{i}")."""
    words = {f"t{i}": i for i in range(vocab)}
    inner = Tokenizer(models.WordLevel(vocab=words, unk_token="t0"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    kwargs: dict[str, Any] = {"unk_token": "t0"}
    if eos is not None:
        kwargs["eos_token"] = f"t{eos}"
    return PreTrainedTokenizerFast(tokenizer_object=inner, **kwargs)


def tiny_loaded(hf_model: torch.nn.Module, name: str = "tiny") -> LoadedModel:
    """Wrap an HF causal LM as the decoder's LoadedModel (LlamaForward for the Llama
    family, else HFForward), with a matching tokenizer; no files involved."""
    config = hf_model.config
    eos = config.eos_token_id if isinstance(config.eos_token_id, int) else None
    tokenizer = tiny_tokenizer(config.vocab_size, eos)
    forward = (LlamaForward(hf_model) if config.model_type in SUPPORTED_MODEL_TYPES
               else HFForward(hf_model))
    return LoadedModel(name=name, path=f"<memory:{name}>", hf_model=hf_model,
                       tokenizer=tokenizer, forward=forward, device=CPU, dtype=torch.float32)


def tiny_llama(seed: int = 0, layers: int = 4, vocab: int = 64, eos: int | None = None,
               scale: float = 1.0) -> LoadedModel:
    """A LoadedModel over a tiny random Llama (hidden 32, 4 heads, 2 kv heads)."""
    return tiny_loaded(llama_model(seed, layers, vocab, eos, scale), name=f"tiny-llama-{seed}")


def save_tiny(hf_model: torch.nn.Module, folder: Path) -> Path:
    """Write the model and a matching tokenizer as a HF folder `load_model` can read."""
    config = hf_model.config
    eos = config.eos_token_id if isinstance(config.eos_token_id, int) else None
    hf_model.save_pretrained(folder)
    tiny_tokenizer(config.vocab_size, eos).save_pretrained(folder)
    return folder
