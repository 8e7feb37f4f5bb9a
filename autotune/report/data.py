"""Data behind each panel of the report: pure functions from an Optuna study (+ the run
folder's `run.json` / `best.json` documents) to pandas DataFrames and small dataclasses.

Nothing here draws or writes anything, so each panel's numbers can be checked by a test
on a hand-built study. Every panel carries a `note`: a short sentence the page shows
instead of (or next to) the figure when data is missing: an old run without the newer
metrics, a study with no complete trial, a single-objective study's Pareto panel.

Conventions shared by all functions:
- only COMPLETE trials carry objective values worth plotting (a pruned trial's value is
  its last intermediate report, not a measurement);
- the objective's first metric ranks trials (for two metrics: the Pareto front first);
- a trial's `label` is `run_folder.describe(config)`, the same text as `trials.csv`;
- a trial's `method` comes from its canonical config (`none` for the AR baseline).
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable

import optuna
import pandas as pd
from optuna.distributions import (BaseDistribution, CategoricalDistribution,
                                  FloatDistribution, IntDistribution)
from optuna.trial import FrozenTrial, TrialState

from autotune.run_folder import describe
from autotune.samplers import BASELINE, BASELINE_ATTR

TOP_FRACTION = 0.10            # layer heatmap: the top 10 % of layer_skip trials
MIN_IMPORTANCE_TRIALS = 5      # fANOVA on fewer trials is noise
LEVIATHAN_MIN_K = 16

# Per-layer and per-exit on/off bits (`layer_skip.attn_skip[12]`, `sorted_exit.exits[6]`):
# one knob per layer is unreadable as a panel; derived counts and the heatmap show them.
_INDEXED = re.compile(r"^(?P<base>.+)\[(?P<index>\d+)\]$")

# Knobs computed from a trial's canonical config: (name, title, method, config key).
DERIVED_KNOBS: tuple[tuple[str, str, str, str], ...] = (
    ("n_attn_skipped", "attention layers skipped", "layer_skip", "attn_skip"),
    ("n_mlp_skipped", "MLP layers skipped", "layer_skip", "mlp_skip"),
    ("n_exits", "number of exits", "sorted_exit", "exits"),
)

# The canonical config keys each method reads (the header shows only these).
_METHOD_KEYS: dict[str, tuple[str, ...]] = {
    "none": (),
    "ngram": ("k", "ngram_min", "ngram_max", "exit_policy"),
    "draft_model": ("k", "exit_policy"),
    "layer_skip": ("k", "attn_skip", "mlp_skip", "exit_policy"),
    "sorted_exit": ("k", "exits", "thresholds", "exit_policy"),
}
_POLICY_KEYS: dict[str, tuple[str, ...]] = {
    "confidence": ("gamma",),
    "adaptive": ("gamma", "target_acceptance", "epsilon", "beta1", "beta2"),
}

# Display units of metrics the report names on axes (objectives.METRICS says "x").
_UNITS = {
    "latency_ms_per_token": "ms/token", "speedup": "× AR", "peak_memory_mb": "MiB",
    "acceptance_rate": "fraction", "mean_accepted_tokens": "tokens/round",
    "prefill_ms": "ms", "draft_time_share": "fraction", "agreement": "fraction",
}


# ------------------------------------------------------------------ shared pieces
@dataclass(frozen=True)
class ObjectiveInfo:
    """What the study optimised: metric names (one per Optuna objective) and directions."""

    name: str
    metrics: tuple[str, ...]
    directions: tuple[str, ...]          # "minimize" | "maximize"

    @property
    def multi(self) -> bool:
        return len(self.metrics) > 1

    def sign(self, index: int = 0) -> int:
        """+1 when smaller is better for metric `index`, -1 when larger is."""
        return 1 if self.directions[index] == "minimize" else -1

    def axis_title(self, index: int = 0) -> str:
        return metric_title(self.metrics[index])


def metric_title(metric: str) -> str:
    """`metric (unit)` for an axis, or the bare name when the unit is unknown."""
    unit = _UNITS.get(metric)
    return f"{metric} ({unit})" if unit else metric


def objective_info(study: optuna.Study, run: dict[str, Any] | None = None,
                   best_doc: dict[str, Any] | None = None) -> ObjectiveInfo:
    """Metric names from best.json, else the objective preset named in run.json, else the
    study's metric names; directions always from the study (the storage is the truth)."""
    directions = tuple("minimize" if d == optuna.study.StudyDirection.MINIMIZE else "maximize"
                       for d in study.directions)
    run, best_doc = run or {}, best_doc or {}
    doc_objective = best_doc.get("objective") if isinstance(best_doc.get("objective"), dict) else {}
    name = str(doc_objective.get("name") or run.get("objective") or "objective")
    metrics = doc_objective.get("metrics")
    if not (isinstance(metrics, list) and len(metrics) == len(directions)):
        metrics = _preset_metrics(run.get("objective_file") or run.get("objective"))
    if not (isinstance(metrics, (list, tuple)) and len(metrics) == len(directions)):
        metrics = study.metric_names
    if not (isinstance(metrics, (list, tuple)) and len(metrics) == len(directions)):
        metrics = ["objective"] if len(directions) == 1 else [
            f"objective {i}" for i in range(len(directions))]
    return ObjectiveInfo(name, tuple(str(m) for m in metrics), directions)


def _preset_metrics(name_or_path: Any) -> list[str] | None:
    if not name_or_path:
        return None
    from autotune.objectives import load_objective
    try:
        return list(load_objective(str(name_or_path)).metrics)
    except Exception:   # a moved or edited file: fall back to the study's names
        return None


