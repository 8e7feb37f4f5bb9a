"""TensorRT-LLM's public n-gram pool (`ngram_pool=public`): one pool of continuations
filed by every request, kept across requests per arm, replayed in serving order, and
exported as `is_public_pool` (tiny random Llamas)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_exports import frozen
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.schema.methods import get_method
from autotune.exports import export
from autotune.measure.measurement import measure_arms
from autotune.methods.ngram.drafter import MatchPool, PublicPool
from autotune.replay.reference import Reference
from autotune.replay.simulate import simulate
from autotune.workloads.prompts import Prompt, encode_prompt

MAX_NEW = 16
PROMPTS = [Prompt("t1 t2 t3 t4 t1 t2", "code", "p0"), Prompt("t5 t6 t7 t5 t6", "code", "p1"),
           Prompt("t1 t2 t3 t4 t1 t2", "code", "p2"), Prompt("t9 t8 t9 t8 t9", "chat", "p3")]


def _config(pool: str) -> DecodeConfig:
    return DecodeConfig(method="ngram", k=4, ngram_max=3, engine="trtllm", ngram_pool=pool)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0, scale=2.0)


def _ids(target, prompt: Prompt) -> list[int]:
    return encode_prompt(target.tokenizer, prompt)


def test_a_public_pool_is_shared_by_every_request_and_a_private_one_is_not(target):
    baseline = SpeculativeDecoder(target, DecodeConfig())
    expected = [baseline.generate(_ids(target, p), MAX_NEW, time.perf_counter).tokens
                for p in PROMPTS]
    accepted = {}
    for pool in ("private", "public"):
        decoder = SpeculativeDecoder(target, _config(pool))
        assert decoder.stateful == (pool == "public")
        accepted[pool] = []
        for prompt, tokens in zip(PROMPTS, expected):
            generation = decoder.generate(_ids(target, prompt), MAX_NEW, time.perf_counter)
            assert generation.tokens == tokens
            accepted[pool].append(sum(r.accepted for r in generation.rounds))
    # p2 repeats p0: the public pool holds p0's continuations from the first round on.
    assert accepted["public"][2] > accepted["private"][2]
    assert accepted["public"][0] == accepted["private"][0]


def test_the_pool_files_as_tensorrt_llm_does():
    """NGramPoolManager.get_draft_tokens (ngram.py @ 0249976, is_keep_all, is_use_oldest):
    a pattern's shorter continuations are dropped when a longer one is filed, and the
    oldest of the rest is drafted; a public pool sees every request's patterns."""
    shared: dict = {}
    first = MatchPool(2, 3, shared)
    assert first.draft([5, 6, 7, 5, 6], 3) == [7, 5, 6]
    second = MatchPool(2, 3, shared)            # another request, the same pool
    assert second.draft([1, 5, 6], 3) == [7, 5, 6]
    assert MatchPool(2, 3).draft([1, 5, 6], 3) == []


def test_absorb_files_a_request_as_serving_it_would(target):
    config = _config("public")
    served = SpeculativeDecoder(target, config)
    absorbed = SpeculativeDecoder(target, config)
    first, second = _ids(target, PROMPTS[0]), _ids(target, PROMPTS[2])
    response = served.generate(first, MAX_NEW, time.perf_counter).tokens
    absorbed.absorb(first, response, MAX_NEW)
    assert absorbed.shared.patterns == served.shared.patterns
    a = served.generate(second, MAX_NEW, time.perf_counter)
    b = absorbed.generate(second, MAX_NEW, time.perf_counter)
    assert [(r.drafted, r.accepted) for r in a.rounds] == [(r.drafted, r.accepted)
                                                           for r in b.rounds]


def test_measurement_and_replay_serve_the_prompts_in_order(target):
    config = _config("public")
    measured = measure_arms(target, {"public": config}, PROMPTS, MAX_NEW)["public"]
    source = get_method("ngram").replay_factory()(target, None)
    refs = [Reference(r.prompt_id, r.category, _ids(target, p), r.baseline.tokens)
            for r, p in zip(measured.runs, PROMPTS)]
    source.prepare(config, refs)
    for run, ref in zip(measured.runs, refs):
        replayed = simulate(source.track(config, ref), config, ref, MAX_NEW)
        assert ([(r.drafted, r.accepted, r.emitted) for r in run.candidate.rounds]
                == [(r.drafted, r.accepted, r.emitted) for r in replayed])
    assert isinstance(get_method("ngram").shared_state_factory()(config), PublicPool)


def test_a_public_pool_needs_tensorrt_llms_rules_and_a_fixed_k():
    for bad in (dict(engine="vllm"), dict(exit_policy="heuristic")):
        with pytest.raises(AutotuneError, match="ngram_pool=public") as error:
            DecodeConfig(**{**_config("public").to_dict(), **bad,
                            "tree_choices": ()}).validate()
        assert "\n" not in str(error.value)
    with pytest.raises(AutotuneError, match="ngram_pool='shared'"):
        DecodeConfig(method="ngram", ngram_pool="shared").validate()


def test_the_export_writes_the_pool_measured():
    for pool, public in (("private", False), ("public", True)):
        doc = frozen(method="ngram", engine="trtllm", k=4, ngram_max=3, ngram_pool=pool)
        spec = json.loads(export(doc, "trtllm").primary())
        assert spec["is_public_pool"] is public


TRANSCRIPT = Path(__file__).parent / "oracles" / "trtllm_ngram_transcript.json"


def test_the_pool_drafts_as_tensorrt_llms_own_code_did():
    """A transcript of TensorRT-LLM's NGramPoolManager.get_draft_tokens (ngram.py @
    0249976, is_keep_all and is_use_oldest; the same at c4dc529f) run with ordered-set
    4.1.0 by oracles/trtllm_ngram_record.py: every draft and each pool at the end, on 24
    seeded cases, public and private pools. Its L123-125 remove shorter matches from the
    OrderedSet while iterating over it, which skips the match after each one removed."""
    transcript = json.loads(TRANSCRIPT.read_text())
    assert transcript["ordered_set"] == "4.1.0" and len(transcript["cases"]) == 24
    for case in transcript["cases"]:
        shared: dict | None = {} if case["public"] else None
        pools = []
        for request, drafts in zip(case["requests"], case["drafts"]):
            pool = MatchPool(case["max_ngram"], case["max_draft"], shared)
            pools.append(pool.pool)
            end = request["prompt_len"] + request["max_new_tokens"]
            for length, expected in zip(request["prefixes"], drafts, strict=True):
                limit = min(case["max_draft"], end - 1 - length)
                if limit <= 0:              # the decoder asks no draft with no budget
                    assert expected == []
                    continue
                assert pool.draft(request["tokens"][:length], limit) == expected, case["case"]
        for pool, recorded in zip(pools[:1] if case["public"] else pools, case["pools"],
                                  strict=True):
            assert [[list(p), [list(m) for m in matches]] for p, matches in pool.items()
                    ] == recorded, case["case"]


def test_a_longer_match_skips_the_one_after_each_shorter_one_removed():
    """The issue's case: [A3, B1] filed, then A4 -> TensorRT-LLM keeps B1 (the removal
    of A3 moves B1 under the iterator, which steps past it) and drafts it, the oldest."""
    pool = MatchPool(1, 4)
    pool.pool[(9,)] = [(1, 2, 3), (7,)]
    assert pool.draft([9, 1, 2, 3, 4, 9], 4) == [7]
    assert pool.pool[(9,)] == [(7,), (1, 2, 3, 4)]
