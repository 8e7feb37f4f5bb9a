"""The parts of a validation record (`autotune.records.validation.ValidationRecord`): a
finalist's figures and its entry, a judgement, a look of the race, the race's log and the
AR baseline's figures.

Each part writes the JSON the study has always kept, with the keys it was given
(pydantic's `model_fields_set`). Two parts of the JSON are flat where the records nest
them: a finalist's figures sit in its entry beside who it is, and the prediction-powered
figures (`POOLED_FIGURES`) among the figures, only where given. A before-validator nests
them on read and a serializer flattens them on write.

Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Callable, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    model_serializer,
    model_validator,
)

from autotune.common.interval import CI_KEY
from autotune.common.records import Number, parse_record
from autotune.records.summary import IntervalJson

__all__ = ["POOLED_FIGURES", "Baseline", "FinalistEntry", "FinalistFigures", "Judgement",
           "JudgementJson", "Look", "RaceLog"]

# The prediction-powered figures (`ppi.PoolEstimate.to_json`) besides speedup, interval
# and estimator, in the order written.
POOLED_FIGURES = ("ppi_lambda", "pool_prompts", "measured_speedup", "measured_ci90",
        "predicted_speedup")

def is_empty(value: Any) -> bool:
    return not value


class RecordPart(BaseModel):
    """A part of the record: frozen, its fields also given by their attribute name
    (`interval=` for `ci90`), keys it does not declare dropped (as its readers always
    did)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    def to_json(self) -> dict[str, Any]:
        """The part as the study keeps it: the keys it was given, in declared order."""
        return self.model_dump(mode="python", by_alias=True, exclude_unset=True)

    def written(self, key: str) -> bool:
        """The key `key` (as written: `ci90`) was given: read from the stored record, or
        set by the code that built it (older records lack some)."""
        fields = type(self).model_fields
        name = next((n for n, f in fields.items() if f.alias == key), key)
        return name in self.model_fields_set