def _finite(value: Any) -> float | None:
    """A float, or None for missing / non-numeric / NaN / infinite values (and bools)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _config(t: FrozenTrial) -> dict[str, Any]:
    config = t.user_attrs.get("config")
    return config if isinstance(config, dict) else {}


def _metrics(t: FrozenTrial) -> dict[str, Any]:
    metrics = t.user_attrs.get("metrics")
    return metrics if isinstance(metrics, dict) else {}


def trial_method(t: FrozenTrial) -> str:
    """The trial's method: from its config, else its `method` param, else `none`."""
    return str(_config(t).get("method") or t.params.get("method") or "none")


def trial_label(t: FrozenTrial) -> str:
    """The short human label of `trials.csv`; trials never run get their method's name."""
    config = _config(t)
    if config:
        return describe(config)
    method = t.params.get("method")
    return f"{method} (not run)" if method else "(not run)"


def trial_preset(t: FrozenTrial) -> str | None:
    preset = t.user_attrs.get(BASELINE_ATTR)
    return str(preset) if preset else None


def _value(t: FrozenTrial, index: int = 0) -> float | None:
    return _finite(t.values[index]) if t.values and len(t.values) > index else None


def complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    """COMPLETE trials with finite objective values, by trial number."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return [t for t in sorted(trials, key=lambda t: t.number)
            if t.values and all(_finite(v) is not None for v in t.values)]


def pareto_numbers(study: optuna.Study, objective: ObjectiveInfo) -> set[int]:
    """Trial numbers on the Pareto front (empty for a single objective)."""
    if not objective.multi or not complete_trials(study):
        return set()
    return {t.number for t in study.best_trials}


def ranked(study: optuna.Study, objective: ObjectiveInfo) -> list[FrozenTrial]:
    """Complete trials best first: by the first metric; for several, the front first."""
    front = pareto_numbers(study, objective)
    return sorted(complete_trials(study),
                  key=lambda t: (t.number not in front, objective.sign(0) * t.values[0], t.number))


def best_trial(study: optuna.Study, objective: ObjectiveInfo) -> FrozenTrial | None:
    """The best complete trial; for several objectives, the front's best on the first
    (the same rule as `run_folder.best_trial`, which writes best.json)."""
    order = ranked(study, objective)
    return order[0] if order else None


def best_speculative(study: optuna.Study, objective: ObjectiveInfo) -> tuple[FrozenTrial | None, str | None]:
    """The best trial that speculates, and a note when it is not the overall best (the AR
    baseline won): panels about drafting have nothing to show for the baseline itself."""
    order = ranked(study, objective)
    if not order:
        return None, None
    if trial_method(order[0]) != "none":
        return order[0], None
    for t in order[1:]:
        if trial_method(t) != "none":
            return t, (f"The best config is the AR baseline; showing the best speculative "
                       f"trial #{t.number} instead.")
    return None, "No speculative trial completed."


def _is_bit(name: str, dist: BaseDistribution | None) -> bool:
    """A per-layer / per-exit on-off param (`…attn_skip[12]`, `…exits[6]`)."""
    return (_INDEXED.match(name) is not None and isinstance(dist, IntDistribution)
            and dist.low == 0 and dist.high == 1)


def _leaf(name: str) -> str:
    """`layer_skip.k` -> `k`: the joint space namespaces each branch's knobs by method."""
    return name.rsplit(".", 1)[-1] if not _INDEXED.match(name) else name


def _derived_values(t: FrozenTrial) -> dict[str, int]:
    """Derived knob values of a trial, for the methods that have them."""
    config, method = _config(t), trial_method(t)
    out = {}
    for name, _, for_method, key in DERIVED_KNOBS:
        if method == for_method and isinstance(config.get(key), list):
            out[name] = len(config[key])
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


# ------------------------------------------------------------------ header
@dataclass
class Header:
    """The summary block: the best config and where it was measured.

    `best_params` holds only the canonical config keys its method reads (plus its exit
    policy's own knobs); `model`, `hardware`, `workload`, `search` are display strings.
    """

    study: str
    objective: str
    best_trial: int | None = None
    best_label: str | None = None
    best_preset: str | None = None
    best_params: dict[str, Any] = field(default_factory=dict)
    best_values: dict[str, float] = field(default_factory=dict)
    speedup: float | None = None
    latency_ms_per_token: float | None = None
    baseline_ms_per_token: float | None = None
    model: dict[str, str] = field(default_factory=dict)
    hardware: dict[str, str] = field(default_factory=dict)
    workload: dict[str, str] = field(default_factory=dict)
    search: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    note: str | None = None


def method_params(config: dict[str, Any]) -> dict[str, Any]:
    """The config keys that matter for its method (all keys for an unknown method)."""
    method = str(config.get("method", "none"))
    keys = _METHOD_KEYS.get(method)
    if keys is None:
        return {k: v for k, v in config.items() if k not in ("temperature", "top_p")}
    keys = keys + _POLICY_KEYS.get(str(config.get("exit_policy")), ()) if keys else keys
    return {"method": method, **{k: config[k] for k in keys if k in config}}


def _pick(source: Any, keys: Iterable[str]) -> dict[str, str]:
    """Display strings of the present, non-empty keys of a dict (nothing for a non-dict)."""
    if not isinstance(source, dict):
        return {}
    out = {}
    for key in keys:
        value = source.get(key)
        if value is None or value == "" or value == []:
            continue
        if key == "sha256" and isinstance(value, str):
            value = value[:12]
        out[key] = _fmt(value)
    return out


