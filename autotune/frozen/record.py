"""best.json as a typed record: `FrozenConfig`, its one reader and its one writer.

    record = checks.load_frozen_config("runs/x/best.json")   # checked, upgraded, typed
    record.config.k, record.model.n_layers, record.validation.decision
    record.engine_answer("vllm")                        # that engine's answer, or None
    write_frozen(path, record)                          # the file, as autotune writes it

One declared model of the current version (`schema.SCHEMA`), nested records for each
part (models, hardware, workload, provenance, objective, metrics, validation, schedule,
the per-engine answers). Older versions are read through `upgrade`, the one place that
knows how a version differs from the next; readers never look at the version.

The writer is byte-identical to the dicts autotune always wrote: a record keeps the keys
it was given (`exclude_unset`), in the order it was given them (a record built in code:
its declared order, which is best.json's), and numbers as written (`Number`: an int
stays an int). Keys a part does not declare (a newer autotune's, a figure only some
records carry) are kept as they are (`extra="allow"`). The structure of a file is checked
by its version's JSON Schema (`checks.problems`, in `checks.load_frozen_config`), so the models
accept what the schemas accept and leave required-ness to them (a part given alone, as a
library caller or a test builds it, reads too); `params` is parsed by
`config_from_mapping`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Union

from pydantic import (
    Field,
    PlainSerializer,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    field_validator,
)

from autotune.common.errors import AutotuneError
from autotune.common.files import write_atomically
from autotune.common.interval import Interval, speedup_text
# Declared in common.records (shared by measure/ and search/); named here too for
# the readers of best.json that import them from this module.
from autotune.common.records import JsonRecord as JsonRecord
from autotune.common.records import Number as Number
from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.frozen.schema import READABLE, SCHEMA

__all__ = ["AnswerBasis", "BasisKind", "CategoryFigures", "DecoderPrediction", "FileRef", "FinalistFigures", "FrozenConfig",
           "FrozenContext", "HardwareRecord", "KnobValue", "Metrics", "ModelRecord", "Number",
           "ObjectiveRecord", "ParetoPoint", "ProvenanceRecord", "RaceLook", "RaceRecord",
           "PredictedWhy", "ScheduleDocument", "SchedulePoint", "ScheduleRangeRecord",
           "Validation", "WorkloadRecord", "dumps", "upgrade", "write_frozen"]

# A config key's JSON value (`DecodeConfig.to_dict`): scalars, layer lists, tree paths.
KnobValue = Union[int, float, str, bool, None, list[int], list[float], list[list[int]]]
# A search figure as written: a number, a label or flag, a layer list.
FigureValue = Union[int, float, str, bool, None, list[int], list[float], list[str]]


class Figures(JsonRecord):
    """A speedup with its 90% interval (`ci90`, as written) and the figures beside it."""

    speedup: Number | None = None
    ci90: list[Number] | None = None
    mean_accepted_tokens: Number | None = None
    # The config the figures are of, where they are a finalist's (or a prediction's).
    label: str | None = None

    @property
    def interval(self) -> Interval | None:
        """The speedup's interval; None where there is none (one prompt, the baseline)."""
        return Interval.from_json(self.ci90)

    def speedup_text(self, missing: str = "-") -> str:
        """`1.118x [1.065, 1.172]` (`common.interval.speedup_text`), `missing` without a
        speedup."""
        return speedup_text(self.to_json(), missing)


class ModelRecord(JsonRecord):
    """The `model` (or `draft`) entry: `environment.model_record`."""

    id: str | None = None
    spec: str | None = None
    path: str | None = None
    sha256: str | None = None
    hash_of: str | None = None
    dtype: str | None = None
    n_layers: int | None = None
    model_type: str | None = None


class HardwareRecord(JsonRecord):
    """The `hardware` entry: `environment.hardware_of`."""

    device: str | None = None
    device_name: str | None = None
    cpu: str | None = None
    threads: int | None = None
    torch: str | None = None
    cuda: str | None = None
    transformers: str | None = None
    python: str | None = None


class WorkloadRecord(JsonRecord):
    """The workload the config was tuned on (`sha256`: over the loaded prompts)."""

    source: str | None = None
    categories: list[str] | None = None
    prompts: int | None = None
    max_new_tokens: int | None = None
    temperature: Number | None = None
    top_p: Number | None = None
    seed: int | None = None
    sha256: str | None = None


class FileRef(JsonRecord):
    """A space or objective file: its name, where it was read and its hash."""

    name: str | None = None
    file: str | None = None
    sha256: str | None = None


