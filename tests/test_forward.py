"""The compact Llama-family forward (LlamaForward, KVCache) against HF's own logits, and
the HF fallback forward (HFForward) on a non-Llama architecture."""

from __future__ import annotations

import pytest
import torch
from tiny import (  # noqa: F401
    gpt2_model,
    llama_model,
    mistral_model,
    one_thread,
    qwen2_model,
    qwen3_model,
    save_tiny,
    tiny_loaded,
)
from transformers import LlamaConfig, LlamaForCausalLM

from autotune.common.errors import AutotuneError
from autotune.models.hf_forward import HFForward
from autotune.models.llama import LlamaForward
from autotune.models.loading import load_model

ATOL = 1e-5


def llama_variant(scale: float = 1.0) -> torch.nn.Module:
    """Llama with what SmolLM / Llama 3 checkpoints use: tied embeddings, llama3 rope
    scaling; plus attention and MLP biases (randomised)."""
    torch.manual_seed(7)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=True,
                         attention_bias=True, mlp_bias=True,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8})
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)
            elif "norm" not in name:
                param.mul_(scale)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


BUILDERS = {"llama": llama_model, "mistral": mistral_model, "qwen2": qwen2_model,
            "qwen3": qwen3_model, "llama_tied_bias_rope3": llama_variant}


def _ids(n: int, batch: int = 1, vocab: int = 64, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(seed))


def _close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> None:
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = (a - b).abs().max().item()
    assert diff <= atol, f"max abs diff {diff:.3g} > {atol}"


@pytest.fixture(scope="module", params=list(BUILDERS))
def arch(request):
    """(hf_model, LlamaForward over it, HF reference logits of a 12-token batch of 2)."""
    model = BUILDERS[request.param](scale=3.0)   # larger weights: every layer matters
    ids = _ids(12, batch=2)
    with torch.no_grad():
        ref = model(ids).logits
    fw = LlamaForward(model)
    return model, fw, ids, ref


@torch.no_grad()
def _hf(model, ids, **kw):
    return model(ids, **kw)


# ------------------------------------------------------------------ parity with HF

def test_full_prompt_matches_hf(arch):
    model, fw, ids, ref = arch
    assert ref.std() > 0.1                # not a degenerate near-zero comparison
    out = fw.forward(ids, fw.new_cache(2, 32))
    _close(out, ref)
    # Fusing q/k/v and gate/up re-pointed the HF parameters: HF still computes the same.
    _close(_hf(model, ids).logits, ref, atol=0.0)


def test_last_only_is_last_row(arch):
    _, fw, ids, ref = arch
    out = fw.forward(ids, fw.new_cache(2, 32), last_only=True)
    _close(out, ref[:, -1:])


def test_prefill_then_one_token_at_a_time(arch):
    _, fw, ids, ref = arch
    cache = fw.new_cache(2, 32)
    rows = [fw.forward(ids[:, :5], cache)]
    assert cache.length == 5
    for t in range(5, ids.shape[1]):
        rows.append(fw.forward(ids[:, t:t + 1], cache))
        assert cache.length == t + 1
    _close(torch.cat(rows, dim=1), ref)


def test_verify_many_tokens_after_prefix(arch):
    _, fw, ids, ref = arch
    cache = fw.new_cache(2, 32)
    fw.forward(ids[:, :4], cache)
    _close(fw.forward(ids[:, 4:9], cache), ref[:, 4:9])
    _close(fw.forward(ids[:, 9:], cache), ref[:, 9:])


def test_crop_discards_junk(arch):
    _, fw, ids, ref = arch
    cache = fw.new_cache(2, 32)
    fw.forward(ids[:, :6], cache)
    junk = (ids[:, 6:10] + 7) % 64
    fw.forward(junk, cache)                       # a rejected draft, in one pass
    fw.forward(junk[:, :1], cache)                # and one more token on top
    assert cache.length == 11
    cache.crop(6)
    assert cache.length == 6
    _close(fw.forward(ids[:, 6:], cache), ref[:, 6:])