def header(study: optuna.Study, objective: ObjectiveInfo, run: dict[str, Any] | None = None,
           best_doc: dict[str, Any] | None = None) -> Header:
    """The header block. Config and metrics come from the study's best trial (best.json is
    rebuilt from it, but may be stale); model / hardware / workload from best.json, else
    run.json, else the best trial's metrics. Missing keys are simply left out."""
    run, best_doc = run or {}, best_doc or {}
    best = best_trial(study, objective)
    directions = ", ".join(f"{d} {m}" for d, m in zip(objective.directions, objective.metrics))
    head = Header(study=str(run.get("study") or study.study_name),
                  objective=f"{objective.name}: {directions}")
    trials = study.get_trials(deepcopy=False)
    head.counts = {state.name.lower(): n for state in TrialState
                   if (n := sum(t.state == state for t in trials))}
    metrics: dict[str, Any] = {}
    if best is not None:
        head.best_trial, head.best_label = best.number, trial_label(best)
        head.best_preset = trial_preset(best)
        head.best_params = method_params(_config(best))
        head.best_values = dict(zip(objective.metrics, best.values))
        metrics = _metrics(best)
    elif isinstance(best_doc.get("params"), dict):
        head.best_trial = best_doc.get("trial")
        head.best_label = best_doc.get("label") or describe(best_doc["params"])
        head.best_preset = best_doc.get("preset")
        head.best_params = method_params(best_doc["params"])
        metrics = best_doc.get("metrics") if isinstance(best_doc.get("metrics"), dict) else {}
    if head.best_trial is None:
        head.note = "No trial has completed yet: there is no best config to show."
    head.speedup = _finite(metrics.get("speedup"))
    head.latency_ms_per_token = _finite(metrics.get("latency_ms_per_token"))
    head.baseline_ms_per_token = _finite(metrics.get("baseline_latency_ms_per_token"))
    if head.baseline_ms_per_token is None:
        # Old or agreement runs: the AR baseline trial's own latency.
        for t in complete_trials(study):
            if trial_preset(t) == BASELINE:
                head.baseline_ms_per_token = _finite(_metrics(t).get("latency_ms_per_token"))
                break
    head.model = (_pick(best_doc.get("model"), ("id", "spec", "dtype", "n_layers", "model_type", "sha256"))
                  or _pick({"id": run.get("model") or metrics.get("model"), "spec": run.get("model_spec"),
                            "dtype": run.get("dtype") or metrics.get("dtype"),
                            "n_layers": run.get("n_layers")}, ("id", "spec", "dtype", "n_layers")))
    draft = best_doc.get("draft") if isinstance(best_doc.get("draft"), dict) else None
    draft_name = (draft or {}).get("id") or run.get("draft") or metrics.get("draft")
    if draft_name:
        head.model["draft"] = str(draft_name)
    head.hardware = (_pick(best_doc.get("hardware"), ("device", "device_name", "cpu", "threads", "cuda",
                                                      "torch", "transformers", "python"))
                     or _pick({"device": run.get("device_type") or metrics.get("device")}, ("device",)))
    head.workload = (_pick(best_doc.get("workload"), ("source", "categories", "prompts", "max_new_tokens",
                                                      "temperature", "top_p", "sha256"))
                     or _pick({"source": run.get("workload"), **run}, ("source", "categories", "prompts",
                                                                       "max_new_tokens", "temperature",
                                                                       "top_p")))
    head.search = _pick(run, ("sampler", "seed", "trials", "space", "prune", "updated"))
    return head


# ------------------------------------------------------------------ optimisation history
@dataclass
class History:
    """`frame`: one row per complete trial: number, label, preset, method, value,
    best_so_far, is_best (value of the first metric). `other`: pruned / failed / running
    trials: number, state, label, reason."""

    metric: str
    direction: str
    frame: pd.DataFrame
    other: pd.DataFrame
    note: str | None = None


def _reason(t: FrozenTrial) -> str:
    for key in ("infeasible", "error", "interrupted"):
        if t.user_attrs.get(key):
            return str(t.user_attrs[key])
    if t.state == TrialState.PRUNED:
        steps = len(t.intermediate_values)
        return f"pruned after {steps} prompt{'s' if steps != 1 else ''}" if steps else "pruned"
    return t.state.name.lower()


def history(study: optuna.Study, objective: ObjectiveInfo) -> History:
    """The objective per complete trial and the best so far, in trial order."""
    sign = objective.sign(0)
    rows, best_so_far = [], math.inf
    best = best_trial(study, objective)
    for t in complete_trials(study):
        best_so_far = min(best_so_far, sign * t.values[0])
        rows.append({"number": t.number, "label": trial_label(t), "preset": trial_preset(t),
                     "method": trial_method(t), "value": t.values[0],
                     "best_so_far": sign * best_so_far,
                     "is_best": best is not None and t.number == best.number})
    other = [{"number": t.number, "state": t.state.name, "label": trial_label(t), "reason": _reason(t)}
             for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
             if t.state != TrialState.COMPLETE]
    frame = pd.DataFrame(rows, columns=["number", "label", "preset", "method", "value",
                                        "best_so_far", "is_best"])
    note = None
    if frame.empty:
        note = "No trial has completed yet."
    elif objective.multi:
        note = f"Several objectives: the history follows the first, {objective.metrics[0]}."
    return History(objective.metrics[0], objective.directions[0], frame,
                   pd.DataFrame(other, columns=["number", "state", "label", "reason"]), note)


