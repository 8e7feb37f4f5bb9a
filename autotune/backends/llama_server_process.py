"""One `llama-server` process on loopback: start, wait until ready, talk HTTP, stop.

A server is a child process on 127.0.0.1 at a port the OS picked free, logging to a
temporary file. It is stopped by `close()`, by `stop_all()` at interpreter exit (a
normal exit, an exception, Ctrl-C), on SIGTERM, and, should autotune itself be killed
outright, by the kernel: the child asks for SIGKILL when its parent dies
(PR_SET_PDEATHSIG, Linux). A server that dies or does not answer within its time is an
AutotuneError (one line, with the tail of its log), never a hang: every HTTP call has
a timeout. Torch-free.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict

from autotune.common.errors import AutotuneError
from autotune.exports.llama_server import Sampling

READY_TIMEOUT_S = 120.0
# One request's ceiling (a tiny model decodes hundreds of tokens per second here; a
# stuck server must not hang a search).
REQUEST_TIMEOUT_S = 300.0
LOG_TAIL_LINES = 3
_PR_SET_PDEATHSIG = 1
_LIVE: "weakref.WeakSet[ServerProcess]" = weakref.WeakSet()


class CompletionRequest(Sampling, total=False):
    """A `POST /completion` body as autotune sends it (llama.cpp tools/server/README.md):
    the sampling of `exports.llama_server.request` (`Sampling`), the prompt's token ids
    and the budget, and how the server answers (`return_tokens`: the token ids of each
    event)."""

    prompt: list[int]
    n_predict: int
    cache_prompt: bool
    return_tokens: bool
    seed: int
    stream: bool


class Timings(BaseModel):
    """The server's own `timings` of a request: its decode clock, and its drafts
    (`draft_n` / `draft_n_accepted` are absent where it drafted nothing)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    predicted_ms: float | None = None
    draft_n: int = 0
    draft_n_accepted: int = 0


class CompletionEvent(BaseModel):
    """One server-sent event of a streamed /completion: the token ids it carries; the
    last has `stop` and the request's `timings` (the server sends more: left unread)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    tokens: list[int] = []
    stop: bool = False
    timings: Timings | None = None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:                 # pragma: no cover - runs in the child
    """In the child before exec: SIGKILL it when the parent dies (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ServerProcess:
    """A running llama-server; `args` are its flags after the binary (no --host/--port)."""

    def __init__(self, binary: Path, args: Sequence[str], *, name: str = "llama-server",
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        self.name = name
        self.args = list(args)
        self.log = Path(tempfile.mkstemp(prefix="autotune-llama-server-", suffix=".log")[1])
        self.port = free_port()
        command = [str(binary), *self.args, "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        _LIVE.add(self)
        try:
            self._wait_ready(ready_timeout_s)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AutotuneError(f"{self.name} exited ({self.process.returncode}) while "
                                    f"starting: {self.log_tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                status, _ = self.request("GET", "/health", timeout_s=2.0)
                if status == 200:
                    return
            time.sleep(0.05)
        raise AutotuneError(f"{self.name} was not ready after {timeout_s:.0f} s: "
                            f"{self.log_tail()}")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The server's last error line, else the last lines of its log, as one line."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        kept = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
        errors = [line for line in kept if "error" in line.lower()]
        return (errors[-1] if errors else " | ".join(kept[-lines:])) or "(empty log)"

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                timeout_s: float = REQUEST_TIMEOUT_S) -> tuple[int, Any]:
        """One HTTP exchange; (status, the decoded JSON body or None)."""
        connection = self._connection(timeout_s)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            connection.request(method, path, body=payload,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, None

    def post(self, path: str, body: CompletionRequest) -> Any:
        """POST JSON and return the JSON answer; AutotuneError on failure."""
        try:
            status, answer = self.request("POST", path, body)
        except (OSError, http.client.HTTPException) as exc:
            raise self._failure(f"POST {path} failed ({exc})") from None
        if status != 200:
            raise self._failure(f"POST {path} answered {status}: {_error_text(answer)}")
        return answer

    def stream(self, path: str, body: CompletionRequest,
               on_chunk: Callable[[CompletionEvent], None] | None = None
               ) -> list[CompletionEvent]:
        """POST with `"stream": true`; the server-sent events, in order. `on_chunk` sees
        each as it arrives (the caller reads its clock there)."""
        chunks: list[CompletionEvent] = []
        connection = self._connection(REQUEST_TIMEOUT_S)
        try:
            connection.request("POST", path, body=json.dumps({**body, "stream": True}).encode(),
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            if response.status != 200:
                answer = response.read()
                with contextlib.suppress(ValueError):
                    answer = json.loads(answer)
                raise self._failure(f"POST {path} answered {response.status}: "
                                    f"{_error_text(answer)}")
            for chunk in _events(response):
                if on_chunk is not None:
                    on_chunk(chunk)
                chunks.append(chunk)
        except (OSError, http.client.HTTPException) as exc:
            raise self._failure(f"POST {path} failed ({exc})") from None
        finally:
            connection.close()
        return chunks

    def _failure(self, what: str) -> AutotuneError:
        alive = self.process.poll() is None
        state = "" if alive else f" (exited {self.process.returncode})"
        return AutotuneError(f"{self.name}{state}: {what}; log: {self.log_tail()}")

    def close(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 5 s) and delete its log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _LIVE.discard(self)
        with contextlib.suppress(OSError):
            self.log.unlink()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _events(response: http.client.HTTPResponse) -> Iterator[CompletionEvent]:
    """The events of server-sent `data:` lines (a line that is no event is skipped)."""
    for raw in response:
        line = raw.decode("utf-8", errors="replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            return
        with contextlib.suppress(ValueError):       # pydantic's ValidationError is one
            yield CompletionEvent.model_validate_json(data)


def _error_text(answer: Any) -> str:
    """A failed request's answer in one line: the server's `{"error": {"message": ...}}`,
    its error otherwise, or the raw answer (decoded JSON, else bytes)."""
    match answer:
        case {"error": {"message": message}}:
            text = message
        case {"error": error} if error:
            text = error
        case bytes():
            text = answer.decode(errors="replace")
        case _:
            text = answer
    return str(text)[:300]


def stop_all() -> None:
    """Stop every server this process started (at exit and on SIGTERM)."""
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.close()


def _on_sigterm(signum: int, frame: Any) -> None:      # pragma: no cover - signal path
    stop_all()
    raise SystemExit(128 + signum)


atexit.register(stop_all)
with contextlib.suppress(ValueError):   # only the main thread may set handlers
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)
