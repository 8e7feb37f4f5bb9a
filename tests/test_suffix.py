"""Suffix decoding (`suffix`) and the cross-request state it keeps, on tiny random Llamas.

- Our driver of arctic_inference proposes what vLLM's SuffixDecodingProposer proposes on
  the same requests (its propose loop re-enacted here over the same cache class).
- Greedy output equals the AR baseline's; under sampling the drafts are one-hot.
- A request drafts from an earlier request's output (and not with
  max_cached_requests=0); `absorb` files a request as serving it would.
- Measurement: a stateful arm starts empty after the warm-up, files its history, and
  every repeat restarts from it; the arms' states are their own.
- Replay through the same cache in serving order equals the decoder round by round.
- Without arctic-inference: the method drops out of spaces and a config naming it is one
  line naming the install command.

The tests skip where arctic-inference is not installed, except in CI
(`AUTOTUNE_REQUIRE_SUFFIX=1`, set by .ci/run), where they must run.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.schema.methods import get_method
from autotune.measure.measurement import measure_arms
from autotune.methods.suffix.drafter import SuffixProposer, SuffixState
from autotune.models.loading import LoadedModel
from autotune.replay.reference import Reference
from autotune.replay.simulate import simulate
from autotune.space.loading import load_space
from autotune.workloads.prompts import Prompt, encode_prompt

INSTALLED = get_method("suffix").available()
pytestmark = pytest.mark.skipif(
    not INSTALLED and not os.environ.get("AUTOTUNE_REQUIRE_SUFFIX"),
    reason="arctic-inference is not installed (docs/engines/vllm.md says how)")

SCALE = 2.0
MAX_NEW = 16
# Repeated words make suffix matches inside a prompt; the same prompt twice makes a
# second request whose whole output an earlier request already produced.
PROMPTS = [Prompt("t1 t2 t3 t4 t1 t2", "code", "p0"), Prompt("t5 t6 t7 t5 t6", "code", "p1"),
           Prompt("t1 t2 t3 t4 t1 t2", "code", "p2"), Prompt("t9 t8 t9 t8 t9", "chat", "p3")]


@pytest.fixture(scope="module")
def target() -> LoadedModel:
    return tiny_llama(seed=0, scale=SCALE)


def _ids(model: LoadedModel, prompt: Prompt) -> list[int]:
    return encode_prompt(model.tokenizer, prompt)


def _config(**knobs: Any) -> DecodeConfig:
    base = dict(method="suffix", k=8, suffix_min_token_prob=0.0)
    return DecodeConfig(**{**base, **knobs})


def _vllm_drafts(config: DecodeConfig, requests: list[tuple[list[int], list[int]]],
                 max_model_len: int = 4096) -> list[list[list[int]]]:
    """vLLM 0.33.0's SuffixDecodingProposer.propose (v1/spec_decode/suffix_decoding.py)
    re-enacted over one batch slot, requests one after another: every step the tokens
    sampled (the first from the prefill, then one per step here), then a speculate over
    the last max_tree_depth tokens; a request gone from the batch is stopped at the
    next step."""
    from arctic_inference.suffix_decoding import SuffixDecodingCache

    cache = SuffixDecodingCache(max_tree_depth=config.suffix_max_tree_depth,
                                max_cached_requests=config.suffix_max_cached_requests)
    out = []
    for req_id, (prompt, response) in enumerate(requests):
        for gone in list(cache.active_requests - {req_id}):
            cache.stop_request(gone)
        drafts = []
        for step in range(len(response)):
            if req_id not in cache.active_requests:
                if req_id in cache.cached_requests:
                    cache.evict_cached_response(req_id)
                cache.start_request(req_id, prompt)
            cache.add_active_response(req_id, [response[step]])
            tokens = prompt + response[:step + 1]
            start = max(0, len(tokens) - config.suffix_max_tree_depth)
            draft = cache.speculate(
                req_id, tokens[start:],
                max_spec_tokens=min(config.k, max_model_len - len(tokens) - 1),
                max_spec_factor=config.suffix_max_spec_factor,
                min_token_prob=config.suffix_min_token_prob)
            drafts.append(list(draft.token_ids))
        out.append(drafts)
    return out


@pytest.mark.parametrize("knobs", [{}, {"suffix_max_tree_depth": 6, "k": 3},
                                   {"suffix_max_spec_factor": 0.5,
                                    "suffix_min_token_prob": 0.3},
                                   {"suffix_max_cached_requests": 0},
                                   {"suffix_max_cached_requests": 1}])
def test_our_driver_proposes_what_vllms_proposer_does(knobs):
    config = _config(**knobs)
    requests = [([1, 2, 3, 4, 1, 2], [3, 4, 5, 6, 3, 4, 5, 6, 7]),
                ([9, 3, 4, 5], [6, 3, 4, 5, 6, 7, 1, 2]),
                ([1, 2, 3], [4, 5, 6, 3, 4, 5, 6, 7]),
                ([8, 8, 8], [8, 8, 8, 8, 3, 4])]
    expected = _vllm_drafts(config, requests)
    state = SuffixState(config)
    for (prompt, response), wanted in zip(requests, expected):
        proposer = SuffixProposer(state, prompt)
        got = [proposer(prompt + response[:step + 1], config.k)[0]
               for step in range(len(response))]
        proposer.finish(prompt + response)
        assert got == wanted
    # The case is not empty: drafts were made, some from earlier requests' outputs.
    assert any(d for drafts in expected for d in drafts)


def test_greedy_suffix_is_lossless_and_drafts_from_an_earlier_request(target):
    baseline = SpeculativeDecoder(target, DecodeConfig())
    expected = [baseline.generate(_ids(target, p), MAX_NEW, time.perf_counter).tokens
                for p in PROMPTS]
    accepted: dict[int, list[int]] = {}
    for cached in (10000, 0):
        decoder = SpeculativeDecoder(target, _config(suffix_max_cached_requests=cached))
        assert decoder.stateful
        accepted[cached] = []
        for prompt, tokens in zip(PROMPTS, expected):
            generation = decoder.generate(_ids(target, prompt), MAX_NEW, time.perf_counter)
            assert generation.tokens == tokens
            accepted[cached].append(sum(r.accepted for r in generation.rounds))
    # p2 repeats p0: with earlier outputs cached it drafts from p0's answer (as long a
    # draft as the match so far allows, at spec factor 1).
    assert accepted[10000][2] >= len(expected[2]) // 2, accepted
    assert accepted[10000][2] > accepted[0][2]
    # The first request has nothing earlier to draw on: the same either way.
    assert accepted[10000][0] == accepted[0][0]


def test_absorb_files_a_request_as_serving_it_would(target):
    config = _config()
    served = SpeculativeDecoder(target, config)
    absorbed = SpeculativeDecoder(target, config)
    first, second = _ids(target, PROMPTS[0]), _ids(target, PROMPTS[2])
    response = served.generate(first, MAX_NEW, time.perf_counter).tokens
    absorbed.absorb(first, response, MAX_NEW)
    a = served.generate(second, MAX_NEW, time.perf_counter)
    b = absorbed.generate(second, MAX_NEW, time.perf_counter)
    assert [(r.drafted, r.accepted) for r in a.rounds] == [(r.drafted, r.accepted)
                                                           for r in b.rounds]
    absorbed.forget()
    c = absorbed.generate(second, MAX_NEW, time.perf_counter)
    assert sum(r.accepted for r in c.rounds) < sum(r.accepted for r in b.rounds)


def test_sampling_drafts_are_one_hot(target):
    import torch

    from autotune.decoding.policies import make_policy
    from autotune.methods.suffix.drafter import SuffixDrafter

    decoder = SpeculativeDecoder(target, _config(temperature=1.0))
    generation = decoder.generate(_ids(target, PROMPTS[0]), MAX_NEW, time.perf_counter,
                                  torch.Generator().manual_seed(0))
    assert 1 <= len(generation.tokens) <= MAX_NEW
    # The drafter's own draft under sampling: q puts all mass on each drafted token.
    config = _config(temperature=1.0)
    drafter = SuffixDrafter(SuffixState(config), vocab_size=64, sampling=True)
    seq = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4, 1, 2]])
    drafter.prefill(seq[:, :8])
    draft = drafter.propose(seq, 4, make_policy(config))
    assert draft.k >= 1 and draft.q is not None and draft.q.shape == (1, draft.k, 64)
    assert draft.tokens[0].tolist() == [3, 4, 1, 2][:draft.k]
    assert torch.equal(draft.q.argmax(-1), draft.tokens)
    assert torch.allclose(draft.q.sum(-1), torch.ones(1, draft.k))
    assert float(draft.q.max(-1).values.min()) == 1.0


def _rounds(measurement) -> list[list[tuple[int, int]]]:
    return [[(r.drafted, r.accepted) for r in run.candidate.rounds]
            for run in measurement.runs]


def test_measurement_starts_each_arm_empty_and_each_repeat_from_its_history(target):
    configs = {"a": _config(), "b": _config(k=4)}
    fresh = {name: SpeculativeDecoder(target, config) for name, config in configs.items()}
    order = PROMPTS[:2] + PROMPTS[3:]         # p2 (p0 again) is the history below
    measured = measure_arms(target, configs, [PROMPTS[2]] + order, MAX_NEW, repeats=2)
    for name, decoder in fresh.items():
        # A decoder that never saw the warm-up, serving the prompts in order: the same
        # rounds, so the warm-up (on the first prompt) was forgotten and no arm saw
        # another's requests.
        want = [[(r.drafted, r.accepted) for r in decoder.generate(
            _ids(target, p), MAX_NEW, time.perf_counter).rounds]
            for p in [PROMPTS[2]] + order]
        got = _rounds(measured[name])
        assert got[:len(want)] == want
        # The second repeat starts afresh (not from the first repeat's answers).
        assert got[len(want):] == want
    # A history of earlier requests: the repeated prompt drafts from it from the start.
    warm = measure_arms(target, {"a": configs["a"]}, [PROMPTS[2]], MAX_NEW,
                        history=[PROMPTS[0]])["a"]
    cold = measure_arms(target, {"a": configs["a"]}, [PROMPTS[2]], MAX_NEW)["a"]
    assert warm.runs[0].candidate.tokens == cold.runs[0].candidate.tokens
    assert (sum(a for _, a in _rounds(warm)[0]) > sum(a for _, a in _rounds(cold)[0]))


def test_replay_serves_the_references_in_order_round_by_round(target):
    config = _config(k=6)
    baseline = SpeculativeDecoder(target, DecodeConfig())
    decoder = SpeculativeDecoder(target, config)
    source = get_method("suffix").replay_factory()(target, None)
    refs = []
    for prompt in PROMPTS:
        ids = _ids(target, prompt)
        refs.append(Reference(prompt.prompt_id, prompt.category, ids, baseline.generate(
            ids, MAX_NEW, time.perf_counter).tokens))
    source.prepare(config, refs)
    for ref in refs:
        decoded = decoder.generate(ref.prompt, MAX_NEW, time.perf_counter)
        replayed = simulate(source.track(config, ref), config, ref, MAX_NEW)
        assert ([(r.drafted, r.accepted, r.emitted) for r in decoded.rounds]
                == [(r.drafted, r.accepted, r.emitted) for r in replayed])
    # A new pass starts from an empty cache again.
    source.prepare(config, refs)
    again = simulate(source.track(config, refs[2]), config, refs[2], MAX_NEW)
    fresh = SpeculativeDecoder(target, config).generate(refs[2].prompt, MAX_NEW,
                                                        time.perf_counter)
    assert [(r.drafted, r.accepted) for r in again] == [(r.drafted, r.accepted)
                                                       for r in fresh.rounds]


def test_without_arctic_inference_the_method_drops_out_and_is_refused(monkeypatch, target):
    spec = get_method("suffix")
    monkeypatch.setattr(type(spec), "available", lambda self: self.requires is None)
    assert "suffix" not in load_space("joint").bind(30).knobs()[0]["choices"]
    assert "suffix" not in load_space("engine_vllm").bind(30).knobs()[0]["choices"]
    with pytest.raises(AutotuneError) as error:
        SpeculativeDecoder(target, _config())
    message = str(error.value)
    assert "\n" not in message and "arctic_inference" in message
    assert "pip install" in message and "arctic-inference==0.3.0" in message
    with pytest.raises(AutotuneError, match="arctic-inference==0.3.0"):
        load_space("suffix").bind(30)


def test_a_suffix_label_rounds_the_searched_floats():
    from autotune.schema.label import describe
    config = {"method": "suffix", "k": 25, "suffix_max_tree_depth": 15,
              "suffix_max_spec_factor": 3.53227449256707,
              "suffix_min_token_prob": 0.20029885863595928}
    assert describe(config) == "suffix k=25 depth=15 factor=3.53 p>=0.2"