# ------------------------------------------------------------------ speedup against each knob
@dataclass
class Knob:
    """One knob's scatter: `frame` columns number, label, preset, method, x, y, is_best."""

    name: str
    title: str
    categorical: bool
    frame: pd.DataFrame
    derived: bool = False
    integer: bool = False       # integer ticks (an IntDistribution or a derived count)
    log: bool = False           # a log-scaled search range: a log x axis


@dataclass
class Knobs:
    """One `Knob` per non-bit Optuna param and per derived knob, y = `y_metric`."""

    y_metric: str
    y_title: str
    knobs: list[Knob]
    note: str | None = None


def response_metric(trials: list[FrozenTrial], objective: ObjectiveInfo) -> tuple[str, str]:
    """(`speedup`, title) when any trial measured it, else the first objective metric:
    the y of the knob panels."""
    if any(_finite(_metrics(t).get("speedup")) is not None for t in trials):
        return "speedup", "speedup (× AR)"
    return objective.metrics[0], f"{objective.axis_title(0)} (objective; no speedup measured)"


def _response(t: FrozenTrial, metric: str, objective: ObjectiveInfo) -> float | None:
    if metric in objective.metrics:
        return _value(t, objective.metrics.index(metric))
    return _finite(_metrics(t).get(metric))


def _knob_order(names: Iterable[str]) -> list[str]:
    """`method` first, then by namespace in order of appearance, then by name."""
    names = list(dict.fromkeys(names))
    spaces: dict[str, int] = {}
    for name in names:
        spaces.setdefault(name.rsplit(".", 1)[0] if "." in name else "", len(spaces))
    return sorted(names, key=lambda n: (n != "method",
                                        spaces[n.rsplit(".", 1)[0] if "." in n else ""], n))


def knobs(study: optuna.Study, objective: ObjectiveInfo) -> Knobs:
    """Speedup (or the objective) against every knob the complete trials set."""
    trials = complete_trials(study)
    metric, title = response_metric(trials, objective)
    best = best_trial(study, objective)
    dists: dict[str, BaseDistribution] = {}
    for t in trials:
        for name, dist in t.distributions.items():
            if not _is_bit(name, dist):
                dists.setdefault(name, dist)
    derived_present = {name for t in trials for name in _derived_values(t)}
    derived = [(f"{method}.{name}", name, text, method) for name, text, method, _ in DERIVED_KNOBS
               if name in derived_present]
    order = _knob_order(list(dists) + [full for full, *_ in derived])
    by_full = {full: (name, text) for full, name, text, _ in derived}
    out = []
    for full in order:
        rows = []
        for t in trials:
            if full in by_full:
                x = _derived_values(t).get(by_full[full][0])
            elif full == "method":
                x = trial_method(t)       # the AR baseline (no params) shows as "none"
            else:
                x = t.params.get(full)
            y = _response(t, metric, objective)
            if x is None or y is None:
                continue
            rows.append({"number": t.number, "label": trial_label(t), "preset": trial_preset(t),
                         "method": trial_method(t), "x": x, "y": y,
                         "is_best": best is not None and t.number == best.number})
        frame = pd.DataFrame(rows, columns=["number", "label", "preset", "method", "x", "y", "is_best"])
        if full in by_full:
            name, text = by_full[full]
            out.append(Knob(full, f"{text} ({full.split('.')[0]})", False, frame, derived=True,
                            integer=True))
        else:
            out.append(Knob(full, full, isinstance(dists[full], CategoricalDistribution), frame,
                            integer=isinstance(dists[full], IntDistribution),
                            log=bool(getattr(dists[full], "log", False))))
    note = None
    if not trials:
        note = "No trial has completed yet."
    elif not out:
        note = "The complete trials set no searched knob (only presets without params ran)."
    return Knobs(metric, title, out, note)


# ------------------------------------------------------------------ parallel coordinates
@dataclass
class Dimension:
    """One axis of the parallel-coordinates plot, already encoded as numbers.

    Categorical values become codes 0..n-1 (`ticktext` the choices); a trial that lacks
    the knob (another method's branch) gets a sentinel code below the range, ticked
    "n/a", so its line is still drawn rather than dropped."""

    label: str
    values: list[float]
    tickvals: list[float] | None = None
    ticktext: list[str] | None = None


@dataclass
class Parallel:
    """`dimensions` (knobs, then one per objective metric), `color` = the first objective's
    values per trial, `numbers` = trial numbers in the same order."""

    dimensions: list[Dimension]
    color: list[float]
    color_title: str
    reverse_scale: bool           # True when smaller is better, so "good" keeps one hue
    numbers: list[int]
    note: str | None = None


def encode_dimension(label: str, values: list[Any], categorical: bool,
                     choices: Iterable[Any] | None = None) -> Dimension:
    """Encode one column (None = missing) as numbers with explicit ticks."""
    present = [v for v in values if v is not None]
    if categorical:
        order = [c for c in (choices or []) if c in present] or []
        order += sorted({str(v) for v in present} - {str(c) for c in order})
        code = {str(c): float(i) for i, c in enumerate(order)}
        tickvals, ticktext = list(code.values()), [str(c) for c in order]
        missing = -1.0
        encoded = [code[str(v)] if v is not None else missing for v in values]
    else:
        numbers = [float(v) for v in present]
        lo, hi = min(numbers), max(numbers)
        distinct = sorted(set(numbers))
        if len(distinct) <= 8:
            tickvals = distinct
        else:
            tickvals = [lo + (hi - lo) * i / 4 for i in range(5)]
        ticktext = [f"{v:.3g}" for v in tickvals]
        missing = lo - max((hi - lo) * 0.15, 1.0 if all(v.is_integer() for v in numbers) else 1e-3)
        encoded = [float(v) if v is not None else missing for v in values]
    if any(v is None for v in values):
        tickvals, ticktext = [missing] + tickvals, ["n/a"] + ticktext
    return Dimension(label, encoded, tickvals, ticktext)


