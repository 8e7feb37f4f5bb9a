"""Greedy losslessness on the real default model: the AR baseline is HF's own greedy
decoding; the model-free methods (n-gram, suffix, suffix automaton) under every exit
policy, HF's forward (architectures outside the Llama family) and batches produce exactly
its tokens (float32) on real prompts across categories. The model-drafted methods are in
test_lossless_methods.py, draft trees in test_lossless_trees.py (tests/lossless.py)."""

from __future__ import annotations

import time

import pytest
import torch
from lossless import (  # noqa: F401 (fixtures)
    MAX_NEW,
    METHODS,
    USES_DRAFT,
    baseline_tokens,
    check_greedy_lossless,
    prompt_ids,
)

from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.models.hf_forward import HFForward
from autotune.models.loading import LoadedModel


def test_baseline_matches_hf_generate(default_model, prompt_ids, baseline_tokens):
    """Our AR loop over our forward equals HF's own greedy generate."""
    hf = default_model.hf_model
    for ids, ours in list(zip(prompt_ids, baseline_tokens))[:3]:
        with torch.inference_mode():
            out = hf.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False)
        assert out[0, len(ids):].tolist() == ours


@pytest.mark.parametrize("method", ["ngram", "suffix", "sa"])
def test_greedy_lossless(method, default_model, truncated_draft, prompt_ids, baseline_tokens):
    check_greedy_lossless(method, default_model, truncated_draft, prompt_ids, baseline_tokens)


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
    from autotune.common.errors import AutotuneError

    hf_target = LoadedModel(**{**vars(default_model), "forward": HFForward(default_model.hf_model)})
    with pytest.raises(AutotuneError, match="layer access"):
        SpeculativeDecoder(hf_target, DecodeConfig(method="layer_skip", attn_skip=(3,)))


# ------------------------------------------------------------------ batches
BATCH = 4


@pytest.mark.parametrize("method", ["ngram", "layer_skip", "draft_model"])
def test_batched_greedy_lossless(method, default_model, truncated_draft, prompt_ids,
                                 baseline_tokens):
    """Rows verified together in one padded pass (ragged caches, per-row masks and
    rotary positions) keep each row's own AR tokens on the real model, float32; the
    batched AR baseline (no drafter) too."""
    from autotune.decoding.batched import BatchedDecoder

    draft = truncated_draft if method in USES_DRAFT else None
    configs = [DecodeConfig(**METHODS[method], exit_policy="fixed", k=4)]
    if method == "ngram":
        configs.append(DecodeConfig())
    for config in configs:
        decoder = BatchedDecoder(default_model, config, draft)
        for first in range(0, 2 * BATCH, BATCH):
            out = decoder.generate(prompt_ids[first:first + BATCH], MAX_NEW, time.perf_counter)
            assert [g.tokens for g in out.rows] == baseline_tokens[first:first + BATCH]
