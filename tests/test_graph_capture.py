"""Captured passes on the CPU (tests/fake_graph.py binds a pass's inputs at capture and
replays its body on them): pointer binding and regrow, no capture inside a timed run,
a failed capture never mixing graphed and eager timings, graphs evicted by least
recent use under a cap, and unused cache slots that cannot poison attention."""

from __future__ import annotations

import time

import pytest
import torch
from fake_graph import FakeGraphs
from tiny import llama_model, one_thread, tiny_loaded  # noqa: F401 (autouse)

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.measure.measurement import measure_arms
from autotune.models.loading import LoadedModel
from autotune.models.static_forward import BUCKETS, StaticLlamaForward
from autotune.workloads.prompts import Prompt

POSITIONS = 1024     # room for a cache to grow past its first 256 positions


def _hf(seed: int = 1, layers: int = 3):
    hf = llama_model(seed=seed, layers=layers, vocab=64, scale=2.0)
    hf.config.max_position_embeddings = POSITIONS
    return hf


def _graphed(seed: int = 1, layers: int = 3, **kwargs) -> LoadedModel:
    """A tiny Llama whose decode passes replay fake-captured graphs."""
    hf = _hf(seed, layers)
    loaded = tiny_loaded(hf, f"graphed-{seed}")
    loaded.forward = StaticLlamaForward(hf, capture=True,
                                        graphs=kwargs.pop("graphs", FakeGraphs()), **kwargs)
    return loaded


def _eager(seed: int = 1, layers: int = 3) -> LoadedModel:
    return tiny_loaded(_hf(seed, layers), f"eager-{seed}")


def _ar(loaded: LoadedModel, prompt: list[int], new: int) -> list[int]:
    return SpeculativeDecoder(loaded, DecodeConfig()).generate(prompt, new,
                                                              time.perf_counter).tokens


SKIP = DecodeConfig(method="layer_skip", attn_skip=(1,), mlp_skip=(2,), k=3)
TREE = DecodeConfig(method="layer_skip", attn_skip=(1,), mlp_skip=(2,), tree_width=2,
                    tree_depth=3, tree_tokens=6)


@pytest.mark.parametrize("config", [DecodeConfig(), SKIP, TREE], ids=["ar", "skip", "tree"])
def test_replayed_graphs_decode_as_the_eager_forward_across_a_regrow(config):
    """Every pass replays a graph bound at capture; a longer prompt regrows the cache,
    and the graphs bound to the old one must not be replayed on the new one."""
    eager, graphed = _eager(), _graphed()
    spec = SpeculativeDecoder(graphed, config)
    short, long = [3, 7, 1, 9, 4, 4, 2], [(5 * i) % 63 + 1 for i in range(300)]
    for prompt in (short, long, short):
        assert spec.generate(prompt, 20, time.perf_counter).tokens == _ar(eager, prompt, 20)
    forward = graphed.forward
    assert forward.replays > 0 and forward.graph_mode() == "cuda graphs"
    assert forward._caches["target"].max_len >= len(long) + 20


def test_a_regrow_recaptures_and_reserve_grows_before_the_first_pass():
    graphed = _graphed()
    forward = graphed.forward
    spec = SpeculativeDecoder(graphed, DecodeConfig())
    spec.generate([3, 7, 1], 4, time.perf_counter)
    first = forward.captures
    assert first == len(BUCKETS)                          # one key, every bucket
    assert spec.reserve(400, 20) is True                  # grows now, graphs dropped
    assert forward.graph_mode() == "cuda graphs" and not forward._graphs
    spec.generate([3, 7, 1], 4, time.perf_counter)        # captured again, once
    assert forward.captures == 2 * first
    assert spec.reserve(400, 20) is False
    spec.generate([5] * 400, 20, time.perf_counter)       # no regrow, no capture
    assert forward.captures == 2 * first
    with pytest.raises(AutotuneError, match="exceeds the model's 1024 positions"):
        spec.reserve(POSITIONS, 1)


def test_a_new_pool_only_when_no_graph_is_alive():
    """Regression (H200, 2026-11-26): capturing into a pool whose graphs were all
    dropped (a regrown cache) failed the CUDA allocator's assert."""
    graphs = FakeGraphs()
    graphed = _graphed(graphs=graphs)
    spec = SpeculativeDecoder(graphed, SKIP)
    spec.generate([3, 7, 1], 6, time.perf_counter)        # two keys, one pool
    assert graphs.pools == 1
    spec.reserve(400, 20)                                 # every graph dropped
    spec.generate([3, 7, 1], 6, time.perf_counter)
    assert graphs.pools == 2


def _prompts() -> list[Prompt]:
    # The first prompt (the warm-up's) is short; the third needs a cache past 256.
    long = " ".join(f"t{(7 * i) % 63 + 1}" for i in range(260))
    return [Prompt("t1 t2 t3 t4 t1 t2", "code", "p0"), Prompt("t5 t6 t7 t5 t6", "code", "p1"),
            Prompt(long, "chat", "p2")]


def test_no_capture_inside_a_timed_run_and_the_record_says_how_it_ran():
    graphed = _graphed()
    arms = {"ngram": DecodeConfig(method="ngram", k=3, ngram_min=1, ngram_max=2),
            "skip": SKIP}
    results = measure_arms(graphed, arms, _prompts(), 12)
    for measured in results.values():
        summary = measured.summary()
        assert summary["graphs"] == "cuda graphs"
        assert summary["graph_captures_timed"] == 0
    assert graphed.forward.captures > 0                   # the warm-up captured them


