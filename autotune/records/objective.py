"""Objectives are data: which metrics a search optimises, under which constraints.

An objective is a YAML file (presets in `autotune/records/objective_presets/`, shipped as
package data; or any path) naming one metric (a plain study) or several
(a Pareto study) from the registry `METRICS`, constraints a candidate must meet (e.g.
greedy output identical to the baseline's), how often to repeat a measurement, and the
workload it is meant for. Reading one is this module's job; evaluating candidates under
it is the search's (`autotune.search.objectives.EvalContext`,
`autotune.search.evaluation.evaluate`), so reading an objective (validate, the report,
the run folder) loads no model library and no search code (issue 62).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import (
    KeyPath,
    did_you_mean,
    display_path,
    dotted,
    line_of,
    load_yaml,
    located,
)
from autotune.records.summary import MeasurementSummary
from autotune.schema.config import DecodeConfig

PRESETS = "autotune.records.objective_presets"


@dataclass(frozen=True)
class Metric:
    """One optimisable metric; `name` is its key in `Measurement.summary()`."""

    name: str
    direction: str             # "minimize" | "maximize" (Optuna's spelling)
    unit: str
    description: str


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("latency_ms_per_token", "minimize", "ms/token",
           "candidate decode time per generated token (the prefill's first token excluded)"),
    Metric("speedup", "maximize", "x",
           "paired: AR / candidate decode time per generated token, summed over the same "
           "prompts run interleaved (autotune.measure.paired)"),
    Metric("peak_memory_mb", "minimize", "MiB",
           "peak memory of the candidate's runs (CUDA allocator peak; on CPU weights + KV caches)"),
    Metric("acceptance_rate", "maximize", "fraction", "accepted draft tokens / drafted tokens"),
    Metric("mean_accepted_tokens", "maximize", "tokens/round",
           "tau: tokens emitted per draft/verify round (accepted + the target's own)"),
    Metric("prefill_ms", "minimize", "ms", "mean prefill time per prompt"),
    Metric("draft_time_share", "minimize", "fraction",
           "share of the decode rounds' time spent drafting"),
    Metric("agreement", "maximize", "fraction",
           "teacher-forced top-1 agreement of the draft with the target's greedy "
           "continuation (a cheap proxy; nothing is decoded or timed)"),
)}

# Constraints may also name boolean summary keys that are no optimisable metric.
CONSTRAINT_METRICS: frozenset[str] = frozenset(METRICS) | {"lossless"}
COMPARATORS = ("equals", "at_most", "at_least")
_TOP_KEYS = ("description", "metrics", "constraints", "repeats", "workload")
_CONSTRAINT_KEYS = ("metric",) + COMPARATORS + ("greedy_only",)
_WORKLOAD_KEYS = ("prompts", "max_new_tokens", "categories", "temperature", "top_p")


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_defined(value: Any) -> bool:
    """A usable numeric value: not None, not a bool, finite."""
    return is_number(value) and math.isfinite(value)


@dataclass(frozen=True)
class Constraint:
    """`metric` must equal / be at most / be at least a bound (exactly one is set).

    With `greedy_only` the constraint binds only greedy candidates (temperature 0), e.g.
    `lossless`, which sampling cannot check token for token.
    """

    metric: str
    equals: Any = None
    at_most: float | None = None
    at_least: float | None = None
    greedy_only: bool = False

    @property
    def comparator(self) -> tuple[str, Any]:
        """(comparator name, bound) of the one comparator that is set."""
        for name in COMPARATORS:
            if getattr(self, name) is not None:
                return name, getattr(self, name)
        raise AutotuneError(f"constraint on {self.metric} sets none of {', '.join(COMPARATORS)}")

    def describe(self) -> str:
        op, bound = self.comparator
        words = {"equals": "==", "at_most": "<=", "at_least": ">="}[op]
        return f"{self.metric} {words} {_fmt(bound)}" + (" (greedy only)" if self.greedy_only else "")

    def violation(self, metrics: MeasurementSummary | Mapping[str, Any],
                  config: DecodeConfig) -> str | None:
        """None when met (or not binding for this config), else a one-line reason such
        as "lossless is False, must be True". A missing or undefined value violates."""
        if self.greedy_only and not config.greedy:
            return None
        summary = MeasurementSummary.of(metrics)
        if self.metric in UNPREDICTED and not summary.measured:
            # Replay predicts a lossless decoder's figures; whether the decoder is
            # lossless is checked where configs are decoded (measured trials, finalists).
            return None
        if self.metric == "lossless" and summary.lossless_binding is False:
            # Measured in an engine whose multi-token passes round differently from its
            # one-token passes (Backend.token_exact): reported, not held against the config.
            return None
        op, bound = self.comparator
        must = {"equals": "", "at_most": "at most ", "at_least": "at least "}[op] + _fmt(bound)
        value = summary.figure(self.metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return f"{self.metric} is undefined ({value}), must be {must}"
        if op == "equals":
            ok = value == bound and isinstance(value, bool) == isinstance(bound, bool)
        elif not is_number(value):
            ok = False
        else:
            ok = value <= bound if op == "at_most" else value >= bound
        return None if ok else f"{self.metric} is {_fmt(value)}, must be {must}"


# Metrics a replayed (predicted) trial has no value for, so constraints on them bind only
# measured trials.
UNPREDICTED = frozenset({"lossless"})


@dataclass(frozen=True)
class WorkloadDefaults:
    """The workload an objective is meant for; the CLI's flags override each field."""

    prompts: int = 8
    max_new_tokens: int = 64
    categories: tuple[str, ...] | None = None
    temperature: float = 0.0
    top_p: float = 1.0


