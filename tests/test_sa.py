"""TensorRT-LLM's SA drafter (`sa`): the suffix automaton against a brute-force reading of
its rule, losslessness, padding, exact replay and the TensorRT-LLM export (tiny random
Llamas; the default model's cases are in test_lossless_real.py and test_replay_exact.py)."""

from __future__ import annotations

import json
import random
import time

import jsonschema
import pytest
import yaml
from test_engine_fields import check_trtllm
from test_exports import error_of, frozen
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.schema.methods import get_method
from autotune.exports import approximation, export, expressible, schema
from autotune.methods.ngram.drafter import lookup
from autotune.methods.sa.drafter import LONGEST, SuffixAutomaton
from autotune.replay.reference import Reference
from autotune.replay.simulate import simulate
from autotune.workloads.prompts import Prompt, encode_prompt

MAX_NEW = 16
PROMPTS = [Prompt("t1 t2 t3 t4 t1 t2", "code", "p0"), Prompt("t5 t6 t7 t5 t6", "code", "p1"),
           Prompt("t9 t8 t9 t8 t9", "chat", "p2")]


def _brute(tokens: list[int], limit: int, max_ngram: int) -> list[int]:
    """The rule read in TensorRT-LLM: the longest suffix (at most max_ngram tokens) that
    occurs ending before the last token, continued after its first occurrence."""
    longest = len(tokens) - 1 if max_ngram == LONGEST else max_ngram
    return lookup(tokens, 1, longest, limit, earliest=True)


@pytest.mark.parametrize("max_ngram", [LONGEST, 1, 2, 3, 5])
def test_the_automaton_drafts_the_first_occurrence_of_the_longest_repeated_suffix(max_ngram):
    rng = random.Random(max_ngram)
    checked = matched = 0
    for _ in range(40):
        vocab = rng.choice([2, 3, 5])
        tokens = [rng.randrange(vocab) for _ in range(rng.randrange(1, 60))]
        automaton = SuffixAutomaton()
        for end, token in enumerate(tokens):
            automaton.extend(token)
            got = automaton.draft(6, max_ngram)
            assert got == _brute(tokens[:end + 1], 6, max_ngram), (tokens[:end + 1], max_ngram)
            checked += 1
            matched += bool(got)
    assert matched > checked // 2            # mostly matches: the rule was exercised


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0, scale=2.0)


def test_greedy_sa_is_lossless_padded_and_replays_round_by_round(target):
    baseline = SpeculativeDecoder(target, DecodeConfig())
    for engine in ("autotune", "trtllm"):
        config = DecodeConfig(method="sa", k=4, engine=engine)
        decoder = SpeculativeDecoder(target, config)
        source = get_method("sa").replay_factory()(target, None)
        accepted = 0
        for prompt in PROMPTS:
            ids = encode_prompt(target.tokenizer, prompt)
            expected = baseline.generate(ids, MAX_NEW, time.perf_counter).tokens
            generation = decoder.generate(ids, MAX_NEW, time.perf_counter)
            assert generation.tokens == expected
            # TensorRT-LLM verifies max_draft_len tokens every step (within the budget).
            left = MAX_NEW - 1
            for r in generation.rounds:
                assert r.drafted == min(4, left - 1)
                left -= r.emitted
            accepted += sum(r.accepted for r in generation.rounds)
            ref = Reference(prompt.prompt_id, prompt.category, ids, expected)
            replayed = simulate(source.track(config, ref), config, ref, MAX_NEW)
            assert ([(r.drafted, r.accepted, r.emitted) for r in replayed]
                    == [(r.drafted, r.accepted, r.emitted) for r in generation.rounds])
        assert accepted > 0


def test_zero_is_refused_in_one_line():
    with pytest.raises(AutotuneError, match="sa_max_matching_ngram_size=0") as error:
        DecodeConfig(method="sa", sa_max_matching_ngram_size=0).validate()
    assert "\n" not in str(error.value)


