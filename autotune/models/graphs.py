"""How the static forward captures a pass: the one place that touches CUDA graphs.

Why an interface: what a captured graph gets wrong (a buffer replaced after capture, a
cache regrown under a live graph, outputs overwritten by the next replay) is a question
of which storage the graph was bound to, not of CUDA. `GraphCapture` is what
`StaticLlamaForward` asks for, `CudaGraphCapture` is what it gets on a GPU, and a CPU
fake (tests/fake_graph.py) that binds the body's inputs at capture and re-runs the body
on them at replay stands in for it in the tests.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

Body = Callable[[], tuple[torch.Tensor, ...]]


class CapturedPass(Protocol):
    """One captured pass. `replay()` reruns it on the storage it was captured over and
    writes into `outputs` (the same tensors every replay: valid until the next one)."""

    outputs: tuple[torch.Tensor, ...]

    def replay(self) -> None:
        ...


class GraphCapture(Protocol):
    """Captures fixed-shape passes. `capture(body, new_pool)` runs `body` (a closure over
    static buffers) into a replayable pass; `new_pool`: no earlier graph is alive, so
    the capture must not share a pool whose graphs are all gone. Raises RuntimeError
    when the capture fails."""

    def capture(self, body: Body, new_pool: bool) -> CapturedPass:
        ...


class _CudaPass:
    def __init__(self, graph: "torch.cuda.CUDAGraph", outputs: tuple[torch.Tensor, ...]):
        self.graph = graph
        self.outputs = outputs

    def replay(self) -> None:
        self.graph.replay()


class CudaGraphCapture:
    """`torch.cuda.CUDAGraph` capture, every graph in one shared memory pool."""

    def __init__(self) -> None:
        self._pool: Any = None

    def pool(self, new_pool: bool) -> Any:
        """The pool the next capture shares with the live graphs.

        A pool lives while a graph that shares it does: once every graph is gone (a
        cache regrown, graphs evicted), capturing into the old handle trips the CUDA
        caching allocator's `use_count > 0` assert, so a capture with no live graph
        takes a new pool.
        """
        if self._pool is None or new_pool:
            self._pool = torch.cuda.graph_pool_handle()
        return self._pool

    def capture(self, body: Body, new_pool: bool) -> CapturedPass:
        pool = self.pool(new_pool)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):   # kernel selection and allocator growth, uncaptured
                body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            outputs = body()
        return _CudaPass(graph, outputs)
