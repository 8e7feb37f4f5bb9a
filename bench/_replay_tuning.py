"""Helpers the held-out benches share: tuning a grid by replay, and the per-round
triples replay is checked on."""

from __future__ import annotations

from typing import Callable

from autotune.decoding.config import DecodeConfig
from autotune.measure import paired
from autotune.replay.run import Replayer


def tune_by_replay(replayer: Replayer, grid: list[dict],
                   make: Callable[[dict], DecodeConfig]) -> tuple[DecodeConfig, float]:
    """The grid's config of highest predicted speedup on the replayer's prompts."""
    best: tuple[DecodeConfig, float] | None = None
    for params in grid:
        config = make(params)
        predicted = paired.speedup([run.pair() for run in replayer.replay(config).runs])
        if predicted is not None and (best is None or predicted > best[1]):
            best = (config, predicted)
    assert best is not None
    return best


def round_triples(rounds) -> list[tuple[int, int, int]]:
    """(drafted, accepted, emitted) per round: what replay must reproduce."""
    return [(r.drafted, r.accepted, r.emitted) for r in rounds]
