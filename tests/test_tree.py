"""Draft trees: structure (mask, positions, cache compaction), the verification rules
(greedy path walk, the multi-candidate sampling rule, exactly), tree construction
against a brute-force reference, and end-to-end greedy losslessness and sampling on
tiny models. The real-model losslessness lives in test_lossless_real.py."""

from __future__ import annotations

import itertools
import time

import pytest
import torch
from tiny import llama_model, one_thread, tiny_loaded  # noqa: F401  (autouse fixture)

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.decoding.tree import DraftTree, compact_cache
from autotune.decoding.verify import (
    candidate_acceptance,
    greedy_tree_verify,
    tree_rejection_sample,
)
from autotune.models.hf_forward import HFForward
from autotune.models.llama import KVCache
from autotune.models.loading import LoadedModel

#        root(0)
#       /      \
#     1(a)     2(b)
#    /   \       \
#  3(c)  4(d)    5(e)
#   |
#  6(f)
PARENTS = [0, 0, 1, 1, 2, 3]
DEPTHS = [1, 1, 2, 2, 2, 3]
TOKENS = [10, 11, 12, 13, 14, 15]


def _tree() -> DraftTree:
    return DraftTree(torch.tensor([TOKENS]), PARENTS, DEPTHS, [0.5] * 6)


def test_mask_and_positions_of_a_known_tree():
    tree = _tree()
    expected = torch.tensor([
        # 0  1  2  3  4  5  6
        [1, 0, 0, 0, 0, 0, 0],   # root
        [1, 1, 0, 0, 0, 0, 0],   # 1
        [1, 0, 1, 0, 0, 0, 0],   # 2
        [1, 1, 0, 1, 0, 0, 0],   # 3
        [1, 1, 0, 0, 1, 0, 0],   # 4
        [1, 0, 1, 0, 0, 1, 0],   # 5
        [1, 1, 0, 1, 0, 0, 1],   # 6
    ], dtype=torch.bool)
    assert torch.equal(tree.attention_mask(), expected)
    assert tree.position_ids(40).tolist() == [40, 41, 41, 42, 42, 42, 43]
    assert tree.children() == [[1, 2], [3, 4], [5], [6], [], [], []]
    assert tree.depth == 3 and tree.size == 6
    assert tree.path_tokens([1, 3, 6]) == [10, 12, 15]


def test_compact_cache_moves_the_accepted_path_where_plain_decoding_puts_it():
    cache = KVCache(n_layers=2, batch=1, n_kv_heads=1, max_len=16, head_dim=3,
                    dtype=torch.float32, device=torch.device("cpu"))
    base = 5
    # Every position's keys/values carry their own index; values are negated.
    cache.k[:] = torch.arange(16, dtype=torch.float32)[None, None, None, :, None]
    cache.v[:] = -cache.k
    cache.length = base + 7                          # root + 6 nodes written
    compact_cache(cache, base, [2, 5])               # root -> node 2 -> node 5
    assert cache.length == base + 3
    assert cache.k[0, 0, 0, : base + 3, 0].tolist() == [0, 1, 2, 3, 4, 5, 7, 10]
    assert cache.v[1, 0, 0, : base + 3, 2].tolist() == [-0, -1, -2, -3, -4, -5, -7, -10]
    # A path that is already contiguous moves nothing and only crops.
    cache.length = base + 7
    cache.k[:] = torch.arange(16, dtype=torch.float32)[None, None, None, :, None]
    compact_cache(cache, base, [1, 3, 6][:2])
    assert cache.length == base + 3
    assert cache.k[0, 0, 0, base:base + 3, 0].tolist() == [5, 6, 8]


def test_greedy_tree_verify_walks_the_longest_agreeing_path():
    tree = _tree()
    children = tree.children()
    # Target argmax after each node (index = verify index).
    target = [10, 12, 14, 15, 0, 0, 99]
    assert greedy_tree_verify(children, TOKENS, target) == ([1, 3, 6], 99)
    target = [11, 12, 14, 15, 0, 7, 99]             # root picks b, then b's child e
    assert greedy_tree_verify(children, TOKENS, target) == ([2, 5], 7)
    target = [42, 12, 14, 15, 0, 7, 99]             # nothing matches at the root
    assert greedy_tree_verify(children, TOKENS, target) == ([], 42)
    target = [10, 13, 14, 15, 5, 7, 99]             # a -> d, a leaf: bonus after d
    assert greedy_tree_verify(children, TOKENS, target) == ([1, 4], 5)