def test_start_argument_overwrites_scratch(arch):
    """The decoder verifies with start=verified_len over scratch a draft wrote."""
    _, fw, ids, ref = arch
    cache = fw.new_cache(2, 32)
    fw.forward(ids[:, :6], cache)
    fw.forward((ids[:, 6:9] + 3) % 64, cache)
    _close(fw.forward(ids[:, 6:], cache, start=6), ref[:, 6:])


def test_crop_rejects_growth():
    fw = LlamaForward(llama_model())
    cache = fw.new_cache(1, 16)
    fw.forward(_ids(4), cache)
    with pytest.raises(ValueError):
        cache.crop(5)
    with pytest.raises(ValueError):
        cache.crop(-1)
    with pytest.raises(ValueError):            # more tokens than the cache holds
        fw.forward(_ids(13), cache)
    with pytest.raises(AutotuneError, match="positions"):   # more than the model has
        fw.new_cache(1, 257)


# ------------------------------------------------------------------ skipping, exits

def test_skip_everything_is_norm_and_head_on_embeddings(arch):
    model, fw, ids, _ = arch
    every = set(range(fw.n_layers))
    out = fw.forward(ids, fw.new_cache(2, 32), attn_skip=every, mlp_skip=every)
    with torch.no_grad():
        expect = model.lm_head(model.model.norm(model.model.embed_tokens(ids)))
    _close(out, expect)


def test_partial_skip_matches_hf_with_zeroed_sublayers():
    """attn_skip={1}, mlp_skip={2} equals HF on a copy whose layer-1 o_proj and layer-2
    down_proj are zero (a residual block that adds nothing)."""
    model = llama_model(seed=5, scale=3.0)
    zeroed = llama_model(seed=5, scale=3.0)
    with torch.no_grad():
        zeroed.model.layers[1].self_attn.o_proj.weight.zero_()
        zeroed.model.layers[2].mlp.down_proj.weight.zero_()
    ids = _ids(10)
    expect = _hf(zeroed, ids).logits
    fw = LlamaForward(model)
    cache = fw.new_cache(1, 16)
    _close(fw.forward(ids, cache, attn_skip={1}, mlp_skip={2}), expect)
    # and it differs from the full model (the skip did something)
    assert (expect - _hf(model, ids).logits).abs().max() > 1e-2
    # incremental: prefix with the same skips, then one token at a time
    cache = fw.new_cache(1, 16)
    rows = [fw.forward(ids[:, :4], cache, attn_skip={1}, mlp_skip={2})]
    for t in range(4, 10):
        rows.append(fw.forward(ids[:, t:t + 1], cache, attn_skip={1}, mlp_skip={2}))
    _close(torch.cat(rows, dim=1), expect)


def test_exit_layer_full_depth_is_full_forward(arch):
    _, fw, ids, ref = arch
    _close(fw.forward(ids, fw.new_cache(2, 32), exit_layer=fw.n_layers), ref)


def test_exit_layer_matches_hf_hidden_states(arch):
    model, fw, ids, _ = arch
    hidden = _hf(model, ids, output_hidden_states=True).hidden_states
    for e in range(fw.n_layers):                # hidden_states[n] is already normed
        out = fw.forward(ids, fw.new_cache(2, 32), exit_layer=e)
        with torch.no_grad():
            expect = model.lm_head(model.model.norm(hidden[e]))
        _close(out, expect)


def test_pieces_equal_forward(arch):
    _, fw, ids, ref = arch
    cache = fw.new_cache(2, 32)
    fw.forward(ids[:, :5], cache)
    step = fw.begin(ids[:, 5:], cache)
    assert cache.length == 12 and step.start == 5
    fw.run_layers(step, 0, 1)
    fw.run_layers(step, 1, fw.n_layers)
    _close(fw.logits(step), ref[:, 5:])
    _close(fw.logits(step, last_only=True), ref[:, -1:])


def test_fill_kv_from_embeddings_equals_layer0_keys(arch):
    """Layer 0's input is the embedding, so fill_kv right after begin must write exactly
    the keys/values a full forward writes at layer 0 (and leave deeper layers alone)."""
    _, fw, ids, _ = arch
    full = fw.new_cache(2, 32)
    fw.forward(ids, full)
    filled = fw.new_cache(2, 32)
    fw.forward(ids[:, :8], filled)
    step = fw.begin(ids[:, 8:], filled)
    fw.fill_kv(step, 0, 1)
    _close(filled.k[0, :, :, 8:12], full.k[0, :, :, 8:12])
    _close(filled.v[0, :, :, 8:12], full.v[0, :, :, 8:12])
    assert filled.k[1, :, :, 8:12].abs().max() == 0       # layer 1 untouched