class ProvenanceRecord(JsonRecord):
    """How the config was made: the run's settings and, for a trial, its number,
    preset and label."""

    autotune_version: str | None = None
    created: str | None = None
    space: FileRef | None = None
    objective: FileRef | None = None
    sampler: str | None = None
    seed: int | None = None
    study: str | None = None
    storage: str | None = None
    command: str | None = None
    trial: int | None = None
    preset: str | None = None
    label: str | None = None
    optuna_params: dict[str, KnobValue] | None = None


class FrozenContext(JsonRecord):
    """What every frozen config of a run records besides its knobs and figures: the
    model and draft, the hardware, the workload and the run's provenance (run.json's
    `frozen`, built by the pipeline). A part given (a `draft` of None: no draft model)
    is written into each config; one left out is not."""

    model: ModelRecord | None = None
    draft: ModelRecord | None = None
    hardware: HardwareRecord | None = None
    workload: WorkloadRecord | None = None
    provenance: ProvenanceRecord | None = None

    @classmethod
    def of(cls, context: FrozenContext | Mapping[str, Any] | None) -> FrozenContext:
        """`context` as a record: itself, run.json's `frozen` entry read, or an empty
        one (no context: a config built without a run)."""
        if isinstance(context, FrozenContext):
            return context
        return cls.model_validate(dict(context or {}))


class ObjectiveRecord(JsonRecord):
    """The objective the trial was chosen by, and its values there."""

    name: str | None = None
    metrics: list[str] | None = None
    directions: list[str] | None = None
    values: dict[str, Number | None] | None = None


class Metrics(JsonRecord):
    """What was measured (`metrics`): the search's figures of the config. The usual
    figures are declared; the rest of a measurement's summary is kept as written."""

    speedup: Number | None = None
    latency_ms_per_token: Number | None = None
    baseline_latency_ms_per_token: Number | None = None
    mean_accepted_tokens: Number | None = None
    acceptance_rate: Number | None = None
    fidelity: str | None = None


class ParetoPoint(JsonRecord):
    """A trial on the Pareto front (several objectives)."""

    trial: int | None = None
    preset: str | None = None
    label: str | None = None
    values: dict[str, Number | None] | None = None
    params: dict[str, KnobValue] | None = None
    optuna_params: dict[str, KnobValue] | None = None
    metrics: Metrics | None = None


class CategoryFigures(Figures):
    """One workload category's figures (`by_category`)."""

    prompts: int | None = None
    estimator: str | None = None
    measured_prompts: int | None = None


class FinalistFigures(Figures):
    """One finalist's held-out figures, as the evidence under `validation.finalists`."""

    trial: int | None = None
    role: str | None = None
    preset: str | None = None
    search: dict[str, FigureValue] | None = None
    lossless: bool | None = None
    by_category: dict[str, CategoryFigures] | None = None
    estimator: str | None = None
    dropped_after: int | None = None


class DecoderPrediction(Figures):
    """An engine's answer raced in the engine itself: what autotune's decoder predicted
    for it (`validation.decoder_prediction`)."""

    decision: str | None = None
    measured_by: str | None = None
    measured_by_label: str | None = None
    trial: int | None = None


# Where an answer's figures come from: measured (decoded and timed in `measured_in`),
# or predicted (autotune's decoder under the engine's drafting rules stands in for it).
BasisKind = Literal["measured", "predicted"]
# Why an engine's answer is autotune's decoder's prediction rather than a measurement in
# the engine itself: not installed here; a GPU engine that cannot run here; an input it
# cannot run (a model it cannot read); its race in itself skipped by the time budget;
# its race failed (to start, or midway); no finalist to race; races in the engines
# themselves turned off (AUTOTUNE_ENGINE_RACES=0); not recorded (a run before v6).
PredictedWhy = Literal["not_installed", "gpu_engine", "unsupported_input", "budget",
                       "failed", "no_finalist", "races_off", "not_raced"]
# The words of each `PredictedWhy` (`AnswerBasis.text`).
_WHY_TEXT = {"not_installed": "not installed here",
             "gpu_engine": "a GPU engine that cannot run here",
             "unsupported_input": "it cannot run this model here",
             "budget": "its race in itself was skipped by the time budget",
             "failed": "its race in itself failed",
             "no_finalist": "it had no finalist to race in itself",
             "races_off": "races in the engines themselves were off",
             "not_raced": "not raced in itself"}


