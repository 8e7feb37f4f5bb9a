"""The validation (race) record as a declared record.

    record = ValidationRecord.from_json(stored)   # any version: upgraded, checked, typed
    record.decision, record.finalists[0].figures.interval, record.race.looks
    record.to_json()                               # what the study keeps (this version)

`search.finalists.measure_finalists` builds a `ValidationRecord`; the study keeps its
`to_json()` under `records.answer.VALIDATION_ATTR`, and every reader (the run folder,
the report, the exports, a resumed race) takes `ValidationRecord.from_json` of it.

The models are declared in the order their keys are written, and write the JSON the
study has always kept, with a `version` key (`VERSION`) in front. Its parts (a
finalist's entry and figures, the race's log, a judgement) are declared in
`validation_parts`; `validation_upgrade.upgrade` is the one place that knows the older
versions. Keys that appeared over time (the pool and its estimator, the race, the
lossless tier, `--min-gain`, a finalist's look and divergence counts) are optional
fields, and a record writes the keys it was given (pydantic's `model_fields_set`): one
read from an older study writes, and derives (best.json's `validation`, a rejudged
record), the keys it was written with; a record built in code is given every key it
writes.

Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Union

from pydantic import Field, JsonValue

from autotune.common.interval import CI_KEY
from autotune.common.records import Number, parse_record
from autotune.frozen.record import AnswerBasis, DecoderPrediction, Validation
from autotune.records.validation_parts import (
    POOLED_FIGURES,
    Baseline,
    FinalistEntry,
    FinalistFigures,
    Judgement,
    JudgementJson,
    Look,
    RaceLog,
    is_empty,
    RecordPart,
)
from autotune.records.validation_upgrade import VERSION, upgrade

__all__ = ["POOLED_FIGURES", "VERSION", "Baseline", "FinalistEntry", "FinalistFigures",
           "Judgement", "Look", "RaceLog", "ValidationRecord", "upgrade"]

# What a frozen config's `validation` copies of the record (`frozen_view`), in order (a
# key the record was written without is left out).
_SHARED = ("statistic", "level", "source", "prompts", "prompt_ids", "categories",
           "workload_sha256", "repeats", "max_new_tokens", "decision", "reason", "winner",
           "measured_by", "measured_by_label")
_POOL_FACTS = ("estimator", "pool_prompts", "pool_sha256", "pool_categories",
               "planned_prompts", "race")
# ... of the winner's figures, and of every finalist's as evidence.
_KEPT = ("speedup", "latency_ms_per_token", "baseline_latency_ms_per_token",
         "mean_accepted_tokens", "acceptance_rate", "lossless", "lossless_binding",
         "mismatched_prompts", "near_tie_prompts", "divergences",
         "by_category")
_POOLED = ("estimator", "ppi_lambda", "measured_prompts", "pool_prompts",
           "measured_speedup", "measured_ci90", "predicted_speedup", "look_level",
           "dropped_after")
_EVIDENCE = ("trial", "label", "role", "preset", "search", "speedup", CI_KEY,
             "mean_accepted_tokens", "lossless", "divergences", "by_category", *_POOLED)


# How far a speedup may exceed τ before it is flagged (`ValidationRecord.implausible`):
# the noise of a paired interval's centre on a few prompts.
IMPLAUSIBLE_SLACK = 0.05

# One measured run of a race arm (`finalist_figures.ROW_FIELDS`); `same_tokens` was a
# bool in rows written before near-ties were told apart.
RaceRow = list[Union[bool, int, float, str, None]]



class ValidationRecord(RecordPart):
    """A race of finalists against the AR baseline on held-out prompts, and what it
    decided: autotune's own finalists and judgement at the top, each engine's (a
    `--target all` run) under `engines` / `engine_finalists`."""

    statistic: str
    level: float
    source: str | None = None
    estimator: str | None = None           # "measured" or "ppi++"; unset: before pools
    pool_prompts: int | None = None
    pool_sha256: str | None = None
    pool_categories: dict[str, int] | None = None
    prompts: int
    prompt_ids: list[str] = Field(default_factory=list)
    categories: dict[str, int] = Field(default_factory=dict)
    workload_sha256: str | None = None
    planned_prompts: int | None = None
    sample_sha256: str | None = None
    repeats: int
    max_new_tokens: int | None = None
    complete_trials: int | None = None
    min_gain: Number | None = None         # unset: judged before --min-gain
    created: str | None = None
    race: RaceLog | None = None            # unset: before races
    rows: dict[str, list[RaceRow]] = Field(default_factory=dict)   # per arm
    # Where the runs were measured and what lossless means (once a look measured any).
    measured_by: str | None = None
    measured_by_label: str | None = None
    token_exact: bool | None = None
    lossless_tier: str | None = None
    finalists: list[FinalistEntry]
    baseline: Baseline | None = None
    # The judgement of its own finalists (`judgement`).
    decision: str
    winner: int | None
    reason: str
    # A `--target all` run's: each engine's finalists and judgement (written where any).
    engine_finalists: dict[str, list[FinalistEntry]] = Field(default_factory=dict,
                                                             exclude_if=is_empty)
    engines: dict[str, JudgementJson] = Field(default_factory=dict, exclude_if=is_empty)
    # Per engine that runs here (`--target all`), its finalists raced again in the
    # engine itself against its own decoding without speculation: that race's record
    # (single-engine shape) is the engine's answer; the part above, raced in our
    # decoder under its rules, stays as the prediction shown beside it.
    engine_races: dict[str, ValidationRecord] = Field(default_factory=dict,
                                                      exclude_if=is_empty)
    # Per answered engine not raced in itself, why its answer stays the prediction
    # above (`engine_races.predicted_because`): not installed, a GPU engine, skipped by
    # the budget, failed. An engine raced in itself has none (`basis` says measured).
    engine_bases: dict[str, AnswerBasis] = Field(default_factory=dict, exclude_if=is_empty)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ValidationRecord:
        """A stored record of any version (`upgrade`), checked: a malformed one is one
        AutotuneError line."""
        return parse_record(cls, upgrade(data), "the study's validation record")

    def to_json(self) -> dict[str, Any]:
        """The record as the study keeps it: the current version, then its keys."""
        return {"version": VERSION, **super().to_json()}

    @property
    def judgement(self) -> Judgement:
        return Judgement(self.decision, self.winner, self.reason)

    @property
    def baseline_ms(self) -> float | None:
        """The AR baseline's ms per token."""
        return self.baseline.latency_ms_per_token if self.baseline is not None else None

    @property
    def absent(self) -> frozenset[str]:
        """The keys (as written) this record was written without (older records)."""
        return frozenset(f.alias or name for name, f in type(self).model_fields.items()
                         if name not in self.model_fields_set)

    @property
    def pooled(self) -> bool:
        """Its figures are prediction-powered over the held-out pool."""
        return self.estimator == "ppi++"

    def all_entries(self) -> list[FinalistEntry]:
        """Every finalist entry: autotune's own, then each engine's."""
        return [*self.finalists,
                *(entry for entries in self.engine_finalists.values() for entry in entries)]

    def entry(self, trial: int | None) -> FinalistEntry | None:
        """Its own finalist from `trial`, or None."""
        return next((f for f in self.finalists if f.trial == trial), None)

    def winning_entry(self) -> FinalistEntry | None:
        """The winner's entry (None: it does not speculate)."""
        return self.entry(self.winner) if self.winner is not None else None

    def engine_names(self) -> list[str]:
        """The engines it answers for besides autotune's own (none: a single-engine
        search's record)."""
        return sorted(self.engines)

    def judged_again(self, judgement: Judgement, **changes: Any) -> ValidationRecord:
        """A copy under `judgement` (and `changes`: other fields by name)."""
        return self.model_copy(update={**judgement._asdict(), **changes})

    def for_engine(self, engine: str | None) -> ValidationRecord | None:
        """`engine`'s answer in the single-engine shape (its finalists and judgement at
        the top), or None when it has no answer for it: the race in the engine itself
        where one ran (`engine_races`), else its part of this race (our decoder under
        its rules, the race's shared facts as they are). None (autotune's own): the
        record's own part without the engines'."""
        if engine is None:
            return self.model_copy(update={"engines": {}, "engine_finalists": {},
                                           "engine_races": {}, "engine_bases": {}})
        if engine not in self.engines:
            return None
        return self.engine_races.get(engine) or self.predicted_for(engine)

    def basis(self, engine: str | None = None) -> AnswerBasis:
        """What `engine`'s answer (None: autotune's own) is: measured in the engine
        itself where its race in itself stands, else autotune's decoder's prediction and
        why (`engine_bases`; a record from before they were kept: "not_raced"). Its own
        answer is measured where its race was (autotune's decoder, or the engine of a
        `--target X` search raced in X)."""
        if engine is None:
            return _measured(self)
        race = self.engine_races.get(engine)
        if race is not None:
            return _measured(race)
        return self.engine_bases.get(engine) or AnswerBasis(kind="predicted",
                                                            measured_in="autotune",
                                                            why="not_raced")

    def predicted_for(self, engine: str) -> ValidationRecord | None:
        """`engine`'s part of this race, raced in our decoder under its drafting rules
        (single-engine shape): its answer where no race in the engine itself ran, the
        prediction beside that race's answer where one did; None: no answer for it."""
        judged = self.engines.get(engine)
        if judged is None:
            return None
        return self.judged_again(judged, finalists=list(self.engine_finalists.get(engine, [])),
                                 engines={}, engine_finalists={}, engine_races={},
                                 engine_bases={})

    def frozen_view(self, trial: int | None, basis: AnswerBasis | None = None
                    ) -> Validation:
        """What a frozen config carries under `validation`: the record's shared facts,
        what its figure is (`basis`; None: where this record was measured, as for
        autotune's own answer), the finalists measured faster than τ allows
        (`implausible`, and `suspect` where the answer's figure is one), the figures of
        its finalist from `trial` (the AR baseline's for None: speedup 1 by definition)
        and every finalist's, as evidence."""
        written = self.to_json()
        shared: dict[str, Any] = {k: written.get(k) for k in _SHARED}
        shared["basis"] = (basis or self.basis(None)).to_json()
        flagged = [f.trial for f in self.implausible()]
        if flagged:
            shown = self.entry(trial) if trial is not None else self._best_measured()
            shared["implausible"] = flagged
            if shown is not None and shown.trial in flagged:
                shared["suspect"] = True
        if self.lossless_tier:             # records before the near-tie tier have none
            shared["lossless_tier"] = self.lossless_tier
        # Records before prediction-powered validation have no pool, nor a race.
        shared.update({k: written[k] for k in _POOL_FACTS if k in written})
        if self.min_gain is not None:      # records before v4 have none
            shared["min_gain"] = self.min_gain
        own = self.entry(trial)
        if own is not None:
            entry = own.to_json()
            figures = {k: entry[k] for k in (*_KEPT, CI_KEY, *_POOLED) if k in entry}
        else:
            figures = {"speedup": 1.0, CI_KEY: None, "latency_ms_per_token": self.baseline_ms,
                       "baseline_latency_ms_per_token": self.baseline_ms, "lossless": True}
        evidence = []
        for f in self.finalists:
            entry = f.to_json()
            evidence.append({k: entry.get(k) for k in _EVIDENCE
                             if k in entry or k not in (*_POOLED, "divergences")})
        return Validation.model_validate({**shared, **figures, "finalists": evidence})

    def shown_entry(self) -> FinalistEntry | None:
        """The finalist an answer is read by: its winner, or where it does not
        speculate its best measured finalist (what was on offer)."""
        if self.winner is not None:
            return self.winning_entry()
        return self._best_measured()

    def _best_measured(self) -> FinalistEntry | None:
        measured = [f for f in self.finalists if f.speedup is not None]
        return max(measured, key=lambda f: f.speedup or 0.0, default=None)

    def implausible(self, slack: float = IMPLAUSIBLE_SLACK) -> list[FinalistEntry]:
        """Finalists measured faster than their acceptance allows: a speculative decode
        spends at least one target pass per accepted run of τ tokens, and a pass costs
        at least an AR step, so a speedup above τ (by more than `slack`) says the
        baseline ran slower than its own decoding explains: other work on the cores
        while it was timed (a one-token step suffers more from a busy core than a
        multi-token verify pass)."""
        return [f for f in self.finalists
                if f.speedup is not None and f.figures.mean_accepted_tokens is not None
                and f.speedup > f.figures.mean_accepted_tokens * (1.0 + slack)]

    def prediction_view(self, trial: int | None) -> DecoderPrediction:
        """What an engine's answer raced in the engine itself carries as the prediction
        its race checked (`decoder_prediction`): this record (its part raced in our
        decoder under the engine's rules), its decision, and the figures of its finalist
        from `trial` (None, or not among them: its best measured one)."""
        entry = self.entry(trial) if trial is not None else None
        if entry is None:
            entry = self._best_measured()
        view: dict[str, JsonValue] = {"decision": self.decision,
                                      "measured_by": self.measured_by or "autotune",
                                      "measured_by_label": self.measured_by_label}
        if entry is not None:
            figures = entry.figures
            view.update({"trial": entry.trial, "label": entry.label,
                         "speedup": figures.speedup,
                         CI_KEY: figures.interval.to_json() if figures.interval else None,
                         "mean_accepted_tokens": figures.mean_accepted_tokens})
        return DecoderPrediction.model_validate(view)

    def measured_in(self) -> dict[str, str]:
        """Display facts of where its figures were measured: `measured in` (the
        backend's label, "the engine itself" for an engine backend), `suspect` (the
        finalists faster than their τ allows, `implausible`) and, per finalist
        whose speculative output differed from the same engine's greedy output on some
        prompts, which prompts (`not lossless`); `near-ties` likewise. Empty without
        them."""
        facts: dict[str, str] = {}
        label, who = self.measured_by_label, self.measured_by
        if label:
            facts["measured in"] = (f"{label}: the engine itself, its own decoding without "
                                    "speculation as the baseline"
                                    if who not in (None, "autotune") else str(label))
        lossy = [f for f in self.finalists if f.figures.lossless is False]
        if lossy:
            def mismatched(f: FinalistEntry) -> str:
                ids = f.figures.mismatched_prompts
                return (f"trial {f.trial}: output differed from greedy on {len(ids)} of "
                        f"{self.prompts} prompts ({', '.join(map(str, ids[:6]))}"
                        f"{', ...' if len(ids) > 6 else ''})")
            facts["not lossless"] = "; ".join(mismatched(f) for f in lossy)
            if any(f.figures.lossless_binding is False for f in lossy):
                facts["not lossless"] += (
                    f". {label or 'This engine'}'s multi-token passes break near-ties "
                    "unlike its one-token passes, so its speculative output may differ "
                    "from its own greedy output with no drafting fault: reported, not "
                    "held against a config")
        flagged = self.implausible()
        if flagged:
            shown = self.shown_entry()
            facts["suspect"] = "; ".join(
                f"trial {f.trial}: {f.speedup:.3f}x exceeds its τ "
                f"{f.figures.mean_accepted_tokens:.3f}"
                + (" (the answer's figure)" if shown is not None and f.trial == shown.trial
                   else "") for f in flagged) + (
                ", more than a speculative decode can gain: its baseline ran slower than "
                "its own decoding explains (other work on the cores?); rerun on a quiet "
                "machine")
        tied = [f for f in self.finalists if f.figures.near_tie_prompts]
        if tied:
            facts["near-ties"] = "; ".join(
                f"trial {f.trial}: {len(f.figures.near_tie_prompts)} of "
                f"{self.prompts} prompts" for f in tied) + (
                " differ from greedy AR only at a near-tie the dtype's rounding explains "
                f"(lossless tier: {self.lossless_tier or 'near-tie'}; counted, not "
                "held against a config)")
        return facts


def _measured(record: ValidationRecord) -> AnswerBasis:
    """Measured where `record`'s race was measured (autotune's decoder where it says
    nothing: every record before engine races)."""
    who = record.measured_by or "autotune"
    return AnswerBasis(kind="measured", measured_in=who,
                       **({"label": record.measured_by_label}
                          if who != "autotune" and record.measured_by_label else {}))
