"""Per-batch-size draft lengths: tune K at each batch size for one drafting config.

`autotune search --batch-sizes 1,2,4,...` first finds the batch-1 answer (method and
draft settings, validated as usual); this stage then keeps that method and its settings
and chooses the draft length per batch size, as the engines' schedules take it (vLLM
`num_speculative_tokens_per_batch_size`, TensorRT-LLM `draft_len_schedule`):

1. At each batch size B, every candidate K is measured on the search prompts in batches
   of B, paired against batched AR at the same B (`batch_measure.measure_batched`).
   Where the replay tier can predict the config (`screen`), every K is predicted first
   and only the most promising few are measured.
2. The chosen K at B is the smallest measured K within TIE of the highest throughput,
   when its speedup is above 1; otherwise 0 (do not speculate at B): a schedule is never
   slower than AR on the prompts it was chosen on.
3. The chosen K is re-measured on the held-out prompts (when there are at least B):
   the figure to report. A chosen K the held-out prompts do not show faster than AR
   (speedup <= 1) is turned off there; the schedule says so.

The result is the `schedule` section of best.json (format: the `schedule` property of
autotune/frozen/schemas/frozen-v3.schema.json): `ranges` (inclusive batch-size ranges with
their K, each running from one tuned batch size to the next one minus 1) and `points`
(every measurement). It is stored in the study (`SCHEDULE_ATTR`) so that a rerun of a
finished search re-measures nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from autotune.common.errors import AutotuneError
from autotune.common.interval import CI_KEY
from autotune.frozen.record import ScheduleDocument, SchedulePoint, ScheduleRangeRecord
from autotune.records.summary import MeasurementSummary
from autotune.schema.config import DecodeConfig
from autotune.records import ranking

SCHEDULE_ATTR = "schedule"
OBJECTIVE = "throughput"
# K values tried at every batch size (clipped to the space's largest K), plus the
# batch-1 answer's own K.
DEFAULT_KS = (1, 2, 3, 4, 6, 8)
# With a replay screen, how many predicted-best K values are measured per batch size.
MEASURED_PER_BATCH = 3
# Measured speedups within this fraction of the best are a tie, won by the smaller K
# (less verify work at larger batches, and a schedule that does not flip K on noise).
TIE = 0.02

# (config, prompts, batch size) -> a `measure --batch-size` summary (or its JSON).
Measure = Callable[[DecodeConfig, list[Any], int],
                   "MeasurementSummary | Mapping[str, Any]"]
# (config, batch size) -> predicted speedup, or None where it cannot predict.
Predict = Callable[[DecodeConfig, int], float | None]


class ScheduleKey(BaseModel):
    """What a stored schedule was tuned for (kept beside it as `key`): a rerun with the
    same key reuses it; best.json carries it while `trial` is the answer and no trial
    completed since."""

    model_config = ConfigDict(frozen=True)

    batch_sizes: list[int]
    ks: list[int] | None
    trial: int | None
    complete_trials: int
    search_sha256: str
    held_out_sha256: str | None
    max_new_tokens: int


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """`1,4,16` -> (1, 4, 16): distinct integers >= 1, sorted; one line otherwise."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    try:
        values = [int(part) for part in items]
    except ValueError:
        raise AutotuneError(f"--batch-sizes {text!r} is not a comma-separated list of "
                            "batch sizes, e.g. 1,2,4,8") from None
    if not values or any(v < 1 for v in values):
        raise AutotuneError(f"--batch-sizes {text!r}: every batch size must be at least 1")
    if len(set(values)) != len(values):
        raise AutotuneError(f"--batch-sizes {text!r} lists a batch size twice")
    return tuple(sorted(values))


