"""Measurement backends (autotune/backends/): each engine timed through `measure_arms`
like our decoder, and each engine's own behaviour read back, not assumed.

- HF transformers: generate() with the config's HF export on a tiny Llama; its output
  is greedy, its rounds are transformers' own, the prefill round's tokens are not decode
  tokens.
- llama.cpp (llama-cpp-python, on the default model's own GGUF): our n-gram drafter under
  llama.cpp's rules proposes exactly what its LlamaPromptLookupDecoding proposes, on
  random sequences and on every round of real llama.cpp runs; the backend's rounds add
  up to the tokens generated; what it cannot run is refused in one line.
- vLLM / SGLang: refused in one line where they cannot run (no fake backend).

The llama.cpp tests skip where llama-cpp-python is not installed, except in CI
(`AUTOTUNE_REQUIRE_LLAMA_CPP=1`, set by .ci/run), where they must run.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from conftest import real_prompts
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.backends import BackendUnavailable, open_backend, unavailable
from autotune.backends.embedded import EmbeddedBackend
from autotune.backends.hf import HFBackend
from autotune.backends.llama_cpp import installed as llama_cpp_installed
from autotune.common.errors import AutotuneError
from autotune.decoding.config import DecodeConfig
from autotune.methods.ngram.drafter import ngram_proposal
from autotune.measure.measurement import measure_arms
from autotune.models.loading import LoadedModel
from autotune.workloads.prompts import Prompt, encode_prompt, round_robin

needs_llama_cpp = pytest.mark.skipif(
    not llama_cpp_installed() and not os.environ.get("AUTOTUNE_REQUIRE_LLAMA_CPP"),
    reason="llama-cpp-python is not installed (pip install '.[llama_cpp]')")

TINY_PROMPTS = [Prompt("t1 t2 t3 t4 t1 t2", "code", "p0"),
                Prompt("t5 t6 t7 t5 t6", "code", "p1"),
                Prompt("t9 t8 t9 t8 t9", "chat", "p2")]


# ------------------------------------------------------------------ HF transformers
@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return tiny_llama(seed=0, scale=2.0)


def test_hf_backend_measures_generate_and_reads_its_rounds(tiny: LoadedModel) -> None:
    config = DecodeConfig(method="ngram", k=3, ngram_min=1, ngram_max=2, engine="hf")
    backend = HFBackend(tiny)
    try:
        measured = measure_arms(tiny, {"c": config}, TINY_PROMPTS, 12, backend=backend)["c"]
    finally:
        backend.close()
    summary = measured.summary()
    assert summary["measured_by"] == "hf" and "generate()" in summary["measured_by_label"]
    # Float32 greedy: transformers' assisted output equals its own plain greedy output.
    assert summary["lossless"] is True
    # What transformers drafted, round by round, with its first-pass tokens apart.
    assert summary["rounds"] > 0 and summary["mean_drafted_tokens"] > 0
    for run in measured.runs:
        gen = run.candidate
        assert len(gen.tokens) == 12 and gen.tokens == run.baseline.tokens
        assert gen.first_tokens >= 1 and run.baseline.first_tokens == 1
        assert gen.decoded == 12 - gen.first_tokens
        assert gen.prefill_s > 0 and gen.decode_s > 0
        # Every round transformers counted emitted its matches + 1 (capped by the budget).
        assert sum(r.emitted for r in gen.rounds) >= len(gen.tokens) - 1
    # An engine's rounds carry no draft / verify split, and its memory is not measured.
    assert summary["draft_time_share"] is None and summary["draft_ms_per_token"] is None
    assert summary["peak_memory_mb"] is None


def test_hf_backend_refuses_what_its_export_cannot_run_exactly(tiny: LoadedModel) -> None:
    backend = HFBackend(tiny)
    try:
        # Our most-recent-match rule: transformers matches the earliest occurrence.
        with pytest.raises(AutotuneError, match="HF transformers cannot run it exactly"):
            backend.runner(DecodeConfig(method="ngram", k=3, ngram_min=1, ngram_max=2))
    finally:
        backend.close()


def test_embedded_backend_is_the_default(tiny: LoadedModel) -> None:
    config = DecodeConfig(method="ngram", k=3, ngram_min=1, ngram_max=2)
    explicit = measure_arms(tiny, {"c": config}, TINY_PROMPTS[:1], 8,
                            backend=EmbeddedBackend(tiny))["c"]
    default = measure_arms(tiny, {"c": config}, TINY_PROMPTS[:1], 8)["c"]
    assert explicit.runs[0].candidate.tokens == default.runs[0].candidate.tokens
    assert explicit.summary()["measured_by"] == default.summary()["measured_by"] == "autotune"
    assert explicit.summary()["peak_memory_mb"] > 0


# ------------------------------------------------------------------ vLLM / SGLang
@pytest.mark.parametrize("engine,label", [("vllm", "vLLM"), ("sglang", "SGLang")])
def test_gpu_engines_refuse_in_one_line(tiny: LoadedModel, engine: str, label: str) -> None:
    with pytest.raises(BackendUnavailable) as caught:
        open_backend(engine, tiny)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(label)
    assert f"--target {engine}" in message
    assert unavailable(engine, "default", None) is not None


# ------------------------------------------------------------------ llama.cpp
@needs_llama_cpp
def test_our_ngram_rules_propose_what_llama_cpp_proposes() -> None:
    """`engine: llama_cpp` n-gram drafts equal LlamaPromptLookupDecoding's own, on random
    short-vocabulary sequences (so that matches of every size occur)."""
    import numpy as np
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    rng = random.Random(0)
    compared = nonempty = 0
    for _ in range(400):
        tokens = [rng.randrange(6) for _ in range(rng.randrange(2, 40))]
        n, k = rng.randrange(1, 5), rng.randrange(1, 9)
        theirs = LlamaPromptLookupDecoding.find_candidate_pred_tokens(
            np.array(tokens, dtype=np.intc), n, k).tolist()
        config = DecodeConfig(method="ngram", k=k, ngram_min=1, ngram_max=n,
                              engine="llama_cpp")
        ours = ngram_proposal(tokens, config, k, eos=())
        assert ours == theirs, (tokens, n, k)
        compared += 1
        nonempty += bool(theirs)
    assert compared == 400 and nonempty > 200


@pytest.fixture(scope="module")
def copying_prompts() -> list[Prompt]:
    """Two summarization / retrieval prompts, cut to their last 800 characters (a
    thousand-token prefill costs llama.cpp seconds on one thread; the copying stays)."""
    every = real_prompts(500)
    chosen = round_robin([p for p in every if p.category in ("summarization", "rag")], 2)
    return [Prompt(p.text[-800:], p.category, p.prompt_id) for p in chosen]


@needs_llama_cpp
def test_llama_cpp_backend_runs_prompt_lookup_as_our_rules_say(
        default_model: LoadedModel, copying_prompts: list[Prompt]) -> None:
    config = DecodeConfig(method="ngram", k=4, ngram_min=1, ngram_max=3, engine="llama_cpp")
    backend = open_backend("llama_cpp", default_model, None, "default")
    ids = [encode_prompt(default_model.tokenizer, p) for p in copying_prompts]
    backend.fit_context(max(map(len, ids)), 24)
    runner = backend.runner(config)
    baseline = backend.runner(DecodeConfig())
    try:
        for prompt in ids:
            gen = runner.generate(prompt, 24, time.perf_counter)
            again = baseline.generate(prompt, 24, time.perf_counter)
            assert baseline.generate(prompt, 24, time.perf_counter).tokens == again.tokens
            assert gen.first_tokens == 1 and 1 <= len(gen.tokens) <= 24
            # The rounds account for every token after the prefill's.
            assert sum(r.emitted for r in gen.rounds) == len(gen.tokens) - 1
            # Every draft llama.cpp made is the one our drafter makes under its rules,
            # for the sequence it drafted after.
            sequence = prompt + gen.tokens
            for length, draft in runner.drafter.calls:
                assert draft == ngram_proposal(sequence[:length], config, config.k, eos=())
            assert runner.drafter.calls, "llama.cpp never drafted"
    finally:
        runner.close()
        baseline.close()


@needs_llama_cpp
def test_llama_cpp_measurement_says_who_measured_and_whether_it_was_lossless(
        default_model: LoadedModel, copying_prompts: list[Prompt]) -> None:
    config = DecodeConfig(method="ngram", k=3, ngram_min=1, ngram_max=2, engine="llama_cpp")
    backend = open_backend("llama_cpp", default_model, None, "default")
    backend.fit_context(2048, 16)
    summary = measure_arms(default_model, {"c": config}, copying_prompts, 16,
                           backend=backend)["c"].summary()
    assert summary["measured_by"] == "llama_cpp"
    assert "llama-cpp-python" in summary["measured_by_label"]
    # llama.cpp's batched passes may break a near-tie differently from its one-token
    # passes: whichever happened, it is reported per prompt, not assumed.
    assert isinstance(summary["lossless"], bool)
    assert summary["lossless"] == (not summary["mismatched_prompts"])
    assert summary["speedup"] > 0 and summary["rounds"] > 0


@needs_llama_cpp
def test_llama_cpp_refuses_what_it_cannot_run(default_model: LoadedModel,
                                              truncated_draft: LoadedModel,
                                              tmp_path) -> None:
    with pytest.raises(BackendUnavailable, match="prompt lookup only"):
        open_backend("llama_cpp", default_model, truncated_draft, "default")
    folder = tmp_path / "hf_model"
    folder.mkdir()
    assert "GGUF" in (unavailable("llama_cpp", str(folder), None) or "")
    assert "not found" in (unavailable("llama_cpp", str(tmp_path / "x.gguf"), None) or "")
    assert unavailable("llama_cpp", "default", None) is None
    backend = open_backend("llama_cpp", default_model, None, "default")
    # Matches from size 1 always: a minimum n-gram size is not llama-cpp-python's.
    with pytest.raises(AutotuneError, match="llama.cpp cannot run it exactly"):
        backend.runner(DecodeConfig(method="ngram", k=3, ngram_min=2, ngram_max=3,
                                    engine="llama_cpp"))
    backend.fit_context(8, 4, k=4)
    runner = backend.runner(DecodeConfig())
    try:
        with pytest.raises(AutotuneError, match="exceeds llama.cpp's context"):
            runner.generate(list(range(10, 400)), 16, time.perf_counter)
    finally:
        runner.close()


@needs_llama_cpp
def test_llama_cpp_multi_token_passes_break_near_ties_unlike_one_token_passes(
        default_model: LoadedModel, copying_prompts: list[Prompt]) -> None:
    """Why `LlamaCppBackend.token_exact` is False: one batched pass over llama.cpp's own
    greedy output does not pick that output back at every position, and where it differs
    the two best logits are nearly tied (rounding, not a drafting fault)."""
    import numpy as np
    from llama_cpp import Llama
    backend = open_backend("llama_cpp", default_model, None, "default")
    backend.fit_context(2048, 32)
    baseline = backend.runner(DecodeConfig())
    batched = Llama(model_path=str(backend.gguf), n_ctx=backend.n_ctx, logits_all=True,
                    n_threads=backend.threads, verbose=False)
    gaps = []
    try:
        for prompt in copying_prompts:
            ids = encode_prompt(default_model.tokenizer, prompt)
            tokens = baseline.generate(ids, 32, time.perf_counter).tokens
            batched.reset()
            batched.eval(ids + tokens)
            scores = np.array(batched.scores[len(ids) - 1: len(ids) - 1 + len(tokens)])
            differs = np.nonzero(scores.argmax(-1) != np.array(tokens))[0]
            if len(differs):
                row = np.sort(scores[differs[0]])
                gaps.append(float(row[-1] - row[-2]))
    finally:
        baseline.close()
        batched.close()
    assert gaps, "llama.cpp's batched passes matched its one-token passes everywhere"
    assert max(gaps) < 0.5, gaps