class AnswerBasis(JsonRecord):
    """What an answer's figure is (v6 `validation.basis`): measured, in which engine
    (`measured_in`: "autotune" for autotune's own decoder; `label`: the backend as it
    names itself, version and mode where known), or predicted by autotune's decoder under
    the engine's rules, and why (`why`, with the one line `detail` the engine or the
    failure gave; skipped by the budget: the seconds its start-up `needed_s` and the
    seconds it `had_s`)."""

    kind: BasisKind
    measured_in: str
    label: str | None = None
    why: PredictedWhy | None = None
    detail: str | None = None
    needed_s: Number | None = None
    had_s: Number | None = None

    @property
    def predicted(self) -> bool:
        return self.kind == "predicted"

    def text(self) -> str:
        """One line: `measured in vLLM 0.32 (CPU, eager) itself`, `measured in
        autotune's decoder`, `predicted by autotune's decoder: its race in itself was
        skipped by the time budget (needed 95 s, had 40 s)`."""
        if not self.predicted:
            if self.measured_in == "autotune":
                return "measured in autotune's decoder"
            return f"measured in {self.label or self.measured_in} itself"
        why = _WHY_TEXT.get(self.why or "not_raced", str(self.why))
        facts = []
        if self.needed_s is not None:
            facts.append(f"needed {self.needed_s:.0f} s")
        if self.had_s is not None:
            facts.append(f"had {self.had_s:.0f} s")
        if self.detail:
            facts.append(self.detail)
        return (f"predicted by autotune's decoder: {why}"
                + (f" ({'; '.join(facts)})" if facts else ""))

    def short(self) -> str:
        """For a table cell: `hf itself`, `autotune's decoder`, `autotune's decoder,
        predicted: not installed here`."""
        if not self.predicted:
            return ("autotune's decoder" if self.measured_in == "autotune"
                    else f"{self.measured_in} itself")
        why = _WHY_TEXT.get(self.why or "not_raced", str(self.why))
        if self.why == "budget" and self.needed_s is not None and self.had_s is not None:
            why = (f"skipped by the budget (needed {self.needed_s:.0f} s, had "
                   f"{self.had_s:.0f} s)")
        return f"autotune's decoder, predicted: {why}"


class RaceLook(JsonRecord):
    """One look of the validation race."""

    prompts: int | None = None
    level: Number | None = None
    active: list[str] | None = None
    dropped: list[str] | None = None


class RaceRecord(JsonRecord):
    """How the finalists were raced (`validation.race`)."""

    stopped: str | None = None
    measured: int | None = None
    looks: list[RaceLook] | None = None
    alpha_spent: Number | None = None
    budget_s: Number | None = None
    spending: str | None = None


class Validation(Figures):
    """The finalists re-measured on held-out prompts (`validation`): the answer, its
    figures (the AR baseline's for do_not_speculate and undecided) and every finalist's
    as evidence."""

    statistic: str | None = None
    level: Number | None = None
    source: str | None = None
    prompts: int | None = None
    prompt_ids: list[str] | None = None
    categories: dict[str, int] | None = None
    workload_sha256: str | None = None
    repeats: int | None = None
    max_new_tokens: int | None = None
    decision: str | None = None
    reason: str | None = None
    winner: int | None = None
    measured_by: str | None = None
    measured_by_label: str | None = None
    # v6: what the figure is (measured, where; or predicted, why).
    basis: AnswerBasis | None = None
    lossless_tier: str | None = None
    estimator: str | None = None
    pool_prompts: int | None = None
    pool_sha256: str | None = None
    planned_prompts: int | None = None
    race: RaceRecord | None = None
    min_gain: Number | None = None
    latency_ms_per_token: Number | None = None
    baseline_latency_ms_per_token: Number | None = None
    acceptance_rate: Number | None = None
    lossless: bool | None = None
    by_category: dict[str, CategoryFigures] | None = None
    finalists: list[FinalistFigures] = Field(default_factory=list)
    decoder_prediction: DecoderPrediction | None = None
    # v6: the finalists measured faster than their τ allows (their baseline ran slow:
    # other work on the cores), and whether the answer's own figure is one of them.
    implausible: list[int] | None = None
    suspect: bool | None = None

    @property
    def speculates(self) -> bool:
        """The answer is to speculate (with this config)."""
        return self.decision == "speculate"

    @property
    def measured_in_engine(self) -> bool:
        """Its figures were measured in the engine itself, not autotune's decoder."""
        return self.measured_by not in (None, "autotune")

    def figure_basis(self) -> AnswerBasis:
        """`basis` (v6), or for a part built without one, where it was measured."""
        if self.basis is not None:
            return self.basis
        return AnswerBasis.model_validate(_measured_basis(self.measured_by,
                                                          self.measured_by_label))

    def shown(self) -> Figures | None:
        """The figures an answer is read by: its own where it speculates, else its best
        measured finalist's (what was on offer); None without any."""
        if self.speculates:
            return self
        measured = [f for f in self.finalists if isinstance(f.speedup, (int, float))]
        return max(measured, key=lambda f: f.speedup or 0.0, default=None)