def parse_ks(text: str) -> tuple[int, ...]:
    """`--schedule-k 1,2,4` -> (1, 2, 4): draft lengths >= 1 (0, AR, is always a
    candidate)."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise AutotuneError(f"--schedule-k {text!r} is not a comma-separated list of draft "
                            "lengths, e.g. 1,2,4") from None
    if not values or values[0] < 1:
        raise AutotuneError(f"--schedule-k {text!r}: draft lengths must be at least 1 "
                            "(K = 0, no speculation, is always compared)")
    return tuple(values)


def candidate_ks(config: DecodeConfig, largest: int | None, given: Sequence[int] | None = None
                 ) -> tuple[int, ...]:
    """The K values to try: `given`, or DEFAULT_KS up to the space's largest K, plus the
    config's own K."""
    pool = set(given) if given else {k for k in DEFAULT_KS if largest is None or k <= largest}
    return tuple(sorted(pool | {config.k}))


def ranges(chosen: dict[int, int]) -> list[ScheduleRangeRecord]:
    """{batch size: K} -> inclusive ranges {start, end, k}: each tuned batch size's K
    holds until the next tuned size; the first range starts at 1 (the smallest tuned
    size's K covers the sizes below it); neighbouring ranges of one K merge."""
    sizes = sorted(chosen)
    out: list[tuple[int, int, int]] = []           # (start, end, k)
    for i, size in enumerate(sizes):
        start = 1 if i == 0 else size
        end = sizes[i + 1] - 1 if i + 1 < len(sizes) else size
        if out and out[-1][2] == chosen[size]:
            out[-1] = (out[-1][0], end, chosen[size])
        else:
            out.append((start, end, chosen[size]))
    return [ScheduleRangeRecord(start=start, end=end, k=k) for start, end, k in out]


@dataclasses.dataclass(frozen=True)
class _Measured:
    """One measurement of the schedule: K at a batch size on one split."""

    size: int
    k: int
    split: str                     # "search" or "held_out"
    summary: MeasurementSummary


def _point(measured: _Measured, chosen: bool) -> SchedulePoint:
    """`measured` as best.json's point. K = 0 is batched AR itself (measured beside the
    first K): no second measurement, speedup 1 by definition."""
    summary, ar = measured.summary, measured.summary.ar_tokens_per_s
    if measured.k == 0:
        figures = {"speedup": 1.0, CI_KEY: None, "tokens_per_s": ar, "ar_tokens_per_s": ar,
                   "tau": 1.0, "chosen": chosen}
    else:
        figures = {"speedup": summary.speedup,
                   CI_KEY: summary.ci90.to_json() if summary.ci90 is not None else None,
                   "tokens_per_s": summary.tokens_per_s, "ar_tokens_per_s": ar,
                   "tau": summary.mean_accepted_tokens, "chosen": chosen,
                   **({"lossless": summary.lossless} if summary.lossless is not None else {})}
    return SchedulePoint.model_validate({"batch_size": measured.size, "k": measured.k,
                                         "split": measured.split, **figures})


def _pays(summary: MeasurementSummary) -> bool:
    """Faster than batched AR and lossless (a greedy config that changes the output is
    not a candidate at any speed)."""
    return (summary.speedup is not None and summary.speedup > 1.0
            and summary.lossless is not False)