class FinalistFigures(RecordPart):
    """A finalist's validation figures (`finalist_figures.figures`), or a validation
    summary's kept part in a record written before races."""

    latency_ms_per_token: Number | None = None
    baseline_latency_ms_per_token: Number | None = None
    mean_accepted_tokens: Number | None = None
    acceptance_rate: Number | None = None
    lossless: bool | None = None          # greedy: no real divergence; None: sampling
    lossless_binding: bool | None = None  # False: the engine's own numerics may differ
    mismatched_prompts: list[str] = Field(default_factory=list)
    near_tie_prompts: list[str] = Field(default_factory=list)
    divergences: dict[str, int] | None = None   # per divergence kind; None: sampling
    look_level: Number | None = None
    measured_prompts: int | None = None
    speedup: Number | None = None
    interval: IntervalJson = Field(default=None, alias=CI_KEY)
    estimator: str | None = None          # "measured" or "ppi++"
    # ppi++ only: `POOLED_FIGURES`'s figures (the weight, the pool, measured / predicted
    # alone), written flat among the others.
    pooled: dict[str, JsonValue] = Field(default_factory=dict)
    # Per workload category: the figures above for its prompts (`CategoryFigures`' keys).
    by_category: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _nest_pooled(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and any(key in data for key in POOLED_FIGURES):
            data = {**data, "pooled": {k: data[k] for k in POOLED_FIGURES if k in data}}
        return data

    @model_serializer(mode="wrap")
    def _flat_pooled(self, handler: Callable[[Any], Any]) -> Any:
        out = handler(self)
        pooled = out.pop("pooled", None) or {}
        if pooled:
            # Written before `by_category`, as ppi's figures always were.
            last = {key: out.pop(key) for key in ("by_category",) if key in out}
            out.update(pooled)
            out.update(last)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FinalistFigures:
        """Figures as written (an entry's, or a frozen config's `validation`)."""
        return parse_record(cls, data, "validation figures")

    def has(self, key: str) -> bool:
        """The figure under `key` was written (older records lack some)."""
        return self.written(key)

    def shown_faster(self) -> bool:
        """Validated faster than the AR baseline: lossless (where checked) and the whole
        interval above 1.0."""
        return (not self.refused_as_lossy() and self.interval is not None
                and self.interval.above(1.0))

    def refused_as_lossy(self) -> bool:
        """Its greedy output differed from the baseline's in an engine where that counts
        (`lossless_binding` is False only where the engine's multi-token numerics
        differ)."""
        return self.lossless is False and self.lossless_binding is not False

    def below(self, worth: float) -> bool:
        """Its whole interval lies below `worth` (a finalist without one, measured on one
        prompt, never does: one prompt decides nothing)."""
        return self.interval is not None and self.interval.below(worth)

    def speedup_json(self) -> dict[str, Number | list[float] | None]:
        """The speedup and its interval as a figures mapping (`speedup_text` reads it)."""
        return {"speedup": self.speedup,
                CI_KEY: self.interval.to_json() if self.interval is not None else None}


class FinalistEntry(RecordPart):
    """One raced finalist in the record: who it is (`finalists.Finalist`'s fields), its
    last figures (written flat beside them), and the look it was dropped after (None:
    raced to the end)."""

    trial: int
    label: str
    role: str | None = None
    preset: str | None = None
    params: dict[str, JsonValue] = Field(default_factory=dict)
    search: dict[str, JsonValue] = Field(default_factory=dict)
    # None: autotune's own (its entries carry no `engine` key).
    engine: str | None = Field(default=None, exclude_if=lambda engine: engine is None)
    figures: FinalistFigures = Field(default_factory=FinalistFigures)
    dropped_after: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _nest_figures(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "figures" not in data:
            own = cls.model_fields.keys() - {"figures"}
            data = {**{k: v for k, v in data.items() if k in own},
                    "figures": {k: v for k, v in data.items() if k not in own}}
        return data

    @model_serializer(mode="wrap")
    def _flat_figures(self, handler: Callable[[Any], Any]) -> Any:
        out = handler(self)
        figures = out.pop("figures", {})
        last = {key: out.pop(key) for key in ("dropped_after",) if key in out}
        out.update(figures)
        out.update(last)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FinalistEntry:
        """An entry as the record writes it (its figures flat beside who it is)."""
        return parse_record(cls, data, "validation finalist")

    @property
    def arm(self) -> str:
        """Its race arm (`finalists.Finalist.arm`)."""
        own = f"trial{self.trial}"
        return own if self.engine is None else f"{self.engine}.{own}"

    @property
    def speedup(self) -> float | None:
        return self.figures.speedup

    def headline(self) -> str:
        """`trial 3 (ngram k=4 n=2..3) 1.118x [1.065, 1.172]` (judge's reasons)."""
        ci = self.figures.interval
        return (f"trial {self.trial} ({self.label}) {self.speedup:.3f}x "
                f"{ci if ci is not None else '(no interval)'}")


class Judgement(NamedTuple):
    """A decision over a group of finalists (`finalists.judge`): SPECULATE with its
    winning trial, DO_NOT_SPECULATE or UNDECIDED (no winner), and why in one line."""

    decision: str
    winner: int | None
    reason: str


# A judgement as the record writes it (an engine's, under `engines`).
JudgementJson = Annotated[Judgement, PlainSerializer(lambda judged: judged._asdict())]


class Look(RecordPart):
    """One look of a race: the prompts measured by then, its interval level, the arms
    racing in it and those it dropped."""

    prompts: int
    level: float
    active: list[str]
    dropped: list[str]


class RaceLog(RecordPart):
    """How a race went: why it stopped ("sample", "decided", "budget", ...), prompts
    measured, its looks, the error spent, its time budget and spending rule, and the
    twins measured once (arm -> the arm whose runs it took; written where there are)."""

    stopped: str
    measured: int
    looks: list[Look]
    alpha_spent: float
    budget_s: Number | None
    spending: str | None
    twins: dict[str, str] = Field(default_factory=dict, exclude_if=is_empty)

    def dropped_after(self, arm: str) -> int | None:
        """The prompts measured at the look that dropped `arm` (None: never dropped)."""
        return next((look.prompts for look in self.looks if arm in look.dropped), None)


class Baseline(RecordPart):
    """The AR baseline's figures in the race (`baseline`)."""

    latency_ms_per_token: Number | None