def _output_law_deterministic(p: torch.Tensor, candidates: list[int]) -> torch.Tensor:
    accept, residual = candidate_acceptance(p, candidates)
    law = torch.zeros_like(p)
    reach = 1.0
    for x, a in zip(candidates, accept):
        law[x] += reach * a
        reach *= 1.0 - a
    return law + reach * residual


@pytest.mark.parametrize("seed", range(6))
def test_multi_candidate_rule_is_exact_for_deterministic_candidates(seed):
    """Top-k candidates (EAGLE's trees): the output law equals p exactly, for every
    candidate set, including tokens p rules out and sets that hold all of p's mass."""
    gen = torch.Generator().manual_seed(seed)
    v = 6
    p = torch.rand(v, generator=gen, dtype=torch.float64) ** 3
    p[seed % v] = 0.0                                 # a token the target never emits
    p /= p.sum()
    for m in range(1, v + 1):
        for candidates in itertools.permutations(range(v), m):
            law = _output_law_deterministic(p, list(candidates))
            assert torch.allclose(law, p, atol=1e-12), (candidates, law, p)
    # Acceptance is the mass of the candidates: the most an exact rule can reach.
    accept, _ = candidate_acceptance(p, [0, 1])
    assert accept[0] + (1 - accept[0]) * accept[1] == pytest.approx(float(p[0] + p[1]))


