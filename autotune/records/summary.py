"""`MeasurementSummary`: one measurement's figures as a typed record, from `measure`
through `evaluate` and a trial's stored `metrics` to the report.

    summary = measurement.record()           # or MeasurementSummary.from_json(stored)
    summary.speedup, summary.ci90, summary.lossless
    summary.to_json()                        # `autotune measure --json`, as always written
    summary.stored_json()                    # what a trial keeps under `metrics`

One declared model (pydantic) instead of a dict read by key. The JSON it writes is the
JSON autotune always wrote: a summary keeps the keys it was given, in their order (figures
that do not apply to a run, an engine's clock, the near-tie baseline, are absent rather
than null), numbers as written. The speedup's 90% interval is an `Interval` named `ci90`
like every other interval; its key in this JSON stays `speedup_ci90`, the name
`autotune measure --json`, trials.csv (`metrics.speedup_ci90`) and every stored trial
already carry, so no stored record changes.

A key the summary writes must be declared here (tests/test_measure_core.py holds it to
that); keys it does not declare (a newer autotune's) are kept as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, JsonValue, PlainSerializer, PlainValidator

from autotune.common.interval import Interval
from autotune.common.records import JsonRecord, Number
from autotune.frozen.record import CategoryFigures

__all__ = ["IntervalJson", "MeasurementSummary", "STORED_LISTS"]

# An interval as JSON writes it (`[low, high]` or null), an `Interval` in code (given
# as either).
IntervalJson = Annotated[
    Interval | None,
    PlainValidator(lambda ci: ci if isinstance(ci, Interval) else Interval.from_json(ci)),
    PlainSerializer(lambda ci: ci.to_json() if ci is not None else None)]

# The list figures a trial stores (cut to their first 64 entries); other lists and
# mappings are left out of its `metrics`, or kept as the scalars they sum to.
STORED_LISTS = ("pos_acc", "depth_acceptance", "mismatched_prompts", "near_tie_prompts",
                "speedup_ci90", "replay_notes")


class MeasurementSummary(JsonRecord):
    """One `measure` call's figures (or a replay prediction's, or a trial's stored
    `metrics`). Latencies are ms per generated token of the decode phase; `speedup` the
    paired statistic (AR over candidate) with its 90% interval `ci90`; engine-only
    figures (`engine_*`) where the engine reports its own clock; None where a figure does
    not apply (no rounds, an engine's untimed parts). Declared in the order written."""

    config: dict[str, JsonValue] | None = None      # DecodeConfig.to_dict()
    model: str | None = None
    draft: str | None = None
    measured_by: str | None = None
    measured_by_label: str | None = None
    device: str | None = None
    dtype: str | None = None
    prompts: int | None = None
    runs: int | None = None
    max_new_tokens: int | None = None
    tokens_generated: int | None = None
    latency_ms_per_token: Number | None = None
    baseline_latency_ms_per_token: Number | None = None
    speedup: Number | None = None
    ci90: IntervalJson = Field(default=None, alias="speedup_ci90")
    prefill_ms: Number | None = None
    baseline_prefill_ms: Number | None = None
    rounds: int | None = None
    mean_accepted_tokens: Number | None = None      # τ
    acceptance_rate: Number | None = None
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None
    engine_latency_ms_per_token: Number | None = None
    engine_baseline_latency_ms_per_token: Number | None = None
    engine_speedup: Number | None = None
    pos_acc: list[Number] | None = None
    depth_acceptance: list[Number] | None = None
    mean_verified_tokens: Number | None = None
    draft_time_share: Number | None = None
    acceptance_alpha: Number | None = None
    mean_drafted_tokens: Number | None = None
    cost_ratio: Number | None = None                # Leviathan's c
    draft_ms_per_token: Number | None = None
    verify_ms_per_token: Number | None = None
    other_ms_per_token: Number | None = None
    baseline_draft_ms_per_token: Number | None = None
    baseline_verify_ms_per_token: Number | None = None
    baseline_other_ms_per_token: Number | None = None
    peak_memory_mb: Number | None = None
    memory_kind: str | None = None
    # Greedy low precision in our decoder: AR against itself decoded in chunks (runs per
    # verdict kind), and whether the config's near-tie prompts are far above it.
    near_tie_baseline: dict[str, int] | None = None
    near_ties_far_above: bool | None = None
    lossless: bool | None = None
    lossless_tier: str | None = None
    mismatched_prompts: list[str] | None = None
    near_tie_prompts: list[str] | None = None
    divergences: dict[str, int] | None = None
    lossless_binding: bool | None = None
    # Our decoder's static forwards: "cuda graphs", "eager" or "eager (capture failed:
    # ...)" for the whole run; graphs captured inside this arm's and the baseline's
    # timed runs (must be 0). None where no static forward ran.
    graphs: str | None = None
    graph_captures_timed: int | None = None
    by_category: dict[str, CategoryFigures] | None = None
    # Added by the search's evaluation: the passes pooled, and which tier the figures
    # come from ("measure", or "replay" with whether τ is exact and what is not).
    repeats: int | None = None
    fidelity: str | None = None
    replay_exact: bool | None = None
    replay_notes: list[str] | None = None
    agreement: Number | None = None
    agreement_positions: int | None = None
    # A trial's stored figures only (`stored_json`): runs that left AR's output at a
    # near-tie / for real, and each category's speedup.
    near_ties: int | None = None
    real_divergences: int | None = None
    speedup_by_category: dict[str, Number | None] | None = None
    # The AR baseline trial's speedup against itself (its `speedup` is 1 by definition).
    self_speedup: Number | None = None
    # `measure --batch-size` (measure/batched.py): batches of `batch_size` rows against
    # batched AR, throughput in generated tokens per second, τ per row, verify passes.
    batch_size: int | None = None
    batches: int | None = None
    unused_prompts: int | None = None
    tokens_per_s: Number | None = None
    ar_tokens_per_s: Number | None = None
    tau_per_row: list[Number] | None = None
    verify_passes: int | None = None
    mean_verify_width: Number | None = None

    @classmethod
    def from_json(cls, doc: Any) -> MeasurementSummary:
        """A summary as written (`autotune measure --json`, a trial's `metrics`); an
        empty one for anything that is not a mapping (a trial that never ran)."""
        return cls.model_validate(dict(doc) if isinstance(doc, Mapping) else {})

    @classmethod
    def of(cls, figures: MeasurementSummary | Mapping[str, Any]) -> MeasurementSummary:
        """`figures` as a record: itself, or a summary's JSON read with `from_json`."""
        return figures if isinstance(figures, MeasurementSummary) else cls.from_json(figures)

    def with_figures(self, **figures: Any) -> MeasurementSummary:
        """A copy with `figures` set (by attribute name), each new one written after the
        keys it had, in declared order."""
        return self.model_copy(update=figures)

    def figure(self, name: str) -> Any:
        """The figure an objective or a constraint names (a key of this JSON: `speedup`,
        `agreement`, `peak_memory_mb`, ...); None where this summary has none."""
        if name in type(self).model_fields:
            return getattr(self, name)
        return (self.model_extra or {}).get(name)

    @property
    def measured(self) -> bool:
        """Figures that were measured (decoded and timed), not predicted by replay."""
        return self.fidelity != "replay"

    def stored_json(self) -> dict[str, Any]:
        """What a trial stores under `metrics`: the scalars (non-finite numbers as null),
        the short per-position lists, and the divergences and categories as scalars."""
        doc = self.to_json()
        keep: dict[str, Any] = {}
        for key, value in doc.items():
            if key == "config":
                continue
            if isinstance(value, (int, float, str, bool)) or value is None:
                keep[key] = None if isinstance(value, float) and not math.isfinite(value) else value
            elif key in STORED_LISTS:
                keep[key] = list(value)[:64]
            elif key == "divergences" and self.divergences is not None:
                # Runs that left AR's output at a near-tie / for real (trials.csv columns).
                # Only where near-ties are allowed (bf16 / fp16); float32 must be exact.
                if self.lossless_tier not in (None, "exact"):
                    keep["near_ties"] = self.divergences.get("near_tie")
                    keep["real_divergences"] = self.divergences.get("real")
            elif key == "by_category" and self.by_category is not None:
                # Each category's speedup only (the report's per-category drafter panel).
                keep["speedup_by_category"] = {
                    str(c): figures.speedup for c, figures in list(self.by_category.items())[:64]}
        return keep
