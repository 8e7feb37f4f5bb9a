"""The closest non-decreasing sequence to a noisy cost curve (pool adjacent violators).

Torch-free, below every layer: the replay tier's pass curves (`replay.parts`) and an
engine's profiled verify curve (`backends.profiling`) both make their curves monotone:
a pass over more tokens never costs less, so a dip in a noisy curve is noise.
"""

from __future__ import annotations

__all__ = ["isotonic"]


def isotonic(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence to `values` in least squares."""
    blocks: list[list[float]] = []           # [sum, count]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out += [s / c] * int(c)
    return out
