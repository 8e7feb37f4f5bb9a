"""Greedy losslessness on the real default model: every method x every exit policy must
produce exactly the AR baseline's tokens (float32) on real prompts across categories."""

from __future__ import annotations

import time

import pytest
import torch

from autotune.decoding.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.models.hf_forward import HFForward
from autotune.models.loading import LoadedModel
from autotune.workloads import encode_prompt
from conftest import real_prompts

MAX_NEW = 16
N_PROMPTS = 20

METHODS = {
    "layer_skip": dict(method="layer_skip", attn_skip=(3, 8, 13, 19, 24), mlp_skip=(5, 20)),
    "sorted_exit": dict(method="sorted_exit", exits=(8, 16, 24), thresholds=(0.9, 0.6)),
    "sorted_exit_draft": dict(method="sorted_exit", exits=(4, 8, 10), thresholds=(0.8, 0.5)),
    "draft_model": dict(method="draft_model"),
    "ngram": dict(method="ngram", ngram_min=1, ngram_max=3),
}
POLICIES = {
    "fixed": dict(exit_policy="fixed", k=4),
    "confidence": dict(exit_policy="confidence", k=6, gamma=0.5),
    "adaptive": dict(exit_policy="adaptive", k=8, gamma=0.6),
    "heuristic": dict(exit_policy="heuristic", k=3),
}
USES_DRAFT = {"sorted_exit_draft", "draft_model"}


@pytest.fixture(scope="module")
def prompt_ids(default_model: LoadedModel) -> list[list[int]]:
    prompts = real_prompts(N_PROMPTS)
    assert len({p.category for p in prompts}) >= 5
    return [encode_prompt(default_model.tokenizer, p) for p in prompts]


@pytest.fixture(scope="module")
def baseline_tokens(default_model: LoadedModel, prompt_ids: list[list[int]]) -> list[list[int]]:
    decoder = SpeculativeDecoder(default_model, DecodeConfig())
    return [decoder.generate(ids, MAX_NEW, time.perf_counter).tokens for ids in prompt_ids]


def test_baseline_matches_hf_generate(default_model, prompt_ids, baseline_tokens):
    """Our AR loop over our forward equals HF's own greedy generate."""
    hf = default_model.hf_model
    for ids, ours in list(zip(prompt_ids, baseline_tokens))[:3]:
        with torch.inference_mode():
            out = hf.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False)
        assert out[0, len(ids):].tolist() == ours


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("method", list(METHODS))
def test_greedy_lossless(method, policy, default_model, truncated_draft, prompt_ids,
                         baseline_tokens):
    config = DecodeConfig(**METHODS[method], **POLICIES[policy])
    draft = truncated_draft if method in USES_DRAFT else None
    decoder = SpeculativeDecoder(default_model, config, draft)
    drafted = accepted = 0
    for ids, expected in zip(prompt_ids, baseline_tokens):
        generation = decoder.generate(ids, MAX_NEW, time.perf_counter)
        assert generation.tokens == expected
        drafted += sum(r.drafted for r in generation.rounds)
        accepted += sum(r.accepted for r in generation.rounds)
    # The test must exercise speculation: drafts were made, and some were rejected
    # (ngram may find little to copy in 16 tokens, but it must find something).
    assert drafted > 0
    if method != "ngram":
        assert 0 < accepted < drafted


def test_hf_fallback_lossless(default_model, truncated_draft, prompt_ids, baseline_tokens):
    """Architectures outside the Llama family run on HF's forward: same tokens."""
    hf_target = LoadedModel(**{**vars(default_model), "forward": HFForward(default_model.hf_model)})
    hf_draft = LoadedModel(**{**vars(truncated_draft), "forward": HFForward(truncated_draft.hf_model)})
    for config, draft in ((DecodeConfig(), None),
                          (DecodeConfig(method="ngram", k=4), None),
                          (DecodeConfig(method="draft_model", k=3), hf_draft)):
        decoder = SpeculativeDecoder(hf_target, config, draft)
        for ids, expected in list(zip(prompt_ids, baseline_tokens))[:5]:
            assert decoder.generate(ids, MAX_NEW, time.perf_counter).tokens == expected


def test_layer_methods_refused_on_hf_fallback(default_model):
    from autotune.errors import AutotuneError

    hf_target = LoadedModel(**{**vars(default_model), "forward": HFForward(default_model.hf_model)})
    with pytest.raises(AutotuneError, match="layer access"):
        SpeculativeDecoder(hf_target, DecodeConfig(method="layer_skip", attn_skip=(3,)))
