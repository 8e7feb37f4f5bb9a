"""The batched decoder: every row equals its own single-row greedy output (float32), for
every chain method and exit policy, with ragged prompts and rows finishing at different
rounds; sampled rows follow the single-row decoder's draws; trees and HF's forward are
refused with one line."""

from __future__ import annotations

import time

import pytest
import test_sampling_e2e as e2e
import torch
from tiny import gpt2_model, tiny_llama, tiny_loaded

from autotune.common.errors import AutotuneError
from autotune.decoding.batched import BatchedDecoder
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder

EOS = 52      # ends row 3 at its prefill token and row 1 mid-way (seed 3, scale 4)
MAX_NEW = 24
# Different lengths (ragged caches); repeated patterns so n-gram lookup finds matches.
PROMPTS = [
    [1, 2, 3, 4, 1, 2, 3, 4, 1, 2],
    [7, 8, 9],
    [10, 11, 12, 13, 14, 15, 16, 10, 11, 12, 13, 14, 15, 16, 10, 11],
    [20, 21, 20, 21, 20],
    [30, 31, 32, 33, 34, 35],
]
METHODS = {
    "none": dict(method="none"),
    "ngram": dict(method="ngram", ngram_min=1, ngram_max=3),
    "layer_skip": dict(method="layer_skip", attn_skip=(1,), mlp_skip=(2,)),
    "sorted_exit": dict(method="sorted_exit", exits=(1, 2), thresholds=(0.5,)),
    "draft_model": dict(method="draft_model"),
}
POLICIES = {
    "fixed": dict(exit_policy="fixed", k=3),
    "confidence": dict(exit_policy="confidence", k=5, gamma=0.4),
    "adaptive": dict(exit_policy="adaptive", k=6, gamma=0.5),
    "heuristic": dict(exit_policy="heuristic", k=2),
}


@pytest.fixture(scope="module", params=[None, EOS], ids=["no-eos", "eos"])
def target(request):
    # Scaled weights: peaked distributions, so drafts are often accepted and, with an
    # EOS, rows stop at different rounds (the batch shrinks and its cache is compacted).
    return tiny_llama(seed=3, layers=4, eos=request.param, scale=4.0)


@pytest.fixture(scope="module")
def draft():
    return tiny_llama(seed=4, layers=2, scale=4.0)


def _single(target, config, draft, prompt, generator=None):
    return SpeculativeDecoder(target, config, draft).generate(
        prompt, MAX_NEW, time.perf_counter, generator).tokens


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("method", list(METHODS))
def test_every_row_equals_its_single_row_greedy_output(method, policy, target, draft):
    config = DecodeConfig(**METHODS[method], **(POLICIES[policy] if method != "none" else {}))
    uses_draft = draft if method == "draft_model" else None
    expected = [_single(target, DecodeConfig(), None, p) for p in PROMPTS]
    out = BatchedDecoder(target, config, uses_draft).generate(PROMPTS, MAX_NEW, time.perf_counter)
    assert [g.tokens for g in out.rows] == expected
    assert out.decoded == sum(len(t) - 1 for t in expected)
    # One verify pass per round over the rows still running, never more rows than prompts.
    assert out.rounds and all(1 <= r.rows <= len(PROMPTS) for r in out.rounds)
    assert sum(r.emitted for r in out.rounds) == out.decoded
    if method != "none":
        assert sum(r.drafted for r in out.rounds) > 0


def test_rows_finish_at_different_rounds_and_leave_the_batch():
    target = tiny_llama(seed=3, layers=4, eos=EOS, scale=4.0)
    lengths = [len(_single(target, DecodeConfig(), None, p)) for p in PROMPTS]
    assert len(set(lengths)) > 1, lengths       # the fixture must make rows end apart
    out = BatchedDecoder(target, DecodeConfig(method="ngram", k=3)).generate(
        PROMPTS, MAX_NEW, time.perf_counter)
    assert lengths[3] == 1                      # row 3's prefill token is its EOS
    assert out.rounds[0].rows == len(PROMPTS) - 1
    assert out.rounds[-1].rows < len(PROMPTS) - 1
    assert [r.rows for r in out.rounds] == sorted((r.rows for r in out.rounds), reverse=True)


