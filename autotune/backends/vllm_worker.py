"""One vLLM engine instance in a child process, driven over JSON lines (stdin -> stdout).

Runs under vLLM's own venv (`autotune.backends.vllm_install`), so it imports nothing of
autotune: the standard library and vllm only. `autotune.backends.vllm` starts it.

Protocol (one JSON object per line; each message is declared below as a TypedDict,
the shape both processes read):
- first line in: `Settings`; out: `Ready` or `Failure`.
- then per request in: `Request`; out: `Mark` "first" as soon as the first token exists
  (the prefill's end, which the parent stamps on its own clock), `Mark` "last" when the
  last does (its end stamp; the counters are read after it, outside the timed window),
  then `Done`: the tokens, vLLM's decode time, the tokens each decode step emitted with
  the drafts it verified, and the spec-decode counters (`LLM.get_metrics()`,
  vllm/v1/metrics/reader.py) this request added; or `Failure`.

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, set by the parent), a
request at a time through `LLMEngine.add_request` / `step()`, prefix caching off (each
request pays its own prefill, as in autotune's decoder). vLLM logs to stdout, so the
protocol keeps its own copy of stdout and everything else goes to stderr (the parent's
log file).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, Literal, TypedDict, Union

COUNTERS = {"vllm:spec_decode_num_drafts": "drafts",
            "vllm:spec_decode_num_draft_tokens": "draft_tokens",
            "vllm:spec_decode_num_accepted_tokens": "accepted"}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


# ------------------------------------------------------------------ the protocol
# TypedDicts, not classes of autotune: this file runs without autotune's packages, and
# the JSON objects themselves are what the two processes exchange.

class Settings(TypedDict):
    """The first line in: what the engine is started with."""

    model: str
    dtype: str
    speculative_config: dict[str, Any] | None   # vLLM's own (the vLLM export's); None: none
    enforce_eager: bool
    max_model_len: int
    seed: int


class Request(TypedDict):
    """One generation request (token ids in, token ids out)."""

    prompt: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None                 # None: vLLM's own (greedy needs none)


class Ready(TypedDict):
    """The engine started: vLLM's version and the model runner it runs."""

    event: Literal["ready"]
    version: str
    runner: str                      # "V1" | "V2"
    startup_s: float


class Mark(TypedDict):
    """The request's first token ("first") or its last ("last") exists now."""

    event: Literal["first", "last"]


class Counters(TypedDict):
    """vLLM's spec-decode counters (totals so far, or what one request added)."""

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_pos: list[int]


class Done(Counters):
    """A request served: its tokens, vLLM's decode seconds, per decode step [tokens it
    emitted, draft tokens it verified (None: not readable)], and the counters it added."""

    event: Literal["done"]
    tokens: list[int]
    engine_decode_s: float
    steps: list[tuple[int, int | None]]


class Failure(TypedDict):
    """What went wrong, in one line (the engine did not start, or a request failed)."""

    event: Literal["error"]
    error: str


Message = Union[Ready, Mark, Done, Failure]


# ------------------------------------------------------------------ the engine


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:400]


def _counters(llm: Any) -> Counters:
    """The spec-decode counters now (zeros, and no per-position list, before any draft)."""
    totals = dict.fromkeys(COUNTERS.values(), 0)
    per_pos: list[int] = []
    for metric in llm.get_metrics():
        if metric.name in COUNTERS:
            totals[COUNTERS[metric.name]] += int(metric.value)
        elif metric.name == PER_POS:
            per_pos = [int(v) for v in metric.values]
    return Counters(drafts=totals["drafts"], draft_tokens=totals["draft_tokens"],
                    accepted=totals["accepted"], accepted_per_pos=per_pos)