@pytest.mark.parametrize("seed", range(4))
def test_multi_candidate_rule_is_exact_for_candidates_sampled_without_replacement(seed):
    """Recursive rejection sampling: x_1..x_m drawn from q without replacement. The
    output law, summed over every ordered draw weighted by its probability, is p."""
    gen = torch.Generator().manual_seed(100 + seed)
    v = 5
    p = torch.softmax(2 * torch.randn(v, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(v, generator=gen, dtype=torch.float64), -1)
    q[seed % v] = 0.0                                  # a token the draft never proposes
    q /= q.sum()
    for m in (1, 2, 3):
        law = torch.zeros(v, dtype=torch.float64)
        for draw in itertools.permutations(range(v), m):
            prob, left = 1.0, q.clone()
            for x in draw:                             # probability of this ordered draw
                prob *= float(left[x] / left.sum())
                left[x] = 0.0
            if prob == 0.0:
                continue
            accept, residual = candidate_acceptance(p, list(draw), q)
            reach = 1.0
            for x, a in zip(draw, accept):
                law[x] += prob * reach * a
                reach *= 1.0 - a
            law += prob * reach * residual
        assert torch.allclose(law, p, atol=1e-12), (m, law, p)


def test_a_wrong_rule_fails_the_exact_check():
    """The check has power: accepting with p(x)/q(x) but forgetting to remove a
    rejected candidate from the residual gives a law that is not p."""
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    accept, _ = candidate_acceptance(p, [0, 1])
    law = torch.zeros(3, dtype=torch.float64)
    law[0] += accept[0]
    law[1] += (1 - accept[0]) * accept[1]
    law += (1 - accept[0]) * (1 - accept[1]) * p        # the bug: residual = p
    assert not torch.allclose(law, p, atol=1e-3)


def test_tree_rejection_sample_draws_the_rule_it_computes():
    """The sampler's empirical law on a one-level tree matches p (seeded, N draws)."""
    p_root = torch.tensor([0.05, 0.4, 0.25, 0.2, 0.1])
    children = [[1, 2], [], []]
    node_tokens = [1, 3]                                 # two candidates: tokens 1 and 3
    p = torch.stack([p_root, torch.full((5,), 0.2), torch.full((5,), 0.2)])
    gen = torch.Generator().manual_seed(0)
    n = 20000
    counts = torch.zeros(5)
    paths = 0
    for _ in range(n):
        path, token = tree_rejection_sample(children, node_tokens, lambda i: p[i], gen)
        first = node_tokens[path[0] - 1] if path else token
        counts[first] += 1
        paths += bool(path)
    tv = 0.5 * float((counts / n - p_root).abs().sum())
    assert tv < 0.015, (counts / n, p_root)
    assert paths / n == pytest.approx(0.6, abs=0.02)     # p(1) + p(3)


# ------------------------------------------------------------ decoding, tiny models
SHAPES = {
    "chain": dict(tree_width=1, tree_depth=4),
    "wide_shallow": dict(tree_width=5, tree_depth=2),
    "narrow_deep": dict(tree_width=2, tree_depth=6, tree_tokens=14),
    "static": dict(tree_choices=((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0),
                                 (0, 0, 1), (0, 0, 0, 0))),
}
METHODS = {
    "layer_skip": dict(method="layer_skip", attn_skip=(1,), mlp_skip=(2,)),
    "draft_model": dict(method="draft_model"),
    "sorted_exit": dict(method="sorted_exit", exits=(1, 2, 4), thresholds=(0.3, 0.2)),
    # S2D over a separate draft stack, with its own cache.
    "sorted_exit_draft": dict(method="sorted_exit", exits=(1, 2), thresholds=(0.3,)),
}
USES_DRAFT = {"draft_model", "sorted_exit_draft"}


@pytest.fixture(scope="module")
def models():
    target = tiny_loaded(llama_model(seed=1, layers=4, vocab=64, scale=2.0))
    draft = tiny_loaded(llama_model(seed=2, layers=2, vocab=64, scale=2.0), "draft")
    twin = tiny_loaded(llama_model(seed=1, layers=4, vocab=64, scale=2.0), "twin")
    return target, draft, twin


PROMPTS = [[1, 5, 9, 3, 5, 9, 3, 7], [2, 4, 6, 8, 10, 12], [7] * 5 + [1, 2, 3]]


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("method", list(METHODS))
def test_greedy_tree_decoding_is_lossless_on_a_tiny_model(models, method, shape):
    target, draft, _ = models
    config = DecodeConfig(**METHODS[method], **SHAPES[shape])
    ar = SpeculativeDecoder(target, DecodeConfig())
    tree = SpeculativeDecoder(target, config, draft if method in USES_DRAFT else None)
    for prompt in PROMPTS:
        for max_new in (1, 2, 7, 30):              # budgets that cut trees short
            expected = ar.generate(prompt, max_new, time.perf_counter).tokens
            out = tree.generate(prompt, max_new, time.perf_counter)
            assert out.tokens == expected, (prompt, max_new)
            assert all(r.verified == r.drafted + 1 for r in out.rounds)
            assert all(r.draft_depth <= max_new - 1 for r in out.rounds)


def test_tree_shapes_are_what_the_config_says(models):
    target, draft, _ = models
    prompt = PROMPTS[0]
    for shape, nodes, depth in (("chain", 4, 4), ("wide_shallow", 5 + 25, 2),
                                ("narrow_deep", 14, None), ("static", 9, 4)):
        config = DecodeConfig(**METHODS["draft_model"], **SHAPES[shape])
        out = SpeculativeDecoder(target, config, draft).generate(prompt, 40, time.perf_counter)
        first = out.rounds[0]
        assert first.drafted == nodes and first.verified == nodes + 1, shape
        if depth is not None:
            assert first.draft_depth == depth, shape
        assert config.shape.tree_nodes == nodes


def test_a_draft_identical_to_the_target_is_always_accepted_along_a_static_chain(models):
    """Draft passes over tree levels see the right keys, positions and masks: with the
    target itself as the draft, the top-1 chain of a static tree (with side branches fed
    in the same passes) is accepted in full every round."""
    target, _, twin = models
    choices = ((0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1), (0, 0, 0), (0, 0, 1), (0, 0, 0, 0))
    for config, draft in ((DecodeConfig(method="draft_model", tree_choices=choices), twin),
                          (DecodeConfig(method="layer_skip", tree_choices=choices), None),
                          (DecodeConfig(method="sorted_exit", exits=(4,), tree_choices=choices),
                           None)):
        out = SpeculativeDecoder(target, config, draft).generate(PROMPTS[1], 41, time.perf_counter)
        assert [r.accepted for r in out.rounds] == [4] * 8, config.method


@torch.no_grad()
def _reference_dynamic_tree(hf_model, prompt: list[int], width: int, depth: int,
                            keep: int) -> set[tuple[int, ...]]:
    """EAGLE-2's expansion and rerank, computed by brute force: every node's draft
    distribution from a full forward of prompt + its path (the draft is the target)."""
    def log_probs(path: tuple[int, ...]) -> torch.Tensor:
        logits = hf_model(torch.tensor([prompt + list(path)])).logits[0, -1]
        return torch.log_softmax(logits.float(), -1)

    pool: dict[tuple[int, ...], float] = {}
    values, tokens = log_probs(()).topk(width)
    level = {(t,): v for v, t in zip(values.tolist(), tokens.tolist())}
    pool.update(level)
    frontier = sorted(level, key=lambda path: -level[path])[:width]
    for _ in range(1, depth):
        level = {}
        for path in frontier:
            values, tokens = log_probs(path).topk(width)
            for v, t in zip(values.tolist(), tokens.tolist()):
                level[path + (t,)] = pool[path] + v
        pool.update(level)
        frontier = sorted(level, key=lambda path: -level[path])[:width]
    ranked = sorted(pool, key=lambda path: (-pool[path], len(path)))
    return set(ranked[:keep])


def _tree_paths(tree: DraftTree) -> set[tuple[int, ...]]:
    tokens = tree.tokens[0].tolist()
    paths: list[tuple[int, ...]] = []
    for parent, token in zip(tree.parents, tokens):
        paths.append((paths[parent - 1] if parent else ()) + (token,))
    return set(paths)


def test_dynamic_tree_matches_a_brute_force_eagle2_expansion(models):
    from autotune.decoding.drafters.base import TokenChooser
    from autotune.methods.layer_skip.drafter import LayerSkipDrafter
    from autotune.decoding.tree_drafting import TreeDrafter

    target, _, _ = models
    prompt = PROMPTS[0]
    config = DecodeConfig(method="layer_skip", tree_width=3, tree_depth=4, tree_tokens=16)
    forward = target.forward
    cache = forward.new_cache(1, 64)
    with torch.inference_mode():
        forward.forward(torch.tensor([prompt[:-1]]), cache)
        drafter = LayerSkipDrafter(forward, cache, (), (), TokenChooser(0.0, 1.0, 64, None))
        tree = TreeDrafter(drafter, config, 64, torch.device("cpu")).propose(
            torch.tensor([prompt]), 10)
    assert cache.length == len(prompt) - 1               # the scratch was dropped
    assert tree.size == 16
    assert _tree_paths(tree) == _reference_dynamic_tree(target.hf_model, prompt, 3, 4, 16)
    # Verify order: parents first, depths non-decreasing.
    assert all(p < i for i, p in enumerate(tree.parents, start=1))
    assert tree.depths == sorted(tree.depths)


def test_tree_config_errors_are_one_line():
    cases = [
        (dict(method="ngram", tree_width=2, tree_depth=2), "cannot draft a tree"),
        (dict(method="layer_skip", tree_width=2, tree_depth=2, exit_policy="adaptive"),
         "exit_policy=fixed"),
        (dict(method="layer_skip", tree_width=2), "tree_depth"),
        (dict(method="layer_skip", tree_choices="0;0,0", tree_width=2, tree_depth=2), "not both"),
        (dict(method="layer_skip", tree_choices="0;1,0"), "no parent path"),
        (dict(method="layer_skip", tree_choices="0;0"), "twice"),
        (dict(method="layer_skip", tree_width=16, tree_depth=3), "tree_tokens <= 255"),
        (dict(method="layer_skip", tree_depth=3), "need tree_width"),
    ]
    for values, message in cases:
        with pytest.raises(AutotuneError, match=message) as info:
            config_from_mapping(values).validate()
        assert "\n" not in str(info.value)
    with pytest.raises(AutotuneError, match="tree_choices"):
        config_from_mapping({"tree_choices": "[[0], [x]]"})
    parsed = config_from_mapping({"method": "layer_skip", "tree_choices": "[[0], [0, 1]]"})
    assert parsed.tree_choices == ((0,), (0, 1)) and parsed.is_tree
    assert config_from_mapping({"tree_choices": "0;0,1;1"}).tree_choices == ((0,), (0, 1), (1,))


def test_trees_refused_on_the_hf_fallback(models):
    target, _, _ = models
    hf_target = LoadedModel(**{**vars(target), "forward": HFForward(target.hf_model)})
    with pytest.raises(AutotuneError, match="compact Llama-family forward"):
        SpeculativeDecoder(hf_target, DecodeConfig(method="draft_model", tree_width=2,
                                                   tree_depth=2), target)
