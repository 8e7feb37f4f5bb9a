"""The static forward (fixed-shape passes over a reused decode cache: what CUDA graphs
replay on a GPU), run eagerly on the CPU: the same logits as the eager forward for every
kind of pass, and every method's greedy output token-identical to AR (float32)."""

from __future__ import annotations

import time

import pytest
import torch
from tiny import CPU, llama_model, one_thread, tiny_loaded  # noqa: F401 (autouse)

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.models.graphs import CudaGraphCapture
from autotune.models.loading import LoadedModel, load_model
from autotune.models.static_forward import BUCKETS, StaticLlamaForward, bucket_for


def static_loaded(seed: int, layers: int, name: str) -> LoadedModel:
    """A tiny Llama decoded through the static forward, not captured (CPU)."""
    hf = llama_model(seed=seed, layers=layers, vocab=64, scale=2.0)
    loaded = tiny_loaded(hf, name)
    loaded.forward = StaticLlamaForward(hf, capture=False)
    return loaded


@pytest.fixture(scope="module")
def models() -> dict[str, LoadedModel]:
    return {"eager": tiny_loaded(llama_model(seed=1, layers=4, vocab=64, scale=2.0)),
            "static": static_loaded(1, 4, "static"),
            "draft": static_loaded(2, 2, "draft")}


def _prefilled(forward, cache_maker, prompt: list[int]):
    cache = cache_maker()
    forward.forward(torch.tensor([prompt]), cache)
    return cache


def test_buckets():
    assert [bucket_for(n) for n in (1, 2, 3, 5, 9, 65, 128)] == [1, 2, 4, 8, 16, 128, 128]
    assert bucket_for(BUCKETS[-1] + 1) is None


@pytest.mark.parametrize("pass_kind", ["chain", "one", "skip", "exit", "tree", "features"])
def test_every_pass_gives_the_eager_logits(models, pass_kind):
    eager, static = models["eager"].forward, models["static"].forward
    prompt = [3, 7, 1, 9, 4, 4, 2, 8, 5, 6]
    e_cache = _prefilled(eager, lambda: eager.new_cache(1, 64), prompt)
    s_cache = _prefilled(static, lambda: static.decode_cache(64), prompt)
    new = torch.tensor([[5, 1, 2]])
    kwargs: dict = dict(start=len(prompt))
    if pass_kind == "one":
        new = new[:, :1]
        kwargs["last_only"] = True
    elif pass_kind == "skip":
        kwargs.update(attn_skip=(1,), mlp_skip=(2, 3))
    elif pass_kind == "exit":
        kwargs.update(exit_layer=2)
    elif pass_kind == "tree":
        # Node 0 the root's child; nodes 1 and 2 siblings under node 0 (same depth).
        kwargs.update(tree_mask=torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool),
                      position_ids=torch.tensor([10, 11, 11]))
    if pass_kind == "features":
        want, want_features = eager.forward_features(new, e_cache, **kwargs)
        got, got_features = static.forward_features(new, s_cache, **kwargs)
        torch.testing.assert_close(got_features, want_features, rtol=1e-5, atol=1e-5)
    else:
        want = eager.forward(new, e_cache, **kwargs)
        got = static.forward(new, s_cache, **kwargs)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert s_cache.length == e_cache.length == len(prompt) + new.shape[1]
    if pass_kind != "skip":       # a skipped sublayer leaves its layer's scratch alone
        end = s_cache.length
        ran = 2 if pass_kind == "exit" else 4    # layers past an exit are not written
        torch.testing.assert_close(s_cache.k[:ran, :, :, :end], e_cache.k[:ran, :, :, :end],
                                   rtol=1e-5, atol=1e-5)