@dataclass(frozen=True)
class Objective:
    """A loaded objective file. `path`/`sha256` identify the exact file (provenance)."""

    name: str
    path: str
    sha256: str
    description: str
    metrics: tuple[str, ...]
    constraints: tuple[Constraint, ...] = ()
    repeats: int = 1
    workload: WorkloadDefaults = field(default_factory=WorkloadDefaults)

    @property
    def directions(self) -> list[str]:
        """Optuna directions, one per metric, from the registry."""
        return [METRICS[m].direction for m in self.metrics]

    @property
    def multi(self) -> bool:
        return len(self.metrics) > 1

    @property
    def needs_timing(self) -> bool:
        """Whether any metric or constraint needs a timed measurement (all but agreement)."""
        names = set(self.metrics) | {c.metric for c in self.constraints}
        return bool(names - {"agreement"})

    @property
    def needs_agreement(self) -> bool:
        return "agreement" in self.metrics or any(c.metric == "agreement" for c in self.constraints)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record for provenance (frozen configs, reports)."""
        return {
            "name": self.name, "path": self.path, "sha256": self.sha256,
            "metrics": list(self.metrics), "directions": self.directions,
            "constraints": [c.describe() for c in self.constraints],
            "repeats": self.repeats,
            "workload": {**vars(self.workload), "categories": (
                list(self.workload.categories) if self.workload.categories else None)},
        }

    # ---------------------------------------------------------------- judge
    def values(self, metrics: MeasurementSummary | Mapping[str, Any]) -> list[float]:
        """The objective values, in `self.metrics` order, for Optuna."""
        summary = MeasurementSummary.of(metrics)
        out = []
        for name in self.metrics:
            value = summary.figure(name)
            if not is_defined(value):
                raise AutotuneError(
                    f"objective {self.name}: {name} is undefined for this candidate "
                    f"({value!r}); e.g. no token was drafted or decoded")
            out.append(float(value))
        return out

    def violation(self, metrics: MeasurementSummary | Mapping[str, Any],
                  config: DecodeConfig) -> str | None:
        """The first violated constraint's reason, or None when all are met."""
        summary = MeasurementSummary.of(metrics)
        for constraint in self.constraints:
            reason = constraint.violation(summary, config)
            if reason is not None:
                return reason
        return None


# ------------------------------------------------------------------ loading
def available_objectives() -> list[str]:
    """Names of the shipped presets (file stems in `autotune.records.objective_presets`)."""
    return sorted(p.name[: -len(".yaml")] for p in files(PRESETS).iterdir()
                  if p.name.endswith(".yaml"))


def load_objective(name_or_path: str) -> Objective:
    """A preset by name (`latency`) or an objective file by path."""
    text = str(name_or_path)
    looks_like_path = text.endswith((".yaml", ".yml")) or os.sep in text or "/" in text
    if not looks_like_path:
        preset = files(PRESETS).joinpath(f"{text}.yaml")
        if preset.is_file():
            with as_file(preset) as real:
                return _parse(Path(real), text)
        if not Path(text).is_file():
            names = available_objectives()
            raise AutotuneError(f"unknown objective {text!r} (presets: {', '.join(names)}; "
                                f"or give a .yaml path){did_you_mean(text, names)}")
    path = Path(text)
    if not path.is_file():
        raise AutotuneError(f"objective file not found: {path}")
    return _parse(path, path.stem)


class _Checker:
    """Reads one objective file's values, raising `file:line: key: message` lines."""

    def __init__(self, path: Path, lines: dict[KeyPath, int]) -> None:
        self.path, self.lines = path, lines

    def error(self, key_path: KeyPath, message: str) -> AutotuneError:
        where = dotted(key_path)
        return located(display_path(self.path), line_of(self.lines, key_path),
                       f"{where}: {message}" if where else message)

    def keys(self, mapping: dict, allowed: tuple[str, ...], prefix: KeyPath) -> None:
        for key in mapping:
            if key not in allowed:
                raise self.error(prefix + (key,),
                                 f"unknown key (allowed: {', '.join(allowed)})"
                                 f"{did_you_mean(str(key), allowed)}")

    def integer(self, value: Any, key_path: KeyPath, least: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key_path, f"{value!r} is not an integer")
        if value < least:
            raise self.error(key_path, f"{value} must be at least {least}")
        return value

    def number(self, value: Any, key_path: KeyPath) -> float:
        if not is_number(value) or not math.isfinite(value):
            raise self.error(key_path, f"{value!r} is not a number")
        return float(value)

    def metric(self, value: Any, key_path: KeyPath, allowed: frozenset[str] | dict) -> str:
        if not isinstance(value, str):
            raise self.error(key_path, f"{value!r} is not a metric name")
        if value not in allowed:
            hint = did_you_mean(value, sorted(allowed))
            known = "" if hint else f" (known: {', '.join(sorted(allowed))})"
            raise self.error(key_path, f"unknown metric {value!r}{known}{hint}")
        return value


