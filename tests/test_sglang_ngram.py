"""SGLang's NGRAM (`sglang_ngram`): our corpus against SGLang's own C++ (sglang 0.5.23,
compiled from its wheel: sglang_oracle.py) tree for tree, losslessness on a tiny random
Llama, exact replay, the cross-request trie and its history, refusals and the SGLang
export (the default model's cases are in test_lossless_real.py and test_replay_exact.py)."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
import yaml
from sglang_oracle import OracleCorpus, load_oracle
from test_exports import error_of, frozen
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.schema.methods import get_method
from autotune.exports import export, expressible
from autotune.methods.sglang_ngram.corpus import NgramCorpus, NgramParams
from autotune.methods.sglang_ngram.drafter import NgramState
from autotune.replay.reference import Reference
from autotune.replay.simulate import simulate
from autotune.workloads.prompts import Prompt, encode_prompt

MAX_NEW = 24
PROMPTS = [Prompt("t1 t2 t3 t4 t1 t2 t3", "code", "p0"), Prompt("t5 t6 t7 t5 t6", "code", "p1"),
           Prompt("t9 t8 t9 t8 t9 t1 t2", "chat", "p2"), Prompt("t1 t2 t3 t5", "chat", "p3")]


def _paths(tokens: list[int], parents: list[int]) -> Counter:
    """A tree as the multiset of its nodes' token paths (sibling order aside: SGLang's
    follows a hash map's, which verification does not read)."""
    out: list[tuple[int, ...]] = [()]
    for token, parent in zip(tokens[1:], parents):
        out.append(out[parent] + (token,))
    return Counter(out[1:])


CASES = [  # (capacity, depth, min breadth, max breadth, draft tokens, match type)
    (10_000_000, 18, 1, 10, 12, "BFS"), (10_000_000, 6, 1, 3, 8, "BFS"),
    (10_000_000, 4, 2, 2, 5, "BFS"), (60, 5, 1, 4, 7, "BFS"),
    (10_000_000, 18, 1, 10, 12, "PROB"), (10_000_000, 5, 1, 2, 9, "PROB"),
    (60, 6, 1, 3, 6, "PROB"), (10_000_000, 2, 1, 1, 2, "BFS"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[5]}-cap{c[0]}-d{c[1]}-b{c[2]}.{c[3]}-n{c[4]}"
                                             for c in CASES])
def test_trees_equal_sglangs_own_corpus_step_by_step(case):
    """Requests served in order over one shared trie, as ngram_worker.py drives it:
    each step matches the tail (the whole length given, so anchors advance), then
    inserts it; a finished request's anchors are erased. Small vocabularies repeat, so
    trees branch and tie; capacity 60 evicts."""
    lib = load_oracle()
    capacity, depth, low, high, n, match = case
    oracle = OracleCorpus(lib, capacity, depth, low, high, n, match)
    ours = NgramCorpus(NgramParams(depth, low, high, n, match, capacity))
    rng = random.Random(str(case))
    steps = drafted = 0
    try:
        for request in range(6):
            vocab = rng.choice([3, 5, 8])
            sequence = [rng.randrange(vocab) for _ in range(rng.randrange(40, 90))]
            length = rng.randrange(2, 20)
            while length <= len(sequence):
                tail = sequence[max(0, length - depth):length]
                want = oracle.draft(request, tail, length)
                got = ours.draft(request, tail, length)
                assert got.tokens[0] == want[0][0] == tail[-1]
                assert _paths(got.tokens, got.parents) == _paths(*want), (request, length)
                oracle.insert(tail)
                ours.insert(tail)
                steps += 1
                drafted += sum(1 for t in want[0][1:] if t)
                # A step emits 1..n tokens; now and then a re-match of the same length.
                length += rng.choice([0, 1, 1, 2, 3, n])
            oracle.erase(request)
            ours.forget(request)
    finally:
        oracle.close()
    assert steps > 60 and drafted > steps // 2     # the trees were not all padding
    assert (ours.evicted > 0) == (capacity < 1000)     # the small trie evicted


def test_a_fresh_match_can_differ_from_the_advanced_anchors():
    """SGLang advances a request's anchors from the last step; a suffix that entered the
    trie since is found only by a rebuild. Both corpora agree on that difference."""
    lib = load_oracle()
    for fresh_request in (False, True):
        oracle = OracleCorpus(lib, 1000, 4, 1, 2, 5, "BFS")
        ours = NgramCorpus(NgramParams(4, 1, 2, 5, "BFS", 1000))
        try:
            trees = []
            for corpus, draft, insert in ((oracle, oracle.draft, oracle.insert),
                                          (ours, lambda *a: ours.draft(*a), ours.insert)):
                draft(0, [1, 2], 2)
                insert([1, 2])          # now 1 -> 2 is in the trie, and so is 2
                insert([7, 3])
                tree = draft(1 if fresh_request else 0, [1, 2, 7], 3)
                trees.append(tree if isinstance(tree, tuple) else (tree.tokens, tree.parents))
            assert _paths(*trees[0]) == _paths(*trees[1])
        finally:
            oracle.close()