def test_the_decode_cache_is_reused_per_role_and_grown_when_short(models):
    static = models["static"].forward
    first = static.decode_cache(20)
    first.length = 7
    again = static.decode_cache(30)
    assert again is first and again.length == 0     # emptied, same storage
    draft = static.decode_cache(20, role="draft")
    assert draft is not first
    assert static.decode_cache(200).max_len >= 200   # the model's 256 positions cap it
    with pytest.raises(AutotuneError):
        static.decode_cache(300)                     # more than the model has


def test_a_cache_that_is_not_a_decode_cache_runs_eagerly(models):
    eager, static = models["eager"].forward, models["static"].forward
    prompt = torch.tensor([[3, 7, 1, 9]])
    want = eager.forward(prompt, eager.new_cache(1, 8))
    got = static.forward(prompt, static.new_cache(1, 8))     # too short for any bucket pad
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


METHODS = {
    "ngram": dict(method="ngram", k=4, ngram_min=1, ngram_max=3),
    "layer_skip": dict(method="layer_skip", attn_skip=(1,), mlp_skip=(2,), k=3),
    "layer_skip_adaptive": dict(method="layer_skip", attn_skip=(1,), mlp_skip=(2,), k=6,
                                exit_policy="adaptive", gamma=0.5),
    "sorted_exit": dict(method="sorted_exit", exits=(1, 2, 4), thresholds=(0.3, 0.2), k=4),
    "draft_model": dict(method="draft_model", k=4),
    "draft_tree": dict(method="draft_model", tree_width=2, tree_depth=3, tree_tokens=6),
    "layer_skip_tree": dict(method="layer_skip", attn_skip=(1,), mlp_skip=(2,),
                            tree_width=3, tree_depth=4, tree_tokens=16),
}
PROMPTS = [[1, 5, 9, 3, 5, 9, 3, 7], [2, 4, 6, 8, 10, 12], [7] * 5 + [1, 2, 3]]


@pytest.mark.parametrize("method", list(METHODS))
def test_greedy_output_through_the_static_forward_is_ar_token_for_token(models, method):
    """Speculative decoding over the static forward (target and draft) equals greedy AR
    over the eager forward, for budgets that cut drafts short."""
    config = DecodeConfig(**METHODS[method])
    ar = SpeculativeDecoder(models["eager"], DecodeConfig())
    spec = SpeculativeDecoder(models["static"], config,
                              models["draft"] if config.method == "draft_model" else None)
    static_ar = SpeculativeDecoder(models["static"], DecodeConfig())
    accepted = 0
    for prompt in PROMPTS:
        for max_new in (1, 7, 40):
            expected = ar.generate(prompt, max_new, time.perf_counter).tokens
            assert static_ar.generate(prompt, max_new, time.perf_counter).tokens == expected
            out = spec.generate(prompt, max_new, time.perf_counter)
            assert out.tokens == expected, (prompt, max_new)
            accepted += sum(r.accepted for r in out.rounds)
    assert accepted > 0                               # it did speculate


def test_graphs_need_cuda():
    with pytest.raises(AutotuneError, match="CUDA graphs need --device cuda"):
        load_model("/nonexistent-model-folder-for-this-test", "cpu", cuda_graphs=True)


def test_capture_is_off_on_the_cpu(models):
    assert models["static"].forward.capture is False
    assert StaticLlamaForward(llama_model(seed=3, layers=1), capture=None).capture is (
        CPU.type == "cuda")