def test_an_eager_run_says_so_and_an_engine_run_has_no_graph_figures():
    hf = _hf()
    loaded = tiny_loaded(hf)
    loaded.forward = StaticLlamaForward(hf, capture=False)
    summary = measure_arms(loaded, {"c": SKIP}, _prompts()[:2], 6)["c"].summary()
    assert (summary["graphs"], summary["graph_captures_timed"]) == ("eager", 0)
    plain = measure_arms(_eager(), {"c": SKIP}, _prompts()[:2], 6)["c"].summary()
    assert (plain["graphs"], plain["graph_captures_timed"]) == (None, None)


def test_a_capture_that_fails_before_any_replay_runs_the_whole_run_eagerly(capsys):
    graphed = _graphed(graphs=FakeGraphs(fail_at=(0,)))
    summary = measure_arms(graphed, {"c": SKIP}, _prompts()[:2], 8)["c"].summary()
    assert summary["graphs"] == "eager (capture failed: fake capture 0 failed)"
    assert graphed.forward.replays == 0                   # not one pass graphed
    assert summary["lossless"] is True
    assert "passes run eagerly for the whole run" in capsys.readouterr().err


def test_a_capture_that_fails_after_graphed_passes_ends_the_run_in_one_line():
    # The target's first key captures every bucket and replays; the draft's skip key
    # is the next capture, and it fails.
    graphed = _graphed(graphs=FakeGraphs(fail_at=(len(BUCKETS),)))
    spec = SpeculativeDecoder(graphed, SKIP)
    with pytest.raises(AutotuneError) as caught:
        spec.generate([3, 7, 1, 9], 8, time.perf_counter)
    message = str(caught.value)
    assert "\n" not in message and "fake capture 8 failed" in message
    assert "mix graphed and eager" in message
    assert graphed.forward.graph_error is None


def test_graphs_are_evicted_by_least_recent_use_under_the_cap():
    forward = _graphed().forward
    cache = forward.decode_cache(16)
    prompt = torch.tensor([[3, 7, 1, 9]])
    forward.forward(prompt, cache)
    per_key = sum(forward._key_bytes.values())
    assert per_key == forward._output_bytes(next(iter(forward._key_bytes)), list(BUCKETS))
    forward.graph_bytes_cap = 2 * per_key                 # room for two keys
    for skip in [(1,), ()]:                               # key {1}, then key {} used again
        forward.forward(prompt[:, :1], cache, attn_skip=skip)
    forward.forward(prompt[:, :1], cache, attn_skip=(2,))  # a third key: {1} goes
    assert [set(k.attn_skip) for k in forward._key_bytes] == [set(), {2}]
    assert forward.evictions == 1 and sum(forward._key_bytes.values()) <= 2 * per_key
    assert all(key in forward._key_bytes for key, _ in forward._graphs)


def test_decoding_under_a_tight_cap_still_decodes_as_eager():
    eager = _eager()
    graphed = _graphed(graph_bytes_cap=1)                 # never more than one key
    prompt = [3, 7, 1, 9, 4, 4, 2]
    got = SpeculativeDecoder(graphed, SKIP).generate(prompt, 16, time.perf_counter).tokens
    assert got == _ar(eager, prompt, 16)
    assert graphed.forward.evictions > 0
    with pytest.raises(ValueError, match="graph_bytes_cap"):
        StaticLlamaForward(_hf(), capture=False, graph_bytes_cap=-1)


@pytest.mark.parametrize("capture", [True, False], ids=["graphed", "eager"])
def test_non_finite_values_left_in_unused_cache_slots_do_not_reach_later_passes(capture):
    """Attention reads every column of the static cache and a masked column weighs 0,
    but 0 * NaN is NaN: scratch left non-finite (fp16 overflow, an earlier run) must not
    turn a later generation into NaN."""
    eager = _eager()
    graphed = _graphed() if capture else tiny_loaded(_hf())
    if not capture:
        graphed.forward = StaticLlamaForward(graphed.hf_model, capture=False)
    spec = SpeculativeDecoder(graphed, SKIP)
    prompt = [3, 7, 1, 9, 4, 4, 2]
    spec.generate(prompt, 8, time.perf_counter)
    with torch.inference_mode():
        for cache in graphed.forward._caches.values():
            cache.k.fill_(float("nan"))
            cache.v.fill_(float("inf"))
    assert spec.generate(prompt, 16, time.perf_counter).tokens == _ar(eager, prompt, 16)
    cache = graphed.forward.decode_cache(32)
    logits = graphed.forward.forward(torch.tensor([prompt]), cache)
    assert torch.isfinite(logits).all()


def test_a_pass_s_logits_outlive_the_next_replay_of_its_graph():
    """A graph writes every replay into the same output tensors: the caller must get
    a copy, or the next pass of that bucket rewrites logits it still holds."""
    eager, forward = _eager().forward, _graphed().forward
    prompt = [3, 7, 1, 9, 4, 4, 2]
    e_cache, cache = eager.new_cache(1, 64), forward.decode_cache(32)
    eager.forward(torch.tensor([prompt]), e_cache)
    forward.forward(torch.tensor([prompt]), cache)
    first = forward.forward(torch.tensor([[5]]), cache)
    forward.forward(torch.tensor([[6]]), cache)               # the same bucket's graph
    torch.testing.assert_close(first, eager.forward(torch.tensor([[5]]), e_cache),
                               rtol=1e-5, atol=1e-5)
