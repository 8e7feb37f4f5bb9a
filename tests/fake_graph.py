"""A CPU stand-in for CUDA graph capture (`autotune.models.graphs.GraphCapture`).

A captured CUDA graph replays fixed kernels on the storage it was captured over: it
reads whatever is in its input buffers at replay time, writes into the same output
tensors every time, and knows nothing of buffers made after its capture. The fake
does the same on the CPU: `capture` keeps the body (a closure over the static buffers
bound at capture) and the tensors it returned; `replay` reruns the body on those same
bindings and copies its results into the captured outputs. So a forward that fills a
new buffer, regrows a cache under a live graph, or hands out a graph's outputs without
copying them gives wrong logits here, as it would on a GPU.
"""

from __future__ import annotations

import torch

from autotune.models.graphs import Body


class FakePass:
    """One captured pass: the bound body and its output tensors."""

    def __init__(self, body: Body, outputs: tuple[torch.Tensor, ...]) -> None:
        self.body = body
        self.outputs = outputs

    def replay(self) -> None:
        for out, new in zip(self.outputs, self.body()):
            out.copy_(new)


class FakeGraphs:
    """`GraphCapture` on the CPU. `fail_at`: the capture numbers (0-based, counted over
    this object's life) that raise RuntimeError, as a capture out of memory does."""

    def __init__(self, fail_at: tuple[int, ...] = ()) -> None:
        self.fail_at = fail_at
        self.captured = 0
        self.pools = 0

    def capture(self, body: Body, new_pool: bool) -> FakePass:
        number = self.captured
        self.captured += 1
        if number in self.fail_at:
            raise RuntimeError(f"fake capture {number} failed\nsecond line")
        self.pools += new_pool
        return FakePass(body, body())