def test_sa_exports_to_tensorrt_llm_only():
    doc = frozen(method="sa", engine="trtllm", k=6, sa_max_matching_ngram_size=-1)
    assert expressible(doc) == ["trtllm"]
    result = export(doc, "trtllm")
    spec = json.loads(result.files["trtllm.json"])
    assert spec == {"decoding_type": "SA", "max_draft_len": 6,
                    "max_matching_ngram_size": -1, "enable_global_pool": False}
    jsonschema.Draft202012Validator(schema("trtllm")).validate(spec)
    check_trtllm(spec, yaml.safe_load(result.files["trtllm.yaml"]))
    assert "earlier lookups left in its draft buffer" in approximation(doc, "trtllm")
    fixed = frozen(method="sa", engine="trtllm", k=3, sa_max_matching_ngram_size=4)
    assert json.loads(export(fixed, "trtllm").primary())["max_matching_ngram_size"] == 4
    for fmt in ("vllm", "sglang", "hf", "llama_server"):
        assert "method=sa" in error_of(fmt, doc, lossy=True)


def test_the_agreement_scorer_is_the_first_draft_token_at_every_prefix():
    ids = [3, 1, 2, 3, 1, 2, 4, 3, 1]
    config = DecodeConfig(method="sa", k=2)
    scored = get_method("sa").scorer_factory()(None, config, None)(ids)
    assert scored == [(_brute(ids[:t + 1], 1, LONGEST) or [-1])[0] for t in range(len(ids))]
    assert scored[4] == 2 and scored[0] == -1


def test_unwritten_slots_keep_what_earlier_lookups_left():
    """TensorRT-LLM's kernel writes only the tokens it found into the draft buffer (zero
    at the start); the other slots keep an earlier lookup's tokens, this request's or
    an earlier one's."""
    from autotune.methods.sa.drafter import SAProposer, SAState

    config = DecodeConfig(method="sa", k=4, engine="trtllm")
    state = SAState(config)
    first = SAProposer(config, 3, state)
    assert first([5, 6, 7, 8], 4) == [0, 0, 0, 0]                # no repeat: zeros
    assert first([5, 6, 7, 8, 9, 5], 4) == [6, 7, 8, 9]          # "5" recurs
    # "9" recurs: three tokens after it before the end, the fourth slot left over.
    assert first([5, 6, 7, 8, 9, 5, 1, 9], 4) == [5, 1, 9, 9]
    assert first([5, 6, 7, 8, 9, 5, 1, 9, 2], 4) == [5, 1, 9, 9]   # no repeat: unchanged
    first.finish([5, 6, 7, 8, 9, 5, 1, 9, 2, 6])     # its last lookup: "6" -> 7 8 9 5
    second = SAProposer(config, 2, state)                         # the same row, reused
    assert second.row == 0 and first.row == -1                    # row 0 freed, reused
    assert second([3, 4, 3], 4) == [4, 3, 9, 5]                   # "3" recurs: 2 tokens
    other = SAProposer(config, 2, state)                          # a second row: zeros
    assert other.row == 1 and other([1, 2, 1], 4) == [2, 1, 0, 0]


def test_the_buffer_outlives_requests_and_a_history_fills_it_as_serving_did(target):
    """One arm serves the prompts in order: its second request's first drafts read the
    slots the first request's lookups left; `absorb` leaves the buffer as serving did."""
    config = DecodeConfig(method="sa", k=6, engine="trtllm")
    served = SpeculativeDecoder(target, config)
    warmed = SpeculativeDecoder(target, config)
    first, second = (encode_prompt(target.tokenizer, p) for p in PROMPTS[:2])
    response = served.generate(first, MAX_NEW, time.perf_counter).tokens
    assert served.shared.rows[0] != [0] * 6                   # the first request wrote it
    warmed.absorb(first, response, MAX_NEW)
    assert warmed.shared.rows == served.shared.rows
    rounds = [[(r.drafted, r.accepted) for r in d.generate(second, MAX_NEW,
                                                           time.perf_counter).rounds]
              for d in (served, warmed)]
    assert rounds[0] == rounds[1]
    assert warmed.shared.rows == served.shared.rows