def _parse(path: Path, name: str) -> Objective:
    data, lines = load_yaml(path)
    check = _Checker(path, lines)
    if not isinstance(data, dict):
        raise check.error((), "an objective file is a mapping with keys "
                              f"{', '.join(_TOP_KEYS)} (got {type(data).__name__})")
    check.keys(data, _TOP_KEYS, ())

    description = data.get("description", "")
    if not isinstance(description, str):
        raise check.error(("description",), "must be a string")

    if "metrics" not in data:
        raise check.error((), f"no 'metrics' key: name one or more of {', '.join(METRICS)}")
    raw = data["metrics"]
    raw = [raw] if isinstance(raw, str) else raw
    if not isinstance(raw, list) or not raw:
        raise check.error(("metrics",), "must be a non-empty list of metric names")
    metrics = tuple(check.metric(m, ("metrics", i), METRICS) for i, m in enumerate(raw))
    if len(set(metrics)) != len(metrics):
        raise check.error(("metrics",), "names a metric twice")

    raw_constraints = data.get("constraints") or []
    if not isinstance(raw_constraints, list):
        raise check.error(("constraints",), "must be a list of mappings")
    constraints = tuple(_constraint(check, c, ("constraints", i))
                        for i, c in enumerate(raw_constraints))

    repeats = check.integer(data.get("repeats", 1), ("repeats",), 1)
    return Objective(name=name, path=str(path),
                     sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                     description=" ".join(description.split()), metrics=metrics,
                     constraints=constraints, repeats=repeats,
                     workload=_workload(check, data.get("workload")))


def _constraint(check: _Checker, raw: Any, at: KeyPath) -> Constraint:
    if not isinstance(raw, dict):
        raise check.error(at, "a constraint is a mapping: metric + one of "
                              f"{', '.join(COMPARATORS)} (+ greedy_only)")
    check.keys(raw, _CONSTRAINT_KEYS, at)
    if "metric" not in raw:
        raise check.error(at, "constraint has no 'metric'")
    metric = check.metric(raw["metric"], at + ("metric",), CONSTRAINT_METRICS)
    given = [c for c in COMPARATORS if c in raw]
    if len(given) != 1:
        where = at + (given[1],) if len(given) > 1 else at
        found = f"has {' and '.join(given)}" if given else "has none"
        raise check.error(where, f"{found}: give exactly one of {', '.join(COMPARATORS)}")
    op = given[0]
    bound = raw[op]
    if metric == "lossless":
        if op != "equals" or not isinstance(bound, bool):
            raise check.error(at + (op,), "lossless is true or false: use 'equals: true'")
    elif op == "equals" and isinstance(bound, bool):
        raise check.error(at + (op,), f"{metric} is a number, not {bound}")
    else:
        bound = check.number(bound, at + (op,))
    greedy_only = raw.get("greedy_only", False)
    if not isinstance(greedy_only, bool):
        raise check.error(at + ("greedy_only",), f"{greedy_only!r} is not true or false")
    return Constraint(metric=metric, greedy_only=greedy_only, **{op: bound})


def _workload(check: _Checker, raw: Any) -> WorkloadDefaults:
    at: KeyPath = ("workload",)
    if raw is None:
        return WorkloadDefaults()
    if not isinstance(raw, dict):
        raise check.error(at, f"must be a mapping with keys {', '.join(_WORKLOAD_KEYS)}")
    check.keys(raw, _WORKLOAD_KEYS, at)
    defaults = WorkloadDefaults()
    prompts = check.integer(raw.get("prompts", defaults.prompts), at + ("prompts",), 1)
    max_new = check.integer(raw.get("max_new_tokens", defaults.max_new_tokens),
                            at + ("max_new_tokens",), 1)
    categories = raw.get("categories")
    if categories is not None:
        if (not isinstance(categories, list) or not categories
                or not all(isinstance(c, str) and c.strip() for c in categories)):
            raise check.error(at + ("categories",),
                              "must be a non-empty list of category names, or null for all")
        categories = tuple(categories)
    temperature = check.number(raw.get("temperature", defaults.temperature),
                               at + ("temperature",))
    if temperature < 0:
        raise check.error(at + ("temperature",), f"{temperature} must be >= 0 (0 = greedy)")
    top_p = check.number(raw.get("top_p", defaults.top_p), at + ("top_p",))
    if not 0.0 < top_p <= 1.0:
        raise check.error(at + ("top_p",), f"{top_p} must lie in (0, 1]")
    return WorkloadDefaults(prompts=prompts, max_new_tokens=max_new, categories=categories,
                            temperature=temperature, top_p=top_p)
