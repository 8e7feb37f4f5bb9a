"""The validation (race) record as typed records.

`finalists.measure_finalists` builds a `ValidationRecord`; the study keeps its
`to_json()` under `finalists.VALIDATION_ATTR`, and every reader (the run folder, the
report, the exports, a resumed race) takes `ValidationRecord.from_json` of it. JSON only
at that edge: `to_json` gives the very dict the study has always stored (same keys, same
order), and `from_json` reads every record written since the first one.

Older records lack keys that later ones carry (the pool and its estimator, the race, the
lossless tier, `--min-gain`, a finalist's look and divergence counts). Those readers live
here only: a record keeps which of its optional keys it was written without (`absent`),
so that what is derived from it (best.json's `validation`, a rejudged record) has the
same keys as before, and nothing else asks whether a key is there.

Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, NamedTuple

from autotune.common.interval import CI_KEY, Interval

__all__ = ["POOLED_FIGURES", "FinalistEntry", "FinalistFigures", "Judgement", "Look",
           "RaceLog", "ValidationRecord"]

# What names a finalist in the record, beside its figures (`finalists.Finalist`).
_IDENTITY = ("trial", "label", "role", "preset", "params", "search", "engine")
# The prediction-powered figures (`ppi.PoolEstimate.to_json`) besides speedup, interval
# and estimator, in the order written.
POOLED_FIGURES = ("ppi_lambda", "pool_prompts", "measured_speedup", "measured_ci90",
        "predicted_speedup")

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


def _absent(data: Mapping[str, Any], optional: tuple[str, ...]) -> frozenset[str]:
    return frozenset(k for k in optional if k not in data)


@dataclass(frozen=True)
class FinalistFigures:
    """A finalist's validation figures (`finalist_figures.figures`), or a validation
    summary's kept part in a record written before races."""

    speedup: float | None = None
    interval: Interval | None = None
    latency_ms_per_token: float | None = None
    baseline_latency_ms_per_token: float | None = None
    mean_accepted_tokens: float | None = None
    acceptance_rate: float | None = None
    lossless: bool | None = None          # greedy: no real divergence; None: sampling
    lossless_binding: bool | None = None  # False: the engine's own numerics may differ
    mismatched_prompts: list[str] = field(default_factory=list)
    near_tie_prompts: list[str] = field(default_factory=list)
    divergences: dict[str, int] | None = None   # per divergence kind; None: sampling
    look_level: float | None = None
    measured_prompts: int | None = None
    estimator: str | None = None          # "measured" or "ppi++"
    # ppi++ only: `POOLED_FIGURES`'s figures (the weight, the pool, measured / predicted alone).
    pooled: dict[str, Any] = field(default_factory=dict)
    by_category: dict[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()

    _OPTIONAL = ("speedup", CI_KEY, "latency_ms_per_token", "baseline_latency_ms_per_token",
                 "mean_accepted_tokens", "acceptance_rate", "lossless", "lossless_binding",
                 "mismatched_prompts", "near_tie_prompts", "divergences", "look_level",
                 "measured_prompts", "estimator", "by_category")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FinalistFigures:
        return cls(
            speedup=data.get("speedup"), interval=Interval.of(data),
            latency_ms_per_token=data.get("latency_ms_per_token"),
            baseline_latency_ms_per_token=data.get("baseline_latency_ms_per_token"),
            mean_accepted_tokens=data.get("mean_accepted_tokens"),
            acceptance_rate=data.get("acceptance_rate"), lossless=data.get("lossless"),
            lossless_binding=data.get("lossless_binding"),
            mismatched_prompts=list(data.get("mismatched_prompts") or []),
            near_tie_prompts=list(data.get("near_tie_prompts") or []),
            divergences=data.get("divergences"), look_level=data.get("look_level"),
            measured_prompts=data.get("measured_prompts"), estimator=data.get("estimator"),
            pooled={k: data[k] for k in POOLED_FIGURES if k in data},
            by_category=dict(data.get("by_category") or {}),
            absent=_absent(data, cls._OPTIONAL))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "latency_ms_per_token": self.latency_ms_per_token,
            "baseline_latency_ms_per_token": self.baseline_latency_ms_per_token,
            "mean_accepted_tokens": self.mean_accepted_tokens,
            "acceptance_rate": self.acceptance_rate, "lossless": self.lossless,
            "lossless_binding": self.lossless_binding,
            "mismatched_prompts": self.mismatched_prompts,
            "near_tie_prompts": self.near_tie_prompts, "divergences": self.divergences,
            "look_level": self.look_level, "measured_prompts": self.measured_prompts,
            "speedup": self.speedup,
            CI_KEY: self.interval.to_json() if self.interval is not None else None,
            "estimator": self.estimator, **self.pooled, "by_category": self.by_category}
        return {k: v for k, v in out.items() if k not in self.absent}

    def has(self, key: str) -> bool:
        """The figure under `key` was written (older records lack some)."""
        return key not in self.absent

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

    def speedup_json(self) -> dict[str, Any]:
        """The speedup and its interval as a figures mapping (`speedup_text` reads it)."""
        return {"speedup": self.speedup,
                CI_KEY: self.interval.to_json() if self.interval is not None else None}