def test_tree_mask_causal_equals_default(arch):
    _, fw, ids, ref = arch
    cache = fw.new_cache(2, 32)
    fw.forward(ids[:, :7], cache)
    t = ids.shape[1] - 7
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    out = fw.forward(ids[:, 7:], cache, tree_mask=causal,
                     position_ids=torch.arange(7, 7 + t))
    _close(out, ref[:, 7:])


def test_tree_siblings_see_only_the_prefix(arch):
    """Two siblings at the same position, each attending to the prefix and itself, score
    as each would alone after the prefix."""
    _, fw, ids, _ = arch
    prefix, a, b = ids[:, :6], ids[:, 6:7], (ids[:, 6:7] + 5) % 64
    cache = fw.new_cache(2, 32)
    fw.forward(prefix, cache)
    tree = fw.forward(torch.cat((a, b), dim=1), cache,
                      tree_mask=torch.eye(2, dtype=torch.bool),
                      position_ids=torch.tensor([6, 6]))
    for i, tok in enumerate((a, b)):
        alone = fw.new_cache(2, 32)
        fw.forward(prefix, alone)
        _close(tree[:, i:i + 1], fw.forward(tok, alone))


def test_rejects_non_llama():
    with pytest.raises(ValueError):
        LlamaForward(gpt2_model())


# ------------------------------------------------------------------ HF fallback

@pytest.fixture(scope="module")
def gpt2():
    model = gpt2_model(seed=3)
    ids = _ids(12)
    return model, HFForward(model), ids, _hf(model, ids).logits


def test_hf_forward_verify_after_prefix_equals_one_at_a_time(gpt2):
    model, fw, ids, ref = gpt2
    many = fw.new_cache(1, 32)
    fw.forward(ids[:, :5], many)
    verified = fw.forward(ids[:, 5:], many)
    assert many.length == 12
    single = fw.new_cache(1, 32)
    rows = [fw.forward(ids[:, :5], single)]
    for t in range(5, 12):
        rows.append(fw.forward(ids[:, t:t + 1], single))
    _close(verified, torch.cat(rows, dim=1)[:, 5:])
    _close(torch.cat(rows, dim=1), ref)
    _close(fw.forward(ids[:, :3], fw.new_cache(1, 32), last_only=True), ref[:, 2:3])


def test_hf_forward_crop(gpt2):
    _, fw, ids, ref = gpt2
    cache = fw.new_cache(1, 32)
    fw.forward(ids[:, :6], cache)
    fw.forward((ids[:, 6:10] + 9) % 64, cache)
    assert cache.length == 10
    cache.crop(6)
    assert cache.length == 6
    _close(fw.forward(ids[:, 6:], cache), ref[:, 6:])
    # start= cuts back too (the decoder's verify call)
    fw.forward((ids[:, 6:8] + 1) % 64, cache, start=6)
    assert cache.length == 8
    _close(fw.forward(ids[:, 6:], cache, start=6), ref[:, 6:])
    with pytest.raises(ValueError):
        cache.crop(13)


# ------------------------------------------------------------------ loading

def test_load_model_picks_the_forward(tmp_path):
    llama, gpt = llama_model(seed=4), gpt2_model(seed=4)
    ids = _ids(6)
    ref_llama, ref_gpt = _hf(llama, ids).logits, _hf(gpt, ids).logits
    loaded = load_model(str(save_tiny(llama, tmp_path / "llama")), device="cpu")
    assert isinstance(loaded.forward, LlamaForward) and loaded.n_layers == 4
    _close(loaded.forward.forward(ids, loaded.forward.new_cache(1, 8)), ref_llama)
    loaded = load_model(str(save_tiny(gpt, tmp_path / "gpt2")), device="cpu")
    assert isinstance(loaded.forward, HFForward)
    _close(loaded.forward.forward(ids, loaded.forward.new_cache(1, 8)), ref_gpt)
    assert tiny_loaded(gpt).forward.vocab_size == 64
