"""Measurement backends (autotune/backends/): each engine timed through `measure_arms`
like our decoder, and each engine's own behaviour read back, not assumed.

- HF transformers: generate() with the config's HF export on a tiny Llama; its output
  is greedy, its rounds are transformers' own, the prefill round's tokens are not decode
  tokens.
- vLLM / SGLang: refused in one line where they cannot run (no fake backend).

llama-server's backend has its own tests (tests/test_llama_server.py).
"""

from __future__ import annotations

import pytest
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.backends import BackendUnavailable, open_backend, unavailable
from autotune.backends.embedded import EmbeddedBackend
from autotune.backends.hf import HFBackend
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.measure.measurement import measure_arms
from autotune.models.loading import LoadedModel
from autotune.workloads.prompts import Prompt

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
def test_sglang_refuses_in_one_line(tiny: LoadedModel) -> None:
    with pytest.raises(BackendUnavailable) as caught:
        open_backend("sglang", tiny)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("SGLang")
    assert "--target sglang" in message
    assert unavailable("sglang", "default", None) is not None


def test_vllm_without_its_venv_names_the_install_in_one_line(monkeypatch, tmp_path) -> None:
    from autotune.backends import vllm as vllm_backend
    monkeypatch.delenv("AUTOTUNE_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(vllm_backend, "installed_python", lambda: None)
    monkeypatch.setattr(vllm_backend, "missing_instructions", lambda: None)
    line = unavailable("vllm", "default", None)
    assert line is not None and "\n" not in line
    assert "vllm_install" in line and "--engines vllm" in line
    monkeypatch.setenv("AUTOTUNE_VLLM_PYTHON", str(tmp_path / "no-python"))
    assert unavailable("vllm", "default", None) == (
        f"AUTOTUNE_VLLM_PYTHON={tmp_path / 'no-python'} is not an executable file")


def test_vllm_without_avx2_refuses_before_looking_for_its_venv(monkeypatch) -> None:
    from autotune.backends.vllm_install import missing_instructions
    assert missing_instructions("flags\t: fpu sse sse2 avx") == (
        "this CPU has no AVX2, which vLLM's CPU build needs")
    assert missing_instructions("flags\t: fpu sse sse2 avx avx2") is None
    assert missing_instructions("Features\t: fp asimd") is None          # not x86


def test_vllm_needs_an_hf_folder_on_the_cpu(tiny: LoadedModel, monkeypatch, tmp_path) -> None:
    python = tmp_path / "python"
    python.write_text("")
    python.chmod(0o755)
    monkeypatch.setenv("AUTOTUNE_VLLM_PYTHON", str(python))
    with pytest.raises(BackendUnavailable, match="vLLM loads an HF folder") as caught:
        open_backend("vllm", tiny)
    assert "\n" not in str(caught.value)



def test_vllm_keeps_started_engines_idle_for_the_next_measurement(monkeypatch, tmp_path
                                                                   ) -> None:
    """A race measures its arms in several looks, one `measure_arms` each: a compiled
    vLLM engine takes a minute or more to start, so a runner's close hands its engine
    back and the next runner of the same config takes it; another config starts its
    own; the oldest idle engines beyond `idle_engines` and every one at the backend's
    close are stopped. (Engines are stand-ins here: what is under test is the pool.)"""
    from autotune.backends import vllm as vllm_backend

    started: list[FakeEngine] = []

    class FakeEngine:
        def __init__(self, python, settings, *, name, threads=None) -> None:
            self.settings, self.key, self.version, self.runner = settings, "", "0", "V1"
            self.process = self
            self.stopped = False
            started.append(self)

        def poll(self):
            return 0 if self.stopped else None

        def close(self) -> None:
            self.stopped = True

    monkeypatch.setattr(vllm_backend, "EngineProcess", FakeEngine)
    # Memory for every engine (the machine's own is read in the test below).
    monkeypatch.setattr(vllm_backend, "engines_that_fit", lambda size, most: most)
    backend = vllm_backend.VllmBackend(str(tmp_path), python=tmp_path / "python")
    assert backend.idle_engines == vllm_backend.IDLE_ENGINES
    backend.most_idle = 2
    ngram = [DecodeConfig(method="ngram", k=k, ngram_min=2, ngram_max=3) for k in (2, 3, 4)]

    first = backend.runner(ngram[0])
    first.close()
    again = backend.runner(ngram[0])
    assert again.engine is first.engine and len(started) == 1 and not first.engine.stopped
    baseline = backend.runner(DecodeConfig())
    assert baseline.engine is not again.engine and len(started) == 2
    for runner in (again, baseline, backend.runner(ngram[1]), backend.runner(ngram[2])):
        runner.close()
    assert len(started) == 4
    # Four idle, two kept: the least recently released (ngram[0]'s, the baseline's) stop.
    assert [e.stopped for e in started] == [True, True, False, False]
    backend.close()
    assert all(e.stopped for e in started)
    # A dead idle engine is never handed out again.
    fresh = backend.runner(ngram[0])
    fresh.engine.stopped = True
    fresh.close()
    assert backend.runner(ngram[0]).engine is not fresh.engine

# ------------------------------------------------------------------ retired: llama_cpp
def test_the_retired_llama_cpp_backend_names_its_replacement(tiny: LoadedModel) -> None:
    """llama-cpp-python's backend was retired for llama-server's: asking for it gets that
    one line, from the pre-load check and from opening it alike."""
    line = unavailable("llama_cpp", "default", None)
    assert line is not None and "\n" not in line
    assert "retired" in line and "llama_server" in line and "llama_server_install" in line
    with pytest.raises(BackendUnavailable) as caught:
        open_backend("llama_cpp", tiny)
    assert str(caught.value) == line


def test_vllm_keeps_idle_only_the_engines_the_available_memory_holds(monkeypatch, tmp_path
                                                                     ) -> None:
    """Issue 59: each idle vLLM engine holds about 2.9 GB; the number kept idle follows
    the memory available (leaving room for one more start), not a fixed count."""
    from autotune.backends import vllm as vllm_backend
    from autotune.common import memory

    gib = 1024**3
    backend = vllm_backend.VllmBackend(str(tmp_path), python=tmp_path / "python")
    backend.engine_bytes = 3 * gib
    for free, kept in ((40 * gib, 4), (14 * gib, 3), (8 * gib, 1), (4 * gib, 0)):
        monkeypatch.setattr(memory, "available_bytes", lambda free=free: free)
        assert backend.idle_engines == kept, free