def test_parameters_are_checked_as_sglang_does():
    for bad in (dict(max_trie_depth=1), dict(min_bfs_breadth=0),
                dict(min_bfs_breadth=3, max_bfs_breadth=2), dict(match_type="DFS")):
        with pytest.raises(ValueError):
            NgramParams(**bad)
    for bad, line in ((dict(sglang_ngram_max_trie_depth=1), "at least 2"),
                      (dict(sglang_ngram_min_bfs_breadth=4, sglang_ngram_max_bfs_breadth=2),
                       "exceeds"),
                      (dict(sglang_ngram_match_type="DFS"), "BFS, PROB"),
                      (dict(exit_policy="confidence"), "exit_policy=fixed"),
                      (dict(tree_width=2, tree_depth=3), "no tree knobs")):
        with pytest.raises(AutotuneError, match=line) as error:
            DecodeConfig(method="sglang_ngram", **bad).validate()
        assert "\n" not in str(error.value)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0, scale=2.0)


def _config(**knobs) -> DecodeConfig:
    return DecodeConfig(method="sglang_ngram", engine="sglang", **{"k": 5, **knobs})


@pytest.mark.parametrize("knobs", [{}, {"sglang_ngram_match_type": "PROB"},
                                   {"k": 2, "sglang_ngram_max_trie_depth": 3,
                                    "sglang_ngram_max_bfs_breadth": 1}])
def test_greedy_trees_are_lossless_verified_whole_and_replay_round_by_round(target, knobs):
    config = _config(**knobs)
    baseline = SpeculativeDecoder(target, DecodeConfig())
    decoder = SpeculativeDecoder(target, config)
    source = get_method("sglang_ngram").replay_factory()(target, None)
    source.prepare(config, [])
    accepted = 0
    for prompt in PROMPTS:          # in order: the arm's trie grows from request to request
        ids = encode_prompt(target.tokenizer, prompt)
        expected = baseline.generate(ids, MAX_NEW, time.perf_counter).tokens
        generation = decoder.generate(ids, MAX_NEW, time.perf_counter)
        assert generation.tokens == expected
        # SGLang verifies num_draft_tokens every step, the last ones included.
        assert all(r.drafted == config.k and r.verified == config.k + 1
                   for r in generation.rounds)
        accepted += sum(r.accepted for r in generation.rounds)
        ref = Reference(prompt.prompt_id, prompt.category, ids, expected)
        replayed = simulate(source.track(config, ref), config, ref, MAX_NEW)
        assert ([(r.drafted, r.accepted, r.emitted, r.draft_depth) for r in generation.rounds]
                == [(r.drafted, r.accepted, r.emitted, r.depth) for r in replayed])
    assert accepted > 0


def test_sampled_decoding_verifies_the_whole_tree_every_round(target):
    """Under sampling the deterministic tree goes through the multi-candidate rule: every
    round still verifies all k nodes, and the run ends within the budget."""
    import torch

    config = _config(temperature=1.0)
    decoder = SpeculativeDecoder(target, config)
    for prompt in PROMPTS[:2]:
        ids = encode_prompt(target.tokenizer, prompt)
        out = decoder.generate(ids, MAX_NEW, time.perf_counter,
                               generator=torch.Generator().manual_seed(0))
        assert 1 <= len(out.tokens) <= MAX_NEW
        assert out.rounds and all(r.drafted == config.k and r.verified == config.k + 1
                                  for r in out.rounds)


def test_a_warm_history_equals_serving_it(target):
    """`absorb` replays a served request's steps along its output: the next request's
    rounds equal those after serving the first for real."""
    config = _config()
    served = SpeculativeDecoder(target, config)
    warmed = SpeculativeDecoder(target, config)
    first, second = (encode_prompt(target.tokenizer, p) for p in PROMPTS[:2])
    response = served.generate(first, MAX_NEW, time.perf_counter).tokens
    warmed.absorb(first, response, MAX_NEW)
    rounds = [[(r.drafted, r.accepted) for r in d.generate(second, MAX_NEW,
                                                           time.perf_counter).rounds]
              for d in (served, warmed)]
    assert rounds[0] == rounds[1]
    assert isinstance(warmed.shared, NgramState)
    warmed.forget()
    assert not warmed.shared.corpus.root.children


def test_sglang_ngram_exports_to_sglang_only():
    doc = frozen(method="sglang_ngram", engine="sglang", k=7, sglang_ngram_max_trie_depth=12,
                 sglang_ngram_min_bfs_breadth=2, sglang_ngram_max_bfs_breadth=5,
                 sglang_ngram_match_type="PROB", sglang_ngram_capacity=100000)
    assert expressible(doc) == ["sglang"]
    result = export(doc, "sglang")
    spec = yaml.safe_load(result.files["sglang/sglang.yaml"])
    assert {k: v for k, v in spec.items() if k.startswith("speculative")} == {
        "speculative-algorithm": "NGRAM", "speculative-num-draft-tokens": 8,
        "speculative-ngram-max-trie-depth": 12, "speculative-ngram-min-bfs-breadth": 2,
        "speculative-ngram-max-bfs-breadth": 5, "speculative-ngram-match-type": "PROB",
        "speculative-ngram-capacity": 100000}
    for fmt in ("vllm", "trtllm", "hf", "llama_server"):
        assert "method=sglang_ngram" in error_of(fmt, doc, lossy=True)


def test_the_agreement_scorer_reads_the_first_level():
    ids = [3, 1, 2, 3, 1, 2, 4, 3, 1, 2]
    scored = get_method("sglang_ngram").scorer_factory()(None, _config(k=3), None)(ids)
    assert scored[0] == -1 and len(scored) == len(ids)     # an empty trie: padding only
    assert scored[4] == 2            # "1" was followed by "2" before


def test_batched_decoding_refuses_its_trees_in_one_line(target):
    from autotune.decoding.batched import BatchedDecoder

    with pytest.raises(AutotuneError, match="drafts its own trees") as error:
        BatchedDecoder(target, _config())
    assert "\n" not in str(error.value)