@dataclass(frozen=True)
class FinalistEntry:
    """One raced finalist in the record: who it is (`finalists.Finalist`'s fields), its
    last figures, and the look it was dropped after (None: raced to the end)."""

    trial: int
    label: str
    role: str | None
    preset: str | None
    params: dict[str, Any]
    search: dict[str, Any]
    engine: str | None                 # None: autotune's own (its entries carry none)
    figures: FinalistFigures
    dropped_after: int | None = None
    absent: frozenset[str] = frozenset()

    _OPTIONAL = ("role", "preset", "params", "search", "dropped_after")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FinalistEntry:
        return cls(trial=int(data["trial"]), label=str(data.get("label", "")),
                   role=data.get("role"), preset=data.get("preset"),
                   params=dict(data.get("params") or {}),
                   search=dict(data.get("search") or {}), engine=data.get("engine"),
                   figures=FinalistFigures.from_json(
                       {k: v for k, v in data.items()
                        if k not in (*_IDENTITY, "dropped_after")}),
                   dropped_after=data.get("dropped_after"),
                   absent=_absent(data, cls._OPTIONAL))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"trial": self.trial, "label": self.label, "role": self.role,
                               "preset": self.preset, "params": self.params,
                               "search": self.search}
        if self.engine is not None:
            out["engine"] = self.engine
        out = {k: v for k, v in out.items() if k not in self.absent}
        out.update(self.figures.to_json())
        if "dropped_after" not in self.absent:
            out["dropped_after"] = self.dropped_after
        return out

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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Judgement:
        return cls(str(data.get("decision", "")), data.get("winner"),
                   str(data.get("reason", "")))

    def to_json(self) -> dict[str, Any]:
        return {"decision": self.decision, "winner": self.winner, "reason": self.reason}


@dataclass(frozen=True)
class Look:
    """One look of a race: the prompts measured by then, its interval level, the arms
    racing in it and those it dropped."""

    prompts: int
    level: float
    active: list[str]
    dropped: list[str]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Look:
        return cls(int(data.get("prompts", 0)), float(data.get("level", 0.0)),
                   list(data.get("active", [])), list(data.get("dropped", [])))

    def to_json(self) -> dict[str, Any]:
        return {"prompts": self.prompts, "level": self.level, "active": self.active,
                "dropped": self.dropped}


@dataclass(frozen=True)
class RaceLog:
    """How a race went: why it stopped ("sample", "decided", "budget", ...), prompts
    measured, its looks, the error spent, its time budget and spending rule, and the
    twins measured once (arm -> the arm whose runs it took)."""

    stopped: str
    measured: int
    looks: list[Look]
    alpha_spent: float
    budget_s: float | None
    spending: str | None
    twins: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RaceLog:
        return cls(stopped=str(data.get("stopped", "sample")),
                   measured=int(data.get("measured", 0)),
                   looks=[Look.from_json(look) for look in data.get("looks", [])],
                   alpha_spent=float(data.get("alpha_spent", 0.0)),
                   budget_s=data.get("budget_s"), spending=data.get("spending"),
                   twins=dict(data.get("twins") or {}))

    def to_json(self) -> dict[str, Any]:
        return {"stopped": self.stopped, "measured": self.measured,
                "looks": [look.to_json() for look in self.looks],
                "alpha_spent": self.alpha_spent, "budget_s": self.budget_s,
                "spending": self.spending, **({"twins": self.twins} if self.twins else {})}

    def dropped_after(self, arm: str) -> int | None:
        """The prompts measured at the look that dropped `arm` (None: never dropped)."""
        return next((look.prompts for look in self.looks if arm in look.dropped), None)