def parallel(study: optuna.Study, objective: ObjectiveInfo) -> Parallel:
    """One line per complete trial across its knobs and the objective.

    The joint space namespaces each method's knobs (`ngram.k`, `layer_skip.k`); they are
    merged by their leaf name (`k`) so one axis serves every method. Per-layer bits are
    left out (the derived counts stand for them); axes with a single value are dropped."""
    trials = complete_trials(study)
    columns: dict[str, list[Any]] = {}
    categorical: dict[str, bool] = {}
    choices: dict[str, list[Any]] = {}
    for i, t in enumerate(trials):
        values: dict[str, Any] = {}
        for name, dist in t.distributions.items():
            if _INDEXED.match(name):
                continue
            leaf = _leaf(name)
            values[leaf] = t.params[name]
            is_cat = isinstance(dist, CategoricalDistribution)
            categorical[leaf] = categorical.get(leaf, False) or is_cat
            if is_cat:
                choices.setdefault(leaf, [])
                choices[leaf] += [c for c in dist.choices if c not in choices[leaf]]
        values.update(_derived_values(t))
        values["method"] = trial_method(t)     # the baseline has no params: "none"
        categorical["method"] = True
        for key, value in values.items():
            columns.setdefault(key, [None] * len(trials))[i] = value
    dims = []
    for key in _knob_order(columns):
        present = {str(v) for v in columns[key] if v is not None}
        if len(present) < 2:
            continue          # one value (or only n/a): `method` already tells these apart
        dims.append(encode_dimension(key, columns[key], categorical.get(key, False), choices.get(key)))
    color = [t.values[0] for t in trials]
    note = None
    if len(trials) < 2:
        note = "Fewer than two trials completed: nothing to compare."
        dims = []
    elif not dims:
        note = "No knob varies across the complete trials."
    else:
        # Every objective gets an axis (the last ones); the colour follows the first.
        dims += [Dimension(objective.axis_title(i), [t.values[i] for t in trials])
                 for i in range(len(objective.metrics))]
    return Parallel(dims, color, objective.metrics[0], objective.sign(0) > 0,
                    [t.number for t in trials], note)


# ------------------------------------------------------------------ parameter importance
@dataclass
class ImportanceGroup:
    """fANOVA importances within one scope: `frame` columns param, importance (sum 1)."""

    scope: str
    n_trials: int
    frame: pd.DataFrame
    note: str | None = None


@dataclass
class Importance:
    groups: list[ImportanceGroup]
    metric: str
    note: str | None = None


def _merged_distribution(dists: list[BaseDistribution]) -> BaseDistribution | None:
    """One distribution covering every branch's version of a knob (`k` ranges differ)."""
    if all(isinstance(d, CategoricalDistribution) for d in dists):
        choices: list[Any] = []
        for d in dists:
            choices += [c for c in d.choices if c not in choices]
        return CategoricalDistribution(choices)
    if all(isinstance(d, IntDistribution) for d in dists) and len({d.log for d in dists}) == 1:
        return IntDistribution(min(d.low for d in dists), max(d.high for d in dists), log=dists[0].log)
    if all(isinstance(d, (IntDistribution, FloatDistribution)) for d in dists):
        log = all(d.log for d in dists)
        return FloatDistribution(min(d.low for d in dists), max(d.high for d in dists), log=log)
    return None


