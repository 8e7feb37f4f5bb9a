"""Greedy losslessness of draft trees on the real default model: trees verified in one
pass with a tree mask, depth positions and cache compaction give the AR baseline's tokens
exactly (float32), for layer-skip, early-exit and draft-model drafters in four shapes
(tests/lossless.py)."""

from __future__ import annotations

import time

import pytest
from lossless import MAX_NEW, METHODS, USES_DRAFT, baseline_tokens, prompt_ids  # noqa: F401

from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder

# A small static tree in the EAGLE/Medusa `choices` format (child ranks along a path),
# shaped like the heads of EAGLE's default trees: wide near the root, one deep spine.
STATIC_CHOICES = ((0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0),
                  (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0), (0, 0, 0, 0))
TREE_SHAPES = {
    "chain": dict(tree_width=1, tree_depth=5),
    "wide_shallow": dict(tree_width=6, tree_depth=2, tree_tokens=24),
    "narrow_deep": dict(tree_width=2, tree_depth=7, tree_tokens=16),
    "static": dict(tree_choices=STATIC_CHOICES),
}
TREE_METHODS = {
    "layer_skip": METHODS["layer_skip"],
    "sorted_exit": METHODS["sorted_exit"],
    "draft_model": METHODS["draft_model"],
}
# Each (method, shape) case decodes TREE_PROMPTS prompts of as many categories, starting
# at its own offset in tests/lossless.py's one-prompt-per-category list: every case sees
# several categories, and the cases together see them all (12 cases x 3 = 36 decodes
# over the 13 categories, each category two or three times).
TREE_PROMPTS = 3
CASES = [(method, shape) for method in TREE_METHODS for shape in TREE_SHAPES]


def _case_prompts(method: str, shape: str, n_prompts: int) -> list[int]:
    """The prompt indices the case decodes (rotating over the categories)."""
    start = CASES.index((method, shape)) * TREE_PROMPTS
    return [(start + j) % n_prompts for j in range(TREE_PROMPTS)]


@pytest.mark.parametrize("shape", list(TREE_SHAPES))
@pytest.mark.parametrize("method", list(TREE_METHODS))
def test_greedy_tree_lossless(method, shape, default_model, truncated_draft, prompt_ids,
                              baseline_tokens):
    """Trees verified in one pass with a tree mask, depth positions and cache
    compaction give the AR tokens exactly, over real prompts of several categories."""
    config = DecodeConfig(**TREE_METHODS[method], **TREE_SHAPES[shape])
    draft = truncated_draft if method in USES_DRAFT else None
    decoder = SpeculativeDecoder(default_model, config, draft)
    accepted = side = 0
    for index in _case_prompts(method, shape, len(prompt_ids)):
        ids, expected = prompt_ids[index], baseline_tokens[index]
        generation = decoder.generate(ids, MAX_NEW, time.perf_counter)
        assert generation.tokens == expected
        accepted += sum(r.accepted for r in generation.rounds)
        # Nodes are numbered level by level, so in a tree with side branches an accepted
        # path of two or more nodes is never contiguous: the compaction moved entries.
        side += sum(1 for r in generation.rounds
                    if r.accepted >= 2 and r.drafted > r.draft_depth)
    assert accepted > 0
    if shape != "chain":
        assert side > 0