def tune(config: DecodeConfig, batch_sizes: Sequence[int], ks: Sequence[int],
         search_prompts: list[Any], held_out: list[Any], measure: Measure,
         predict: Predict | None = None,
         progress: Callable[[str], None] = lambda line: None) -> ScheduleDocument:
    """The `schedule` section for `config`'s method and settings (module doc)."""
    largest = max(batch_sizes)
    if len(search_prompts) < largest:
        raise AutotuneError(f"--batch-sizes {largest} needs at least {largest} search prompts "
                            f"(batches of {largest}); the search has {len(search_prompts)}: "
                            "give more --prompts")

    def measured_at(k: int, prompts: list[Any], size: int) -> MeasurementSummary:
        return MeasurementSummary.of(measure(dataclasses.replace(config, k=k), prompts, size))

    runs: list[_Measured] = []
    chosen: dict[int, int] = {}
    for size in batch_sizes:
        paying: dict[int, float] = {}
        ar_summary = None
        for k in _screened(config, size, ks, predict):
            summary = measured_at(k, search_prompts, size)
            ar_summary = ar_summary or summary
            runs.append(_Measured(size, k, "search", summary))
            progress(f"B={size} K={k}: {_figure(summary)}")
            if _pays(summary) and summary.speedup is not None:
                paying[k] = float(summary.speedup)
        runs.append(_Measured(size, 0, "search", ar_summary or MeasurementSummary()))
        top = max(paying.values(), default=None)
        chosen[size] = min((k for k, v in paying.items() if v >= (1 - TIE) * top),
                           default=0) if top is not None else 0
    notes: list[str] = []
    for size in batch_sizes:
        k = chosen[size]
        if k == 0:
            continue
        if len(held_out) < size:
            notes.append(f"B={size}: fewer than {size} held-out prompts; K={k} is the "
                         "search's own figure")
            continue
        summary = measured_at(k, held_out, size)
        runs.append(_Measured(size, k, "held_out", summary))
        progress(f"B={size} K={k} held-out: {_figure(summary)}")
        if not _pays(summary):
            chosen[size] = 0
            notes.append(f"B={size}: K={k} was not faster than batched AR on the held-out "
                         f"prompts ({_figure(summary)}); speculation is off there")
    # A search point is chosen where its K is the batch size's final one (0 where the
    # held-out prompts turned it off); a held-out point is the chosen K's figure.
    points = [_point(run, run.split == "held_out" or run.k == chosen[run.size])
              for run in runs]
    return ScheduleDocument(method=config.method, batch_sizes=list(batch_sizes),
                            objective=OBJECTIVE, ranges=ranges(chosen), points=points,
                            notes=notes)


def _screened(config: DecodeConfig, size: int, ks: Sequence[int],
              predict: Predict | None) -> list[int]:
    """The K values to measure at `size`: every one, or with a replay screen the
    MEASURED_PER_BATCH best predicted (the config's own K always among them)."""
    if predict is None:
        return list(ks)
    predicted = {k: predict(dataclasses.replace(config, k=k), size) for k in ks}
    if any(v is None for v in predicted.values()):
        return list(ks)
    best = sorted(ks, key=lambda k: -float(predicted[k] or 0.0))[:MEASURED_PER_BATCH]
    return sorted(set(best) | {config.k})


def _figure(summary: MeasurementSummary) -> str:
    speedup, ci = summary.speedup, summary.ci90
    text = f"{speedup:.3f}x" if speedup is not None else "no speedup"
    if ci is not None:
        text += f" [{ci.low:.3f}, {ci.high:.3f}]"
    if summary.tokens_per_s is not None:
        text += f", {summary.tokens_per_s:.1f} tok/s"
    if summary.lossless is False:
        text += ", NOT lossless"
    return text


def stored_schedule(study: Any) -> tuple[ScheduleKey, ScheduleDocument] | None:
    """The schedule the study keeps (`SCHEDULE_ATTR`) and what it was tuned for; None
    without one (or with one whose key this autotune cannot read: tuned for another)."""
    stored = study.user_attrs.get(SCHEDULE_ATTR)
    if not isinstance(stored, dict):
        return None
    try:
        key = ScheduleKey.model_validate(stored["key"])
    except (KeyError, ValidationError):
        return None
    return key, ScheduleDocument.model_validate({k: v for k, v in stored.items() if k != "key"})


def store_schedule(study: Any, schedule: ScheduleDocument, key: ScheduleKey) -> None:
    """Keep `schedule` in the study with what it was tuned for (`stored_schedule`)."""
    study.set_user_attr(SCHEDULE_ATTR, {**schedule.to_json(), "key": key.model_dump()})


def current_schedule(study: Any, trial: int | None) -> ScheduleDocument | None:
    """The stored schedule of `trial` while it is current (no trial completed since), as
    best.json carries it (without its bookkeeping key)."""
    stored = stored_schedule(study)
    if stored is None:
        return None
    key, schedule = stored
    if key.trial != trial or key.complete_trials != len(ranking.complete(study)):
        return None
    return schedule