def _importance_group(scope: str, rows: list[tuple[dict[str, Any], dict[str, BaseDistribution], float]],
                      direction: str) -> ImportanceGroup:
    """fANOVA over the knobs every row has and that vary; conditional knobs (present in
    only some rows, e.g. γ under one exit policy) are named in the note."""
    n = len(rows)
    empty = pd.DataFrame(columns=["param", "importance"])
    if n < MIN_IMPORTANCE_TRIALS:
        return ImportanceGroup(scope, n, empty, f"{n} complete trial{'s' if n != 1 else ''}; "
                               f"importance needs at least {MIN_IMPORTANCE_TRIALS}.")
    names = set.intersection(*(set(p) for p, _, _ in rows))
    conditional = sorted(set.union(*(set(p) for p, _, _ in rows)) - names)
    merged = {}
    for name in sorted(names):
        dist = _merged_distribution([d[name] for _, d, _ in rows])
        values = {str(p[name]) for p, _, _ in rows}
        if dist is not None and len(values) > 1 and not dist.single():
            merged[name] = dist
    extra = f" Left out (set in only some trials): {', '.join(conditional)}." if conditional else ""
    if not merged:
        return ImportanceGroup(scope, n, empty, "No knob varies across these trials." + extra)
    # A scratch in-memory study: Optuna logs its creation at INFO, which is noise here.
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        scratch = optuna.create_study(direction=direction)
    finally:
        optuna.logging.set_verbosity(verbosity)
    for params, _, value in rows:
        scratch.add_trial(optuna.trial.create_trial(
            value=value, params={k: params[k] for k in merged}, distributions=merged))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scores = optuna.importance.get_param_importances(
                scratch, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
    except Exception as exc:   # degenerate inputs (e.g. all values equal): say so
        return ImportanceGroup(scope, n, empty, f"importance failed: {str(exc).splitlines()[0]}" + extra)
    frame = pd.DataFrame([{"param": k, "importance": float(v)} for k, v in scores.items()],
                         columns=["param", "importance"])
    return ImportanceGroup(scope, n, frame.sort_values("importance", ascending=False, ignore_index=True),
                           extra.strip() or None)


def importance(study: optuna.Study, objective: ObjectiveInfo) -> Importance:
    """fANOVA importance (Optuna's evaluator, seed 0) of the first objective metric.

    Optuna's own call only assesses params present in *every* trial; in the joint space
    that is `method` alone (the baseline has none), which says little. So:
    - scope "all methods": the speculative trials, with namespaced knobs merged by leaf
      name (`ngram.k`, `layer_skip.k` -> `k`, ranges united), over the knobs they all
      share (typically `method`, `k`, `exit_policy`);
    - one scope per method with at least MIN_IMPORTANCE_TRIALS complete trials: that
      branch's own knobs, with the per-layer / per-exit bits replaced by the derived
      counts (attention layers skipped, MLP layers skipped, number of exits), which is
      what a reader can act on. Knobs set only in some trials of a scope (γ under one exit
      policy, a threshold per chosen exit) are left out and named in the scope's note.
    The AR baseline (no knobs) is in no scope."""
    trials = [t for t in complete_trials(study) if trial_method(t) != "none" and t.params]
    per_method: dict[str, list[tuple[dict[str, Any], dict[str, BaseDistribution], float]]] = {}
    joint = []
    for t in trials:
        params: dict[str, Any] = {}
        dists: dict[str, BaseDistribution] = {}
        for name, dist in t.distributions.items():
            if _INDEXED.match(name):
                continue
            params[_leaf(name)], dists[_leaf(name)] = t.params[name], dist
        # A derived count's "distribution" is the single observed point; merging a
        # scope's points gives the observed range, which is what fANOVA should span.
        for name, value in _derived_values(t).items():
            params[name], dists[name] = value, IntDistribution(value, value)
        joint.append((params, dists, t.values[0]))
        per_method.setdefault(trial_method(t), []).append((params, dists, t.values[0]))
    direction = objective.directions[0]
    groups = []
    if len(per_method) > 1:
        groups.append(_importance_group("all methods", joint, direction))
    for method in sorted(per_method):
        groups.append(_importance_group(method, per_method[method], direction))
    note = None
    if not trials:
        note = "No speculative trial with searched knobs has completed."
    elif not any(not g.frame.empty for g in groups):
        note = "Too few trials per scope to estimate importance."
    if objective.multi and trials:
        note = (note + " " if note else "") + f"Importance of the first objective, {objective.metrics[0]}."
    return Importance(groups, objective.metrics[0], note)


# ------------------------------------------------------------------ layer-skip heatmap
@dataclass
class LayerHeatmap:
    """`frame`: one row per layer: layer, attn_fraction, mlp_fraction (share of the top
    trials skipping it), best_attn, best_mlp (the best layer_skip trial's mask, 0/1)."""

    n_layers: int | None
    frame: pd.DataFrame
    n_top: int = 0
    n_candidates: int = 0
    best_number: int | None = None
    best_label: str | None = None
    note: str | None = None


def n_layers_of(run: dict[str, Any] | None, best_doc: dict[str, Any] | None,
                study: optuna.Study | None = None) -> int | None:
    """run.json `n_layers`, else best.json `model.n_layers`, else the largest layer index
    any trial's mask or bit param names, plus one."""
    for value in ((run or {}).get("n_layers"),
                  ((best_doc or {}).get("model") or {}).get("n_layers")
                  if isinstance((best_doc or {}).get("model"), dict) else None):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    if study is None:
        return None
    top = -1
    for t in study.get_trials(deepcopy=False):
        for key in ("attn_skip", "mlp_skip"):
            top = max([top] + [int(i) for i in _config(t).get(key) or []])
        for name in t.params:
            m = _INDEXED.match(name)
            if m and m["base"].rsplit(".", 1)[-1] in ("attn_skip", "mlp_skip"):
                top = max(top, int(m["index"]))
    return top + 1 if top >= 0 else None


def layer_heatmap(study: optuna.Study, objective: ObjectiveInfo, n_layers: int | None,
                  top_fraction: float = TOP_FRACTION) -> LayerHeatmap:
    """Which layers the best layer_skip drafts skip (as in Draft & Verify, Fig. 6).

    Among the top `top_fraction` (at least one) of the complete layer_skip trials by the
    objective: per layer, the fraction skipping its attention and its MLP; plus the mask
    of the best of them."""
    columns = ["layer", "attn_fraction", "mlp_fraction", "best_attn", "best_mlp"]
    candidates = [t for t in ranked(study, objective) if trial_method(t) == "layer_skip"]
    if not candidates:
        return LayerHeatmap(n_layers, pd.DataFrame(columns=columns),
                            note="No layer_skip trial completed.")
    # round() first: 0.1 * 30 is 3.0000000000000004 in floating point, not 3.
    n_top = max(1, math.ceil(round(len(candidates) * top_fraction, 9)))
    top = candidates[:n_top]
    masks = [(set(_config(t).get("attn_skip") or []), set(_config(t).get("mlp_skip") or [])) for t in top]
    if n_layers is None:
        indices = [i for attn, mlp in masks for i in attn | mlp]
        n_layers = max(indices) + 1 if indices else 1
    best_attn, best_mlp = masks[0]
    rows = [{"layer": layer,
             "attn_fraction": sum(layer in attn for attn, _ in masks) / n_top,
             "mlp_fraction": sum(layer in mlp for _, mlp in masks) / n_top,
             "best_attn": int(layer in best_attn), "best_mlp": int(layer in best_mlp)}
            for layer in range(n_layers)]
    return LayerHeatmap(n_layers, pd.DataFrame(rows, columns=columns), n_top, len(candidates),
                        top[0].number, trial_label(top[0]))


# ------------------------------------------------------------------ position-wise acceptance
@dataclass
class PosAcc:
    """`frame`: number, label, method, role ("best" or the preset's name), position
    (1-based draft position), acceptance (P(token i accepted | token i-1 accepted))."""

    frame: pd.DataFrame
    note: str | None = None


def pos_acc(study: optuna.Study, objective: ObjectiveInfo) -> PosAcc:
    """Position-wise acceptance of the best config and of each completed documented default."""
    columns = ["number", "label", "method", "role", "position", "acceptance"]
    best, note = best_speculative(study, objective)
    shown: list[tuple[FrozenTrial, str]] = [(best, "best")] if best is not None else []
    for t in complete_trials(study):
        preset = trial_preset(t)
        if preset and preset != BASELINE and (best is None or t.number != best.number):
            shown.append((t, preset))
    rows, missing = [], []
    for t, role in shown:
        values = _metrics(t).get("pos_acc")
        if not isinstance(values, list) or not values:
            missing.append(f"#{t.number}")
            continue
        rows += [{"number": t.number, "label": trial_label(t), "method": trial_method(t),
                  "role": role, "position": i + 1,
                  "acceptance": _finite(v)} for i, v in enumerate(values) if _finite(v) is not None]
    notes = [note] if note else []
    if not shown:
        notes.append("No speculative trial completed.")
    elif missing:
        notes.append(f"No position-wise acceptance measured for {', '.join(missing)}.")
    return PosAcc(pd.DataFrame(rows, columns=columns), " ".join(notes) or None)


# ------------------------------------------------------------------ time split
@dataclass
class TimeSplit:
    """`frame`: config ("best #n …" / "AR baseline"), part (draft / verify / other),
    ms_per_token; the bars of one config add up to its latency per generated token."""

    frame: pd.DataFrame
    note: str | None = None


_PARTS = ("draft", "verify", "other")


def time_split(study: optuna.Study, objective: ObjectiveInfo) -> TimeSplit:
    """Draft / verify / other milliseconds per generated token, best config vs AR baseline
    (the baseline measured interleaved with the best config in the same trial)."""
    columns = ["config", "part", "ms_per_token"]
    best, note = best_speculative(study, objective)
    notes = [note] if note else []
    if best is None:
        if not notes:
            notes.append("No speculative trial completed.")
        return TimeSplit(pd.DataFrame(columns=columns), " ".join(notes))
    m = _metrics(best)
    name = f"best #{best.number}"
    candidate = {part: _finite(m.get(f"{part}_ms_per_token")) for part in _PARTS}
    baseline = {"draft": 0.0, "verify": _finite(m.get("baseline_verify_ms_per_token")),
                "other": _finite(m.get("baseline_other_ms_per_token"))}
    rows = []
    if all(v is not None for v in candidate.values()):
        rows += [{"config": name, "part": p, "ms_per_token": v} for p, v in candidate.items()]
    else:
        notes.append(f"Trial #{best.number} has no draft / verify / other split "
                     "(measured before the split was recorded).")
    if rows and all(v is not None for v in baseline.values()):
        rows += [{"config": "AR baseline", "part": p, "ms_per_token": v} for p, v in baseline.items()]
    elif rows:
        notes.append("The baseline's split was not recorded.")
    return TimeSplit(pd.DataFrame(rows, columns=columns), " ".join(notes) or None)


# ------------------------------------------------------------------ Leviathan et al. curve
def leviathan_speedup(alpha: float, c: float, k: int | float) -> float:
    """Expected wall-time improvement of speculative decoding (Leviathan et al. 2023, Thm 3.8):
    S(K) = (1 - α^(K+1)) / ((1 - α)(K·c + 1)), with the α → 1 limit (K + 1) / (K·c + 1)."""
    if alpha >= 1.0 - 1e-12:
        return (k + 1) / (k * c + 1)
    return (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))


