"""measure/measurement.py reads a runner through `backends/base.Runner` alone (issue 62):
any runner's static forwards are counted and its reserve decides the warm-up, whatever
its class; `RunnerBase` gives an engine's runner none."""

from __future__ import annotations

import ast
import inspect

from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

import autotune.measure.measurement as measurement
from autotune.backends.base import BackendBase, RunnerBase
from autotune.decoding.decoder import Generation, RoundTrace
from autotune.measure.measurement import measure_arms
from autotune.schema.config import DecodeConfig
from autotune.workloads.prompts import Prompt

PROMPTS = [Prompt("t1 t2 t3", "default", "p0"), Prompt("t4 t5 t6 t7", "default", "p1")]


class _Forward:
    """A static forward as a measurement reads it: its captures and its mode."""

    def __init__(self) -> None:
        self.captures = 0
        self.reserved: list[int] = []

    def graph_mode(self) -> str:
        return "fake graphs"


class _Runner(RunnerBase):
    """Not our decoder: a runner whose static forward captures one graph per call
    until its cache is reserved."""

    def __init__(self, forward: _Forward) -> None:
        self.forward = forward

    def generate(self, prompt, max_new_tokens, clock, generator=None, *, category=None):
        if not self.forward.reserved:
            self.forward.captures += 1              # captured inside this call
        tokens = [1] * max_new_tokens
        return Generation(prompt_len=len(prompt), tokens=tokens, prefill_s=0.01,
                          decode_s=0.01 * max_new_tokens,
                          rounds=[RoundTrace(0, 0, 1, [], 0.0, 0.01, 1)
                                  for _ in tokens[1:]], cache_bytes=0)

    def static_forwards(self, categories=(None,)):
        return {"fake": self.forward}

    def reserve(self, prompt_len, max_new_tokens, categories=(None,)):
        grew = not self.forward.reserved
        self.forward.reserved.append(prompt_len + max_new_tokens)
        return grew


class _Backend(BackendBase):
    name, label, device = "fake", "a fake engine", "cpu"
    memory_kind, token_exact = "not measured", True

    def __init__(self) -> None:
        self.forward = _Forward()
        self.warmed = 0

    def runner(self, config: DecodeConfig) -> _Runner:
        return _Runner(self.forward)

    def weights_bytes(self, config: DecodeConfig) -> None:
        return None


def test_any_runners_static_forwards_and_reserve_are_read() -> None:
    backend = _Backend()
    result = measure_arms(tiny_llama(0), {"arm": DecodeConfig(method="ngram")}, PROMPTS, 4,
                          backend=backend, warm_up=False)["arm"]
    # Reserved for the longest prompt before anything ran (so no capture was timed).
    assert backend.forward.reserved and backend.forward.captures == 0
    assert (result.graphs, result.graph_captures_timed) == ("fake graphs", 0)


def test_an_engines_runner_has_no_static_forward_to_reserve() -> None:
    runner = RunnerBase()
    assert runner.static_forwards({"default"}) == {} and not runner.reserve(10, 4)


def test_measurement_asks_no_runner_its_class() -> None:
    tree = ast.parse(inspect.getsource(measurement))
    asked = [ast.unparse(node) for node in ast.walk(tree)
             if isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance"]
    assert asked == []
    assert "SpeculativeDecoder" not in inspect.getsource(measurement)