def test_a_verify_pass_is_as_wide_as_the_round_longest_draft():
    target = tiny_llama(seed=3, layers=4, scale=4.0)
    out = BatchedDecoder(target, DecodeConfig(method="ngram", k=4)).generate(
        PROMPTS, MAX_NEW, time.perf_counter)
    per_row = [g.rounds for g in out.rows]
    for i, r in enumerate(out.rounds):
        longest = max(rounds[i].drafted for rounds in per_row if i < len(rounds))
        assert r.width == 1 + longest


def test_forward_rows_matches_each_row_alone():
    """Ragged rows in one pass give each row the logits its own pass gives."""
    model = tiny_llama(seed=1, layers=3)
    forward = model.forward
    prompts = [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10]]
    new = torch.tensor([[11, 12, 13], [14, 15, 16], [17, 18, 19]])
    batch = forward.new_cache(3, 32)
    alone = []
    for b, prompt in enumerate(prompts):
        forward.forward(torch.tensor([prompt]), batch.rows(b, b + 1))
        own = forward.new_cache(1, 32)
        forward.forward(torch.tensor([prompt]), own)
        alone.append(forward.forward(new[b:b + 1], own)[0])
    logits = forward.forward_rows(new, batch, [len(p) for p in prompts])
    for b in range(3):
        torch.testing.assert_close(logits[b], alone[b], rtol=1e-5, atol=1e-5)


def test_batch_of_one_samples_as_the_single_row_decoder():
    """Same seed, same draws in the same order: a batch of one is the single-row run."""
    target, draft = tiny_llama(seed=3, layers=4), tiny_llama(seed=4, layers=2)
    config = DecodeConfig(method="draft_model", k=3, temperature=1.0)
    for prompt in PROMPTS[:3]:
        expected = _single(target, config, draft, prompt, torch.Generator().manual_seed(7))
        out = BatchedDecoder(target, config, draft).generate(
            [prompt], MAX_NEW, time.perf_counter, torch.Generator().manual_seed(7))
        assert out.rows[0].tokens == expected


@pytest.mark.parametrize("config", [
    DecodeConfig(method="ngram", k=3, temperature=1.0),
    DecodeConfig(method="layer_skip", attn_skip=(1,), mlp_skip=(2,), k=3, temperature=1.0),
], ids=["ngram", "layer_skip"])
def test_sampled_rows_keep_the_target_distribution(config):
    """Rows of a batch of three (the middle one another prompt) sample tokens 2-3 from
    the target's exact law (test_sampling_e2e's set-up and bound), with drafts both
    accepted and rejected in the first round."""
    target = e2e.target.__wrapped__()
    p1, p2, p3 = e2e._target_tables(target.hf_model)
    law = e2e._law_of_positions_2_3(p1, p2, p3)
    runs = e2e.N // 2                       # two sampled rows of the prompt per batch
    bound = e2e._null_bound(law, 2 * runs)
    decoder = BatchedDecoder(target, config)
    counts = torch.zeros(e2e.V, e2e.V, dtype=torch.float64)
    accepted = 0
    for i in range(runs):
        out = decoder.generate([e2e.PROMPT, [2, 3, 2], e2e.PROMPT], e2e.MAX_NEW,
                               time.perf_counter, torch.Generator().manual_seed(i))
        for row in (out.rows[0], out.rows[2]):
            counts[row.tokens[1], row.tokens[2]] += 1
            assert row.rounds[0].drafted == 1
            accepted += row.rounds[0].accepted
    assert 0.05 * 2 * runs < accepted < 0.95 * 2 * runs
    tv = e2e._tv(law, counts / (2 * runs))
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


def test_trees_and_hf_forward_are_refused():
    target = tiny_llama(seed=3, layers=4)
    with pytest.raises(AutotuneError, match="chains only"):
        BatchedDecoder(target, DecodeConfig(method="layer_skip", attn_skip=(1,),
                                            tree_width=2, tree_depth=2))
    with pytest.raises(AutotuneError, match="compact Llama-family forward"):
        BatchedDecoder(tiny_loaded(gpt2_model()), DecodeConfig(method="ngram"))
    with pytest.raises(AutotuneError, match="non-empty prompt"):
        BatchedDecoder(target, DecodeConfig()).generate([[1], []], 4, time.perf_counter)
