"""`MeasurementSummary`: the JSON of `autotune measure` and of every measured trial's
`metrics` (`Measurement.summary()`), declared key by key.

A TypedDict, not a dataclass, because the JSON shape is the point: it is printed by
`autotune measure --json`, stored in each trial's user attributes, and read back by the
search, the report and the exports by key (an objective names its metric by key). A key
the summary writes must be declared here (tests/test_measure_core.py holds it to that).
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["MeasurementSummary"]


class MeasurementSummary(TypedDict, total=False):
    """One `measure` call's figures. Latencies are ms per generated token of the decode
    phase; `speedup` the paired statistic (AR over candidate) with its 90% interval
    `speedup_ci90`; engine-only figures (`engine_*`) where the engine reports its own
    clock; None where a figure does not apply (no rounds, an engine's untimed parts)."""

    config: dict[str, Any]
    model: str
    draft: str | None
    measured_by: str
    measured_by_label: str
    device: str
    dtype: str
    prompts: int
    runs: int
    repeats: int                     # set by the search's evaluation
    max_new_tokens: int
    tokens_generated: int
    latency_ms_per_token: float | None
    baseline_latency_ms_per_token: float | None
    speedup: float | None
    speedup_ci90: list[float] | None
    prefill_ms: float
    baseline_prefill_ms: float
    rounds: int
    mean_accepted_tokens: float | None      # τ
    acceptance_rate: float | None
    drafted_tokens: int
    accepted_tokens: int
    engine_latency_ms_per_token: float | None
    engine_baseline_latency_ms_per_token: float | None
    engine_speedup: float | None
    pos_acc: list[float]
    depth_acceptance: list[float]
    mean_verified_tokens: float | None
    draft_time_share: float | None
    acceptance_alpha: float | None
    mean_drafted_tokens: float | None
    cost_ratio: float | None                # Leviathan's c
    draft_ms_per_token: float | None
    verify_ms_per_token: float | None
    other_ms_per_token: float | None
    baseline_draft_ms_per_token: float | None
    baseline_verify_ms_per_token: float | None
    baseline_other_ms_per_token: float | None
    peak_memory_mb: float | None
    memory_kind: str
    lossless: bool | None
    lossless_tier: str | None
    mismatched_prompts: list[str]
    near_tie_prompts: list[str]
    divergences: dict[str, int] | None
    # Greedy low precision in our decoder: AR against itself decoded in chunks (runs per
    # verdict kind), and whether the config's near-tie prompts are far above it.
    near_tie_baseline: dict[str, int]
    near_ties_far_above: bool
    lossless_binding: bool
    # Our decoder's static forwards: "cuda graphs", "eager" or "eager (capture failed:
    # ...)" for the whole run; graphs captured inside this arm's and the baseline's
    # timed runs (must be 0). None where no static forward ran.
    graphs: str | None
    graph_captures_timed: int | None
    by_category: dict[str, dict[str, Any]]