class ScheduleRangeRecord(JsonRecord):
    """Batch sizes `start`..`end` run `k` draft tokens per round."""

    start: int | None = None
    end: int | None = None
    k: int | None = None


class SchedulePoint(Figures):
    """One measured (batch size, K) of the schedule."""

    batch_size: int | None = None
    k: int | None = None
    split: str | None = None


class ScheduleDocument(JsonRecord):
    """The optional `schedule` as written (K per batch size); `schedule.read_schedule`
    checks what its JSON Schema cannot and gives the `Schedule` exporters act on."""

    method: str | None = None
    batch_sizes: list[int] = Field(default_factory=list)
    objective: str | None = None
    ranges: list[ScheduleRangeRecord] = Field(default_factory=list)
    points: list[SchedulePoint] | None = None
    notes: list[str] | None = None


def _config(value: Any) -> DecodeConfig:
    if isinstance(value, DecodeConfig):
        return value
    if not isinstance(value, Mapping):
        raise ValueError("must be a mapping of config keys")
    try:
        return config_from_mapping(value)
    except AutotuneError as exc:
        raise ValueError(str(exc)) from None


# The knobs: parsed into a DecodeConfig on read, written as its canonical keys (every
# knob, as the writer always wrote them).
Params = Annotated[DecodeConfig, PlainValidator(_config),
                   PlainSerializer(lambda config: config.to_dict())]


class FrozenConfig(JsonRecord):
    """A frozen config of the current version (best.json, or one engine's answer under
    `engines`): the knobs (`config`, written as `params`) and what they were measured
    on, by which run, and how they held up on held-out prompts."""

    version: str = Field(default=SCHEMA, alias="schema")
    # Required by the JSON Schema; a part of a document given alone (a test's, a
    # library caller's `{"validation": ...}`) reads with the defaults.
    config: Params = Field(default_factory=DecodeConfig, alias="params")
    metrics: Metrics | None = None
    objective: ObjectiveRecord | None = None
    model: ModelRecord | None = None
    draft: ModelRecord | None = None
    hardware: HardwareRecord | None = None
    workload: WorkloadRecord | None = None
    provenance: ProvenanceRecord | None = None
    pareto_front: list[ParetoPoint] | None = None
    validation: Validation | None = None
    schedule: ScheduleDocument | None = None
    engines: dict[str, FrozenConfig] | None = None
    # The version the file was written as (`upgrade` turned it into this one).
    _written_as: str = PrivateAttr(default=SCHEMA)

    @field_validator("draft", mode="before")
    @classmethod
    def _empty_draft_is_none(cls, value: Any) -> Any:
        # An empty record names no draft model (a hand-written file's `"draft": {}`).
        return None if isinstance(value, Mapping) and not value else value

    @classmethod
    def of(cls, doc: FrozenConfig | Mapping[str, Any]) -> FrozenConfig:
        """`doc` as a record: itself, or a document read with `from_json`."""
        return doc if isinstance(doc, FrozenConfig) else cls.from_json(doc)

    @classmethod
    def from_json(cls, doc: Any) -> FrozenConfig:
        """A document of any readable version (upgraded to this one), or an
        AutotuneError naming its first problem in one `key.path: message` line. Checks
        structure only: `checks.load_frozen_config` checks a file fully first."""
        if not isinstance(doc, Mapping):
            raise AutotuneError("a frozen config must be a mapping (the contents of best.json)")
        written_as = doc.get("schema", SCHEMA)
        try:
            record = cls.model_validate(upgrade(doc))
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"]) or "(top level)"
            message = str(error["msg"]).removeprefix("Value error, ")
            raise AutotuneError(f"{where}: {message}") from None
        record._written_as = str(written_as)
        return record

    @property
    def written_as(self) -> str:
        """The version of the file it was read from (this version when built in code)."""
        return self._written_as

    @property
    def label(self) -> str | None:
        """The trial's label (`provenance.label`), None when not recorded."""
        return self.provenance.label if self.provenance is not None else None

    @property
    def trial(self) -> int | None:
        """The trial it was made from (`provenance.trial`), None when not recorded."""
        return self.provenance.trial if self.provenance is not None else None

    def engine_answers(self) -> dict[str, FrozenConfig]:
        """Engine name -> that engine's own answer (`--target all`); empty without."""
        return dict(self.engines or {})

    def engine_answer(self, engine: str) -> FrozenConfig | None:
        """`engine`'s own answer, None when this config holds none for it."""
        return (self.engines or {}).get(engine)