def test_a_failed_capture_falls_back_to_eager_passes_and_says_why(capsys, monkeypatch):
    hf = llama_model(seed=4, layers=2, vocab=64)
    eager = tiny_loaded(llama_model(seed=4, layers=2, vocab=64)).forward
    static = StaticLlamaForward(hf, capture=False)
    static.capture = True                     # as on CUDA, with a capture that fails

    def fail(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing\ndetail")

    monkeypatch.setattr(static, "_capture_all", fail)
    prompt = torch.tensor([[3, 7, 1, 9]])
    got = static.forward(prompt, static.decode_cache(16))
    torch.testing.assert_close(got, eager.forward(prompt, eager.new_cache(1, 16)),
                               rtol=1e-5, atol=1e-5)
    assert static.capture is False
    assert static.graph_error == "operation not permitted when stream is capturing"
    assert "run eagerly" in capsys.readouterr().err


def test_a_capture_after_every_graph_was_dropped_takes_a_new_pool(monkeypatch):
    """Regression (H200, 2026-11-26): a cache regrown for a longer prompt dropped every
    graph, and the next capture into the freed pool failed the CUDA allocator's assert,
    so the finalists ran eagerly. A pool is reused only while a graph shares it (the
    forward's side: tests/test_graph_capture.py)."""
    handles = iter(range(100))
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: next(handles))
    graphs = CudaGraphCapture()
    first = graphs.pool(new_pool=True)
    assert graphs.pool(new_pool=False) == first      # a live graph shares the pool
    assert graphs.pool(new_pool=True) != first       # every graph dropped


def fused(loaded: LoadedModel) -> LoadedModel:
    """`loaded` with the CUDA arithmetic (fused RMS norm, grouped-query attention over an
    additive mask) switched on over the CPU."""
    loaded.forward.fused_kernels = True
    return loaded


@pytest.fixture(scope="module")
def fused_models() -> dict[str, LoadedModel]:
    return {"eager": fused(tiny_loaded(llama_model(seed=1, layers=4, vocab=64, scale=2.0))),
            "static": fused(static_loaded(1, 4, "static")),
            "draft": fused(static_loaded(2, 2, "draft"))}


@pytest.mark.parametrize("pass_kind", ["chain", "tree", "rows"])
def test_the_cuda_arithmetic_gives_the_hf_arithmetic_logits(models, fused_models, pass_kind):
    """The fused norm and the grouped-query attention compute the same function as HF's
    arithmetic (float32: equal to rounding), for masked passes of every shape."""
    reference, static = models["eager"].forward, fused_models["static"].forward
    assert reference.n_heads != reference.n_kv_heads          # GQA: the grouped path runs
    prompt = [3, 7, 1, 9, 4, 4, 2, 8, 5, 6]
    new = torch.tensor([[5, 1, 2]])
    if pass_kind == "rows":
        forward = fused_models["eager"].forward
        want_cache, got_cache = reference.new_cache(2, 32), forward.new_cache(2, 32)
        ids = torch.tensor([prompt[:6], prompt[4:]])
        want = reference.forward_rows(ids, want_cache, [0, 0])
        got = forward.forward_rows(ids, got_cache, [0, 0])
        want = reference.forward_rows(new.repeat(2, 1), want_cache, [6, 3])
        got = forward.forward_rows(new.repeat(2, 1), got_cache, [6, 3])
    else:
        kwargs: dict = dict(start=len(prompt))
        if pass_kind == "tree":
            kwargs.update(tree_mask=torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]],
                                                 dtype=torch.bool),
                          position_ids=torch.tensor([10, 11, 11]))
        want = reference.forward(new, _prefilled(reference, lambda: reference.new_cache(1, 64),
                                                 prompt), **kwargs)
        got = static.forward(new, _prefilled(static, lambda: static.decode_cache(64), prompt),
                             **kwargs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["ngram", "layer_skip_adaptive", "sorted_exit",
                                    "draft_tree", "layer_skip_tree"])
def test_greedy_output_with_the_cuda_arithmetic_is_ar_token_for_token(fused_models, method):
    config = DecodeConfig(**METHODS[method])
    ar = SpeculativeDecoder(fused_models["eager"], DecodeConfig())
    spec = SpeculativeDecoder(fused_models["static"], config,
                              fused_models["draft"] if config.method == "draft_model" else None)
    for prompt in PROMPTS:
        for max_new in (7, 40):
            expected = ar.generate(prompt, max_new, time.perf_counter).tokens
            assert spec.generate(prompt, max_new, time.perf_counter).tokens == expected
