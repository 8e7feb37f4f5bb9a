"""What the greedy-losslessness files on the real default model share (float32): the
methods and exit policies, the prompts and their AR baseline.

Every method x every exit policy (test_lossless_methods.py, test_lossless_real.py), every
tree shape (test_lossless_trees.py), batches and HF's forward (test_lossless_real.py) must
produce exactly the AR baseline's tokens on real prompts across categories. The files are
split so that pytest-xdist's `--dist loadfile` can run them on different workers; the AR
baseline is decoded once per run for all of them (conftest.py's `ar_reference`)."""

from __future__ import annotations

import time

import pytest
from conftest import real_prompts

from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.models.loading import LoadedModel
from autotune.workloads.prompts import encode_prompt

MAX_NEW = 16
# One prompt of each of Spec-Bench's 13 categories (real_prompts goes round-robin), so
# every method sees every category; each policy takes its own stride of them.
N_PROMPTS = 13

METHODS = {
    "layer_skip": dict(method="layer_skip", attn_skip=(3, 8, 13, 19, 24), mlp_skip=(5, 20)),
    "sorted_exit": dict(method="sorted_exit", exits=(8, 16, 24), thresholds=(0.9, 0.6)),
    "sorted_exit_draft": dict(method="sorted_exit", exits=(4, 8, 10), thresholds=(0.8, 0.5)),
    "draft_model": dict(method="draft_model"),
    "ngram": dict(method="ngram", ngram_min=1, ngram_max=3),
    "suffix": dict(method="suffix"),
    "sa": dict(method="sa"),
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
    assert len({p.category for p in prompts}) == N_PROMPTS
    return [encode_prompt(default_model.tokenizer, p) for p in prompts]


@pytest.fixture(scope="module")
def baseline_tokens(ar_reference, prompt_ids: list[list[int]]) -> list[list[int]]:
    return ar_reference(prompt_ids, MAX_NEW)


def check_greedy_lossless(method: str, default_model: LoadedModel,
                          truncated_draft: LoadedModel, prompt_ids: list[list[int]],
                          baseline_tokens: list[list[int]]) -> None:
    """Each method under each policy, each policy on its own stride of the prompts: every
    pair sees N_PROMPTS / len(POLICIES) prompts (3 or 4) of as many categories and every
    method all N_PROMPTS categories, at a quarter of the cost of every pair on every
    prompt."""
    draft = truncated_draft if method in USES_DRAFT else None
    pairs = list(zip(prompt_ids, baseline_tokens))
    accepted_by_policy = {}
    for stride, (policy, knobs) in enumerate(POLICIES.items()):
        decoder = SpeculativeDecoder(default_model, DecodeConfig(**METHODS[method], **knobs),
                                     draft)
        drafted = accepted = 0
        for ids, expected in pairs[stride::len(POLICIES)]:
            generation = decoder.generate(ids, MAX_NEW, time.perf_counter)
            assert generation.tokens == expected, (policy, ids)
            drafted += sum(r.drafted for r in generation.rounds)
            accepted += sum(r.accepted for r in generation.rounds)
        # Every pair must exercise speculation: drafts were made and (but for n-gram
        # copies, which may all be right in 16 tokens) some were rejected.
        assert drafted > 0, policy
        if method not in ("ngram", "suffix", "sa"):
            assert accepted < drafted, policy
        accepted_by_policy[policy] = accepted
    # And the accept path ran for every method. The truncated draft (first 10 layers)
    # agrees with the target on about 2% of tokens, so that is asked of the method
    # across its policies, not of each pair.
    assert sum(accepted_by_policy.values()) > 0, accepted_by_policy