# -- the upgrader: every older version into the current one -------------------------------
# Each step turns a document of its version into one of the next. Every change so far was
# additive (a reader of the new version reads an old file as it is), so the steps say
# what an absent key meant in the older version where that is not the reader's default.

def _absent_engine_was_autotune(doc: dict[str, Any]) -> None:
    """v3 added `params.engine` (whose drafting rules the figures were measured under):
    every older file was measured under autotune's own."""
    params = doc.get("params")
    if isinstance(params, Mapping) and "engine" not in params:
        doc["params"] = {**params, "engine": "autotune"}


def _measured_basis(measured_by: Any, label: Any) -> dict[str, Any]:
    """The basis of figures measured by `measured_by` (absent: autotune's decoder)."""
    who = measured_by if isinstance(measured_by, str) and measured_by else "autotune"
    out: dict[str, Any] = {"kind": "measured", "measured_in": who}
    if who != "autotune" and isinstance(label, str) and label:
        out["label"] = label
    return out


def _basis_of_answers(doc: dict[str, Any]) -> None:
    """v6 added `validation.basis`: a v5 answer's figures were measured where its
    `measured_by` says (autotune's decoder without one), and an engine's answer
    measured in autotune's decoder was its prediction (why: not recorded then). Each
    engine's answer becomes a v6 document too."""
    def filled(answer: Mapping[str, Any], engine: bool) -> dict[str, Any]:
        if engine and "schema" in answer:
            # An engine's answer is a document of the same version as the whole.
            answer = {**answer, "schema": SCHEMA}
        validation = answer.get("validation")
        if not isinstance(validation, Mapping) or "basis" in validation:
            return dict(answer)
        basis = _measured_basis(validation.get("measured_by"),
                                validation.get("measured_by_label"))
        if engine and basis["measured_in"] == "autotune":
            basis = {"kind": "predicted", "measured_in": "autotune", "why": "not_raced"}
        return {**answer, "validation": {**validation, "basis": basis}}

    doc.update(filled(doc, engine=False))
    engines = doc.get("engines")
    if isinstance(engines, Mapping):
        doc["engines"] = {name: filled(answer, engine=True) if isinstance(answer, Mapping)
                          else answer for name, answer in engines.items()}


# Version -> the next one and what changes in a document on the way (None: nothing; the
# keys the next version added are optional).
_UPGRADES: dict[str, tuple[str, Callable[[dict[str, Any]], None] | None]] = {
    "autotune.frozen/v1": ("autotune.frozen/v2", None),       # + `validation`
    "autotune.frozen/v2": ("autotune.frozen/v3", _absent_engine_was_autotune),  # + `schedule`
    "autotune.frozen/v3": ("autotune.frozen/v4", None),       # + "undecided", `min_gain`
    "autotune.frozen/v4": ("autotune.frozen/v5", None),       # + `engines`
    "autotune.frozen/v5": (SCHEMA, _basis_of_answers),  # + `validation.basis`, suspect
}


def upgrade(doc: Mapping[str, Any]) -> dict[str, Any]:
    """`doc` (any readable version; no `schema`: the current one) as a document of the
    current version; an AutotuneError for a version this autotune does not read."""
    out = dict(doc)
    version = out.get("schema", SCHEMA)
    if version not in READABLE:
        raise AutotuneError(f"schema: {version!r} is not supported by this autotune (reads "
                            f"{', '.join(map(repr, READABLE))})")
    while version != SCHEMA:
        version, step = _UPGRADES[version]
        if step is not None:
            step(out)
        out["schema"] = version
    return out


# -- reading and writing a file ----------------------------------------------------------

def dumps(record: FrozenConfig) -> str:
    """The file's text: indented JSON as best.json has always been written."""
    return json.dumps(record.to_json(), indent=2) + "\n"


def write_frozen(path: str | Path, record: FrozenConfig) -> None:
    """Write `record` to `path` atomically (a reader never sees half a file)."""
    write_atomically(Path(path), dumps(record))
