"""Helpers the held-out benches share: tuning a grid by replay, the per-round triples
replay is checked on, and one arm's row of held-out figures."""

from __future__ import annotations

from typing import Callable

from autotune.schema.config import DecodeConfig
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


def arm_row(workload: str, name: str, label: str, measured, replayed) -> dict:
    """One arm's held-out figures (`measured`: its `measure_arms` result) beside its
    replay over the same prompts in the same order (`replayed`)."""
    pairs = [run.pair() for run in measured.runs]
    ci = paired.interval(pairs)
    equal = sum(round_triples(run.candidate.rounds) == round_triples(sim.candidate.rounds)
                for run, sim in zip(measured.runs, replayed.runs))
    summary = measured.summary()
    return {
        "workload": workload, "arm": name, "config": label,
        "speedup": paired.speedup(pairs), "ci90_low": ci[0] if ci else None,
        "ci90_high": ci[1] if ci else None, "tau": paired.tau(pairs),
        "acceptance": summary.get("acceptance_rate"),
        "ms_per_token": summary.get("latency_ms_per_token"),
        "replay_tau": paired.tau([run.pair() for run in replayed.runs]),
        "replay_rounds_equal": f"{equal}/{len(replayed.runs)}",
        "lossless": all(run.candidate.tokens == run.baseline.tokens for run in measured.runs)}
