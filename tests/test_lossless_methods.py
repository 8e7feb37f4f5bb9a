"""Greedy losslessness on the real default model of the methods that draft with a model
(layers of the target, its early exits, a separate draft and that draft's exits): every
method x every exit policy produces exactly the AR baseline's tokens (float32) on real
prompts across categories (tests/lossless.py)."""

from __future__ import annotations

import pytest
from lossless import baseline_tokens, check_greedy_lossless, prompt_ids  # noqa: F401


@pytest.mark.parametrize("method", ["layer_skip", "sorted_exit", "sorted_exit_draft",
                                    "draft_model"])
def test_greedy_lossless(method, default_model, truncated_draft, prompt_ids, baseline_tokens):
    check_greedy_lossless(method, default_model, truncated_draft, prompt_ids, baseline_tokens)