@dataclass
class Leviathan:
    """`curve`: k, speedup (analytic, for the best config's α and c); `points`: measured
    trials of the best config's method: number, label, preset, k, k_source, speedup, is_best."""

    method: str | None
    alpha: float | None
    alpha_source: str | None
    cost_ratio: float | None
    best_number: int | None
    curve: pd.DataFrame
    points: pd.DataFrame
    note: str | None = None


def leviathan(study: optuna.Study, objective: ObjectiveInfo) -> Leviathan:
    """The analytic speedup-vs-K curve at the best config's measured α and c, with the
    measured speedups of the trials of its method (x: mean drafted tokens per round when
    recorded, else the config's k)."""
    curve_cols, point_cols = ["k", "speedup"], ["number", "label", "preset", "k", "k_source",
                                                "speedup", "is_best"]
    best, lead = best_speculative(study, objective)
    notes = [lead] if lead else []
    if best is None:
        return Leviathan(None, None, None, None, None, pd.DataFrame(columns=curve_cols),
                         pd.DataFrame(columns=point_cols), " ".join(notes) or "No trial completed.")
    method = trial_method(best)
    points = []
    for t in complete_trials(study):
        if trial_method(t) != method:
            continue
        speed = _finite(_metrics(t).get("speedup"))
        drafted = _finite(_metrics(t).get("mean_drafted_tokens"))
        k = drafted if drafted is not None else _finite(_config(t).get("k"))
        if speed is None or k is None:
            continue
        points.append({"number": t.number, "label": trial_label(t), "preset": trial_preset(t), "k": k,
                       "k_source": "mean_drafted_tokens" if drafted is not None else "k",
                       "speedup": speed, "is_best": t.number == best.number})
    m = _metrics(best)
    alpha_source = "acceptance_alpha" if _finite(m.get("acceptance_alpha")) is not None else (
        "acceptance_rate" if _finite(m.get("acceptance_rate")) is not None else None)
    alpha = _finite(m.get(alpha_source)) if alpha_source else None
    c = _finite(m.get("cost_ratio"))
    curve = pd.DataFrame(columns=curve_cols)
    if alpha is None or c is None:
        missing = " and ".join(x for x, v in (("α", alpha), ("cost ratio c", c)) if v is None)
        notes.append(f"No analytic curve: trial #{best.number} has no measured {missing}.")
    else:
        k_max = max([LEVIATHAN_MIN_K] + [math.ceil(p["k"]) for p in points])
        curve = pd.DataFrame([{"k": k, "speedup": leviathan_speedup(alpha, c, k)}
                              for k in range(1, k_max + 1)], columns=curve_cols)
    if not points:
        notes.append(f"No measured speedup for the {method} trials.")
    return Leviathan(method, alpha, alpha_source, c, best.number, curve,
                     pd.DataFrame(points, columns=point_cols), " ".join(notes) or None)