@dataclass(frozen=True)
class ValidationRecord:
    """A race of finalists against the AR baseline on held-out prompts, and what it
    decided: autotune's own finalists and judgement at the top, each engine's (a
    `--target all` run) under `engines` / `engine_finalists`."""

    statistic: str
    level: float
    source: str | None
    prompts: int
    prompt_ids: list[str]
    categories: dict[str, int]
    workload_sha256: str | None
    repeats: int
    max_new_tokens: int | None
    complete_trials: int | None
    created: str | None
    judgement: Judgement
    finalists: list[FinalistEntry]
    baseline_ms: float | None = None       # the AR baseline's ms per token
    estimator: str | None = None           # "measured" or "ppi++"; None: before pools
    pool_prompts: int | None = None
    pool_sha256: str | None = None
    pool_categories: dict[str, int] | None = None
    planned_prompts: int | None = None
    sample_sha256: str | None = None
    min_gain: float | None = None          # None: judged before --min-gain
    race: RaceLog | None = None            # None: before races
    rows: dict[str, list[list[Any]]] = field(default_factory=dict)  # per arm (ROW_FIELDS)
    # Where the runs were measured and what lossless means (once a look measured any).
    measured_by: str | None = None
    measured_by_label: str | None = None
    token_exact: bool | None = None
    lossless_tier: str | None = None
    engine_finalists: dict[str, list[FinalistEntry]] = field(default_factory=dict)
    engines: dict[str, Judgement] = field(default_factory=dict)
    # Per engine that runs here (`--target all`), its finalists raced again in the
    # engine itself against its own decoding without speculation: that race's record
    # (single-engine shape) is the engine's answer; the part above, raced in our
    # decoder under its rules, stays as the prediction shown beside it.
    engine_races: dict[str, ValidationRecord] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()

    _OPTIONAL = ("source", "estimator", "pool_prompts", "pool_sha256", "pool_categories",
                 "prompt_ids", "categories", "workload_sha256", "planned_prompts",
                 "sample_sha256", "max_new_tokens", "complete_trials", "min_gain",
                 "created", "race", "rows", "measured_by", "measured_by_label",
                 "token_exact", "lossless_tier", "baseline")

    @property
    def decision(self) -> str:
        return self.judgement.decision

    @property
    def winner(self) -> int | None:
        return self.judgement.winner

    @property
    def reason(self) -> str:
        return self.judgement.reason

    @property
    def pooled(self) -> bool:
        """Its figures are prediction-powered over the held-out pool."""
        return self.estimator == "ppi++"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ValidationRecord:
        race = data.get("race")
        return cls(
            statistic=str(data.get("statistic", "")), level=float(data.get("level", 0.9)),
            source=data.get("source"), prompts=int(data.get("prompts", 0)),
            prompt_ids=list(data.get("prompt_ids") or []),
            categories=dict(data.get("categories") or {}),
            workload_sha256=data.get("workload_sha256"),
            repeats=int(data.get("repeats", 1)), max_new_tokens=data.get("max_new_tokens"),
            complete_trials=data.get("complete_trials"), created=data.get("created"),
            judgement=Judgement.from_json(data),
            finalists=[FinalistEntry.from_json(f) for f in data.get("finalists") or []
                       if isinstance(f, Mapping)],
            baseline_ms=(data.get("baseline") or {}).get("latency_ms_per_token"),
            estimator=data.get("estimator"), pool_prompts=data.get("pool_prompts"),
            pool_sha256=data.get("pool_sha256"), pool_categories=data.get("pool_categories"),
            planned_prompts=data.get("planned_prompts"),
            sample_sha256=data.get("sample_sha256"),
            min_gain=(data["min_gain"] if isinstance(data.get("min_gain"), (int, float))
                      else None),
            race=RaceLog.from_json(race) if isinstance(race, Mapping) else None,
            rows={arm: list(rows) for arm, rows in (data.get("rows") or {}).items()},
            measured_by=data.get("measured_by"),
            measured_by_label=data.get("measured_by_label"),
            token_exact=data.get("token_exact"), lossless_tier=data.get("lossless_tier"),
            engine_finalists={name: [FinalistEntry.from_json(f) for f in entries]
                              for name, entries in
                              (data.get("engine_finalists") or {}).items()},
            engines={name: Judgement.from_json(j)
                     for name, j in (data.get("engines") or {}).items()
                     if isinstance(j, Mapping)},
            engine_races={name: cls.from_json(r)
                          for name, r in (data.get("engine_races") or {}).items()
                          if isinstance(r, Mapping)},
            absent=_absent(data, cls._OPTIONAL))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "statistic": self.statistic, "level": self.level, "source": self.source,
            "estimator": self.estimator, "pool_prompts": self.pool_prompts,
            "pool_sha256": self.pool_sha256, "pool_categories": self.pool_categories,
            "prompts": self.prompts, "prompt_ids": self.prompt_ids,
            "categories": self.categories, "workload_sha256": self.workload_sha256,
            "planned_prompts": self.planned_prompts, "sample_sha256": self.sample_sha256,
            "repeats": self.repeats, "max_new_tokens": self.max_new_tokens,
            "complete_trials": self.complete_trials, "min_gain": self.min_gain,
            "created": self.created,
            "race": self.race.to_json() if self.race is not None else None,
            "rows": self.rows, "measured_by": self.measured_by,
            "measured_by_label": self.measured_by_label, "token_exact": self.token_exact,
            "lossless_tier": self.lossless_tier,
            "finalists": [f.to_json() for f in self.finalists],
            "baseline": {"latency_ms_per_token": self.baseline_ms},
            **self.judgement.to_json()}
        if self.engines:
            out["engine_finalists"] = {name: [f.to_json() for f in entries]
                                       for name, entries in self.engine_finalists.items()}
            out["engines"] = {name: j.to_json() for name, j in self.engines.items()}
        if self.engine_races:
            out["engine_races"] = {name: r.to_json() for name, r in self.engine_races.items()}
        return {k: v for k, v in out.items() if k not in self.absent}

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

    def for_engine(self, engine: str | None) -> ValidationRecord | None:
        """`engine`'s answer in the single-engine shape (its finalists and judgement at
        the top), or None when it has no answer for it: the race in the engine itself
        where one ran (`engine_races`), else its part of this race (our decoder under
        its rules, the race's shared facts as they are). None (autotune's own): the
        record's own part without the engines'."""
        if engine is None:
            return replace(self, engines={}, engine_finalists={}, engine_races={})
        if engine not in self.engines:
            return None
        return self.engine_races.get(engine) or self.predicted_for(engine)

    def predicted_for(self, engine: str) -> ValidationRecord | None:
        """`engine`'s part of this race, raced in our decoder under its drafting rules
        (single-engine shape): its answer where no race in the engine itself ran, the
        prediction beside that race's answer where one did; None: no answer for it."""
        judged = self.engines.get(engine)
        if judged is None:
            return None
        return replace(self, judgement=judged,
                       finalists=list(self.engine_finalists.get(engine, [])),
                       engines={}, engine_finalists={}, engine_races={})

    def frozen_view(self, trial: int | None) -> dict[str, Any]:
        """What a frozen config carries under `validation` (JSON): the record's shared
        facts, the figures of its finalist from `trial` (the AR baseline's for None:
        speedup 1 by definition) and every finalist's, as evidence."""
        written = self.to_json()
        shared = {k: written.get(k) for k in _SHARED}
        if self.lossless_tier:             # records before the near-tie tier have none
            shared["lossless_tier"] = self.lossless_tier
        # Records before prediction-powered validation have no pool, nor a race.
        shared.update({k: written[k] for k in _POOL_FACTS if k in written})
        if self.min_gain is not None:      # records before v4 have none
            shared["min_gain"] = self.min_gain
        own = self.entry(trial)
        figures: dict[str, Any]
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
        return {**shared, **figures, "finalists": evidence}

    def shown_entry(self) -> FinalistEntry | None:
        """The finalist an answer is read by: its winner, or where it does not
        speculate its best measured finalist (what was on offer)."""
        if self.winner is not None:
            return self.winning_entry()
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

    def prediction_view(self, trial: int | None) -> dict[str, Any]:
        """What an engine's answer raced in the engine itself carries as the prediction
        its race checked (JSON, `decoder_prediction`): this record (its part raced in
        our decoder under the engine's rules), its decision, and the figures of its
        finalist from `trial` (None, or not among them: its best measured one)."""
        entry = self.entry(trial) if trial is not None else None
        if entry is None:
            measured = [f for f in self.finalists if f.speedup is not None]
            entry = max(measured, key=lambda f: f.speedup or 0.0, default=None)
        view: dict[str, Any] = {"decision": self.decision,
                                "measured_by": self.measured_by or "autotune",
                                "measured_by_label": self.measured_by_label}
        if entry is not None:
            figures = entry.figures
            view.update({"trial": entry.trial, "label": entry.label,
                         "speedup": figures.speedup,
                         CI_KEY: figures.interval.to_json() if figures.interval else None,
                         "mean_accepted_tokens": figures.mean_accepted_tokens})
        return view

    def measured_in(self) -> dict[str, str]:
        """Display facts of where its figures were measured: `measured in` (the
        backend's label, "the engine itself" for an engine backend) and, per finalist
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
        tied = [f for f in self.finalists if f.figures.near_tie_prompts]
        if tied:
            facts["near-ties"] = "; ".join(
                f"trial {f.trial}: {len(f.figures.near_tie_prompts)} of "
                f"{self.prompts} prompts" for f in tied) + (
                " differ from greedy AR only at a near-tie the dtype's rounding explains "
                f"(lossless tier: {self.lossless_tier or 'near-tie'}; counted, not "
                "held against a config)")
        return facts