def _generate(llm: Any, request: Request, request_id: str, before: Counters,
              send: Callable[[Message], None]) -> Counters:
    """Serve one request; the counters after it. The metrics are read outside the
    parent's clock: `before` was read after the previous request, and the counters
    after this one only once "last" (the parent's end stamp) has gone out."""
    from vllm import SamplingParams
    engine = llm.llm_engine
    params = SamplingParams(max_tokens=int(request["max_tokens"]),
                            temperature=float(request["temperature"]),
                            top_p=float(request["top_p"]),
                            seed=request["seed"], detokenize=False)
    engine.add_request(request_id, {"prompt_token_ids": list(request["prompt"])}, params)
    scheduler = _scheduler(engine)
    first = final = None
    # Per decode step: (tokens it emitted, draft tokens it verified). A step verifies
    # the drafts the step before it left on the request (`spec_token_ids`).
    steps: list[tuple[int, int | None]] = []
    emitted_so_far, pending = 0, None
    while engine.has_unfinished_requests():
        for output in engine.step():
            emitted = len(output.outputs[0].token_ids) if output.outputs else 0
            if first is None and emitted:
                first = time.perf_counter()
                send(Mark(event="first"))
            elif emitted > emitted_so_far:
                steps.append((emitted - emitted_so_far, pending))
            emitted_so_far = emitted
            if output.finished:
                final = output
        pending = _pending_drafts(scheduler, request_id)
    end = time.perf_counter()
    send(Mark(event="last"))
    if final is None:
        raise RuntimeError("vLLM finished no request")
    after = _counters(llm)
    per_pos = list(after["accepted_per_pos"])
    for i, value in enumerate(before["accepted_per_pos"]):
        per_pos[i] -= value
    send(Done(event="done", tokens=[int(t) for t in final.outputs[0].token_ids],
              engine_decode_s=end - (first if first is not None else end), steps=steps,
              drafts=after["drafts"] - before["drafts"],
              draft_tokens=after["draft_tokens"] - before["draft_tokens"],
              accepted=after["accepted"] - before["accepted"], accepted_per_pos=per_pos))
    return after


def _scheduler(engine: Any) -> Any:
    """The in-process engine core's scheduler (VLLM_ENABLE_V1_MULTIPROCESSING=0), or None:
    read only for the per-step draft counts, never changed."""
    core = getattr(getattr(engine, "engine_core", None), "engine_core", None)
    return getattr(core, "scheduler", None)


def _pending_drafts(scheduler: Any, request_id: str) -> int | None:
    """Draft tokens the request holds for its next step (None: not readable)."""
    requests = getattr(scheduler, "requests", None)
    if not isinstance(requests, dict):
        return None
    # vLLM keys a request by an internal id (the caller's plus a suffix); one request
    # is served at a time, so it is the only one, if it is still running.
    request = requests.get(request_id)
    if request is None and len(requests) == 1:
        request = next(iter(requests.values()))
    drafts = getattr(request, "spec_token_ids", None)
    return len(drafts) if drafts is not None else None


def main() -> int:
    # Run as a script, this folder is sys.path[0], and its vllm.py (autotune's backend)
    # would shadow the vllm package: the folder leaves the path before vllm is imported.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                           # vLLM's own prints go to the log

    def send(message: Message) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    settings: Settings = json.loads(sys.stdin.readline())
    started = time.perf_counter()
    try:
        from vllm import LLM, __version__
        llm = LLM(model=settings["model"], dtype=settings["dtype"],
                  speculative_config=settings["speculative_config"],
                  enforce_eager=bool(settings["enforce_eager"]),
                  max_model_len=int(settings["max_model_len"]), seed=int(settings["seed"]),
                  enable_prefix_caching=False, disable_log_stats=False)
        runner = "V2" if llm.llm_engine.vllm_config.use_v2_model_runner else "V1"
    except Exception as exc:                 # vLLM raises many types for a bad setting
        send(Failure(event="error", error=_one_line(exc)))
        return 1
    counters = _counters(llm)            # read before any request is timed
    send(Ready(event="ready", version=__version__, runner=runner,
               startup_s=time.perf_counter() - started))
    for number, line in enumerate(sys.stdin):
        try:
            counters = _generate(llm, json.loads(line), f"autotune-{number}", counters,
                                 send)
        except Exception as exc:
            send(Failure(event="error", error=_one_line(exc)))
            counters = _counters(llm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