# ------------------------------------------------------------------ Pareto front
@dataclass
class Pareto:
    """`frame`: number, label, preset, method, x, y (the first two objective values),
    on_front, is_best; empty with a note for a single-objective study."""

    x_metric: str | None
    y_metric: str | None
    frame: pd.DataFrame
    note: str | None = None


def pareto(study: optuna.Study, objective: ObjectiveInfo) -> Pareto:
    """Every complete trial in the plane of the first two objectives, the front flagged."""
    columns = ["number", "label", "preset", "method", "x", "y", "on_front", "is_best"]
    if not objective.multi:
        return Pareto(None, None, pd.DataFrame(columns=columns),
                      "Single-objective study: no Pareto front.")
    front = pareto_numbers(study, objective)
    best = best_trial(study, objective)
    rows = [{"number": t.number, "label": trial_label(t), "preset": trial_preset(t),
             "method": trial_method(t), "x": t.values[0], "y": t.values[1],
             "on_front": t.number in front, "is_best": best is not None and t.number == best.number}
            for t in complete_trials(study)]
    note = None if rows else "No trial has completed yet."
    if rows and len(objective.metrics) > 2:
        note = f"{len(objective.metrics)} objectives: the plot shows the first two."
    return Pareto(objective.metrics[0], objective.metrics[1], pd.DataFrame(rows, columns=columns), note)


# ------------------------------------------------------------------ top trials
TOP_METRICS = ("speedup", "latency_ms_per_token", "baseline_latency_ms_per_token",
               "mean_accepted_tokens", "acceptance_rate", "lossless")


@dataclass
class TopTrials:
    """`frame`: rank, number, label, preset, [pareto], one column per objective metric
    (`value.<metric>`), then the TOP_METRICS present in any row (None where missing)."""

    frame: pd.DataFrame
    note: str | None = None


def top_trials(study: optuna.Study, objective: ObjectiveInfo, n: int = 10) -> TopTrials:
    """The `n` best complete trials (the Pareto front first for several objectives)."""
    front = pareto_numbers(study, objective)
    rows = []
    for rank, t in enumerate(ranked(study, objective)[:n], start=1):
        m = _metrics(t)
        row: dict[str, Any] = {"rank": rank, "number": t.number, "label": trial_label(t),
                               "preset": trial_preset(t)}
        if objective.multi:
            row["pareto"] = t.number in front
        for metric, value in zip(objective.metrics, t.values):
            row[f"value.{metric}"] = value
        for key in TOP_METRICS:
            if key not in objective.metrics:
                row[key] = m.get(key)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        keep = [c for c in frame.columns if c in ("rank", "number", "label", "preset", "pareto")
                or c.startswith("value.") or frame[c].notna().any()]
        frame = frame[keep]
    return TopTrials(frame, None if rows else "No trial has completed yet.")


# ------------------------------------------------------------------ everything
@dataclass
class ReportData:
    """All panels of one report, in page order, plus the inputs they came from."""

    run: dict[str, Any]
    objective: ObjectiveInfo
    header: Header
    history: History
    knobs: Knobs
    parallel: Parallel
    importance: Importance
    layers: LayerHeatmap
    pos_acc: PosAcc
    time_split: TimeSplit
    leviathan: Leviathan
    pareto: Pareto
    top: TopTrials


def collect(study: optuna.Study, run: dict[str, Any] | None = None,
            best_doc: dict[str, Any] | None = None) -> ReportData:
    """Every panel's data for `study` (run / best_doc: the run folder's JSON documents)."""
    run, best_doc = run or {}, best_doc or {}
    objective = objective_info(study, run, best_doc)
    return ReportData(
        run=run, objective=objective,
        header=header(study, objective, run, best_doc),
        history=history(study, objective),
        knobs=knobs(study, objective),
        parallel=parallel(study, objective),
        importance=importance(study, objective),
        layers=layer_heatmap(study, objective, n_layers_of(run, best_doc, study)),
        pos_acc=pos_acc(study, objective),
        time_split=time_split(study, objective),
        leviathan=leviathan(study, objective),
        pareto=pareto(study, objective),
        top=top_trials(study, objective),
    )
