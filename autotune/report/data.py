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

from autotune.decoding.config import config_from_mapping
from autotune.errors import AutotuneError
from autotune.profile import FREE_FACTOR, PROFILE_FILE, free_tokens
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

# Knobs computed from a draft tree's canonical config (tree trials only; a chain lacks
# them): width and depth of a dynamic tree, and the nodes one verify pass checks.
TREE_KNOBS: tuple[tuple[str, str], ...] = (
    ("tree_width", "tree width"),
    ("tree_depth", "tree depth"),
    ("tree_nodes", "tree nodes verified per round"),
)
_DERIVED_TITLES = {name: text for name, text, _, _ in DERIVED_KNOBS} | dict(TREE_KNOBS)
TREE_CONFIG_KEYS = ("tree_width", "tree_depth", "tree_tokens", "tree_choices")

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
    "mean_verified_tokens": "tokens/pass",
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


@dataclass(frozen=True)
class TreeShape:
    """The draft shape of one config, from its canonical keys.

    kind: "chain" (tree_width 0, no tree_choices), "tree" (a dynamic tree) or "static"
    (tree_choices). depth: tree_depth; a chain's k; a static tree's deepest path.
    width: tree_width (0 for chains and static trees). tokens: tree_tokens as set
    (0 = every drafted node). nodes: draft nodes one verify pass checks at most, root
    excluded (`DecodeConfig.tree_node_count()`; a chain's k)."""

    kind: str
    width: int
    depth: int
    tokens: int
    nodes: int


def tree_shape(config: dict[str, Any]) -> TreeShape | None:
    """The shape of a speculative config; None for the AR baseline, no config, or tree
    keys that do not parse (a hand-edited config)."""
    method = config.get("method")
    if not config or method in (None, "none"):
        return None
    try:
        cfg = config_from_mapping({key: config[key] for key in TREE_CONFIG_KEYS + ("k",)
                                   if config.get(key) is not None})
    except AutotuneError:
        return None
    if cfg.tree_choices:
        return TreeShape("static", 0, max(len(p) for p in cfg.tree_choices), 0,
                         cfg.tree_node_count())
    if cfg.tree_width > 0:
        return TreeShape("tree", cfg.tree_width, cfg.tree_depth, cfg.tree_tokens,
                         cfg.tree_node_count())
    return TreeShape("chain", 0, cfg.k, 0, cfg.k)


def _derived_values(t: FrozenTrial) -> dict[str, int]:
    """Derived knob values of a trial, for the methods that have them: layer / exit
    counts, and a tree's width, depth and verified nodes (trees only)."""
    config, method = _config(t), trial_method(t)
    out = {}
    for name, _, for_method, key in DERIVED_KNOBS:
        if method == for_method and isinstance(config.get(key), list):
            out[name] = len(config[key])
    shape = tree_shape(config)
    if shape is not None and shape.kind != "chain":
        if shape.kind == "tree":
            out["tree_width"], out["tree_depth"] = shape.width, shape.depth
        out["tree_nodes"] = shape.nodes
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
    shape = tree_shape(config)
    if shape is not None and shape.kind != "chain":
        # A tree's shape replaces k and the exit policy (a tree needs exit_policy=fixed).
        keys = tuple(k for k in keys if k not in ("k", "exit_policy")) + (
            ("tree_choices",) if shape.kind == "static" else ("tree_width", "tree_depth", "tree_tokens"))
    out = {"method": method, **{k: config[k] for k in keys if k in config}}
    if shape is not None and shape.kind == "static":
        # Up to 255 paths: the header names the tree's size; the exports hold the paths.
        out["tree_choices"] = f"{shape.nodes} paths, depth {shape.depth}"
    return out


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


# Tree knobs read best as width, depth, nodes (then any searched tree_tokens).
_TREE_ORDER = {name: f"tree_{i}" for i, (name, _) in enumerate(TREE_KNOBS)}


def _knob_order(names: Iterable[str]) -> list[str]:
    """`method` first, then by namespace in order of appearance, then by name."""
    names = list(dict.fromkeys(names))
    spaces: dict[str, int] = {}
    for name in names:
        spaces.setdefault(name.rsplit(".", 1)[0] if "." in name else "", len(spaces))

    def key(n: str) -> tuple[bool, int, str]:
        space, _, leaf = n.rpartition(".")
        return n != "method", spaces[space], _TREE_ORDER.get(leaf, leaf)
    return sorted(names, key=key)


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
    # A derived knob per method that has it (`layer_skip.n_attn_skipped`,
    # `draft_model.tree_width`), unless the space already searches a knob of that name.
    searched = {(name.rsplit(".", 1)[0] if "." in name else "", _leaf(name)) for name in dists}
    derived_present: dict[tuple[str, str], None] = {}
    for t in trials:
        for name in _derived_values(t):
            derived_present.setdefault((trial_method(t), name), None)
    order_of = {name: i for i, name in enumerate(_DERIVED_TITLES)}
    derived = [(f"{method}.{name}", name, _DERIVED_TITLES[name], method)
               for method, name in sorted(derived_present, key=lambda mn: (mn[0], order_of[mn[1]]))
               if (method, name) not in searched]
    order = _knob_order(list(dists) + [full for full, *_ in derived])
    by_full = {full: (name, text) for full, name, text, _ in derived}
    out = []
    for full in order:
        rows = []
        for t in trials:
            if full in by_full:
                x = (_derived_values(t).get(by_full[full][0])
                     if trial_method(t) == full.split(".")[0] else None)
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
               "mean_accepted_tokens", "mean_verified_tokens", "acceptance_rate", "lossless")


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


# ------------------------------------------------------------------ draft trees
@dataclass
class TreePanel:
    """Speedup over the shape of the draft tree.

    `cells`: one row per heatmap cell, the best trial of that shape: column ("chain",
    the tree width as text, or "static"), depth, value (the response metric), number,
    label, method, tokens (its tree_tokens; 0 = every drafted node), nodes (nodes
    verified per round), budgets (the tree_tokens tried in the cell, as text), n_trials,
    is_best (the best cell). `columns`: the column order. `depth_acc`: number, label,
    method, role, depth, share: the depth acceptance of the best tree and best chain."""

    metric: str
    metric_title: str
    higher_better: bool
    columns: list[str]
    cells: pd.DataFrame
    depth_acc: pd.DataFrame
    note: str | None = None


_TREE_CELL_COLUMNS = ["column", "depth", "value", "number", "label", "method", "tokens", "nodes",
                      "budgets", "n_trials", "is_best"]


def _budget(tokens: int) -> str:
    return "all" if tokens == 0 else str(tokens)


def _sign_of(metric: str, objective: ObjectiveInfo) -> int:
    """+1 when smaller is better for `metric` (speedup and unknown metrics: larger)."""
    if metric in objective.metrics:
        return objective.sign(objective.metrics.index(metric))
    return -1


def tree_panel(study: optuna.Study, objective: ObjectiveInfo) -> TreePanel:
    """The best speedup per tree width × depth, at the best token budget.

    Per (width, depth) cell, the complete trial with the best speedup (else the first
    objective) over every tree_tokens tried there: the cell shows its value and names its
    budget. Chains (tree_width 0) of the methods that also drafted trees form a "chain"
    column at depth = k, a tree of width 1 in all but the exit policy; static trees
    (tree_choices) a "static" column at their deepest path."""
    trials = complete_trials(study)
    metric, title = response_metric(trials, objective)
    sign = _sign_of(metric, objective)
    shaped = [(t, shape) for t in trials if (shape := tree_shape(_config(t))) is not None]
    tree_methods = {trial_method(t) for t, s in shaped if s.kind != "chain"}
    empty = TreePanel(metric, title, sign < 0, [], pd.DataFrame(columns=_TREE_CELL_COLUMNS),
                      pd.DataFrame(columns=["number", "label", "method", "role", "depth", "share"]))
    if not trials:
        empty.note = "No trial has completed yet."
        return empty
    if not tree_methods:
        empty.note = ("No trial drafted a tree: every config is a chain (tree_width 0, no "
                      "tree_choices). A search space with tree knobs (tree_width, tree_depth, "
                      "tree_tokens) fills this panel.")
        return empty
    groups: dict[tuple[str, int], list[tuple[FrozenTrial, TreeShape, float]]] = {}
    unmeasured = []
    for t, shape in shaped:
        if shape.kind == "chain" and trial_method(t) not in tree_methods:
            continue
        value = _response(t, metric, objective)
        if value is None:
            unmeasured.append(f"#{t.number}")
            continue
        column = {"chain": "chain", "static": "static"}.get(shape.kind, str(shape.width))
        groups.setdefault((column, shape.depth), []).append((t, shape, value))
    rows = []
    for (column, depth), members in groups.items():
        t, shape, value = min(members, key=lambda m: (sign * m[2], m[0].number))
        budgets = sorted({m[1].tokens for m in members}, key=lambda b: (b == 0, b))
        rows.append({"column": column, "depth": depth, "value": value, "number": t.number,
                     "label": trial_label(t), "method": trial_method(t), "tokens": shape.tokens,
                     "nodes": shape.nodes,
                     "budgets": ", ".join(_budget(b) for b in budgets) if column not in ("chain", "static") else "",
                     "n_trials": len(members), "is_best": False})
    cells = pd.DataFrame(rows, columns=_TREE_CELL_COLUMNS)
    widths = sorted({int(c) for c in cells["column"] if c not in ("chain", "static")})
    columns = (["chain"] if (cells["column"] == "chain").any() else []) + [str(w) for w in widths] + (
        ["static"] if (cells["column"] == "static").any() else [])
    notes = []
    if not (cells["column"] != "chain").any():
        cells = cells.iloc[0:0]
        columns = []
    if not cells.empty:
        cells = cells.sort_values(["depth", "column"], key=lambda c: c.map(columns.index)
                                  if c.name == "column" else c, ignore_index=True)
        best_at = min(range(len(cells)), key=lambda i: (sign * cells.at[i, "value"], cells.at[i, "number"]))
        cells.loc[best_at, "is_best"] = True
        notes.append(_tree_summary(cells, metric, sign))
    else:
        notes.append(f"No tree trial measured {metric}.")
    if unmeasured:
        notes.append(f"No {metric} for {', '.join(unmeasured)}.")
    depth_acc = _depth_acceptance(cells, sign, {t.number: t for t in trials})
    if not cells.empty and depth_acc.empty:
        notes.append("No depth acceptance recorded for the best tree or chain.")
    return TreePanel(metric, title, sign < 0, columns, cells, depth_acc, " ".join(notes) or None)


def _shape_text(row: Any) -> str:
    """`tree w4 d5 t30`, `chain k=4`, `static tree, 12 nodes, depth 4` for a cell row."""
    if row["column"] == "chain":
        return f"chain k={row['depth']}"
    if row["column"] == "static":
        return f"static tree, {row['nodes']} nodes, depth {row['depth']}"
    return f"tree w{row['column']} d{row['depth']} t={_budget(int(row['tokens']))}"


def _tree_summary(cells: pd.DataFrame, metric: str, sign: int) -> str:
    """The best tree against the best chain, and how to read the chain / static columns."""
    unit = "×" if metric == "speedup" else f" {metric}"

    def best(part: pd.DataFrame) -> Any:
        return part.loc[min(part.index, key=lambda i: (sign * part.at[i, "value"], part.at[i, "number"]))]

    trees, chains = cells[cells["column"] != "chain"], cells[cells["column"] == "chain"]
    tree = best(trees)
    parts = [f"Best tree: #{tree['number']} {tree['method']} {_shape_text(tree)}, "
             f"{tree['value']:.3g}{unit}"]
    if not chains.empty:
        chain = best(chains)
        parts[0] += (f"; best chain of the same drafters: #{chain['number']} {chain['method']} "
                     f"{_shape_text(chain)}, {chain['value']:.3g}{unit}")
    parts[0] += "."
    parts.append("Each cell is the best trial of its width and depth over the token budgets tried "
                 "there (t: tree_tokens, the nodes kept after the rerank; t=all keeps every "
                 "drafted node).")
    if not chains.empty:
        parts.append("The chain column holds the chains (tree_width 0) of the drafters that also "
                     "drafted trees, at depth = k, the most tokens a chain drafts per round: a "
                     "width-1 tree but for its exit policy.")
    statics = cells[cells["column"] == "static"]
    if not statics.empty:
        listed = "; ".join(f"#{r.number} {r.method} {r.nodes} nodes to depth {r.depth}: "
                           f"{r.value:.3g}{unit}" for r in statics.itertuples(index=False))
        parts.append(f"The static column holds static trees (tree_choices) at their deepest "
                     f"path: {listed}.")
    return " ".join(parts)


def _depth_acceptance(cells: pd.DataFrame, sign: int, by_number: dict[int, FrozenTrial]) -> pd.DataFrame:
    """Depth acceptance (share of rounds whose accepted path reached depth d, among those
    that drafted that deep) of the best tree and of the best chain, when recorded."""
    columns = ["number", "label", "method", "role", "depth", "share"]
    rows = []
    for role, part in (("best tree", cells[cells["column"] != "chain"]),
                       ("best chain", cells[cells["column"] == "chain"])):
        if part.empty:
            continue
        i = min(part.index, key=lambda i: (sign * part.at[i, "value"], part.at[i, "number"]))
        t = by_number[int(part.at[i, "number"])]
        values = _metrics(t).get("depth_acceptance")
        if not isinstance(values, list):
            continue
        rows += [{"number": t.number, "label": trial_label(t), "method": trial_method(t),
                  "role": role, "depth": d, "share": _finite(v)}
                 for d, v in enumerate(values, start=1) if _finite(v) is not None]
    return pd.DataFrame(rows, columns=columns)


# ------------------------------------------------------------------ hardware profile
FREE_TOLERANCE = FREE_FACTOR - 1    # "free": within 10 % of the cost of verifying one token


@dataclass
class Hardware:
    """The target's forward cost against the tokens verified in one pass.

    `frame`: tokens, ms (median), ms_min, ms_per_token (median / tokens), by tokens.
    `free_up_to`: the largest n whose median is within FREE_TOLERANCE of the 1-token
    cost; `extra_ms_per_token`: the slope of a least-squares line through the medians
    from there on. `verified`: the best speculative trial's mean_verified_tokens."""

    frame: pd.DataFrame
    info: dict[str, str] = field(default_factory=dict)
    free_up_to: int | None = None
    base_ms: float | None = None
    extra_ms_per_token: float | None = None
    verified: float | None = None
    verified_number: int | None = None
    note: str | None = None


_PROFILE_COLUMNS = ["tokens", "ms", "ms_min", "ms_per_token"]


def profile_points(doc: Any) -> tuple[pd.DataFrame, int]:
    """The valid points of a hardware profile document, by tokens, and how many entries
    were left out (not an object, tokens not a positive integer, ms not a positive finite
    number, a repeated token count)."""
    points = doc.get("points") if isinstance(doc, dict) else None
    rows, dropped, seen = [], 0, set()
    for point in points if isinstance(points, list) else []:
        tokens = point.get("tokens") if isinstance(point, dict) else None
        ms = _finite(point.get("ms")) if isinstance(point, dict) else None
        if (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1 or tokens in seen
                or ms is None or ms <= 0):
            dropped += 1
            continue
        seen.add(tokens)
        ms_min = _finite(point.get("ms_min"))
        rows.append({"tokens": tokens, "ms": ms, "ms_min": ms_min if ms_min and ms_min > 0 else None,
                     "ms_per_token": ms / tokens})
    frame = pd.DataFrame(rows, columns=_PROFILE_COLUMNS)
    return frame.sort_values("tokens", ignore_index=True), dropped


def free_up_to(frame: pd.DataFrame, tolerance: float = FREE_TOLERANCE) -> int | None:
    """The largest token count whose median cost is within `tolerance` of the 1-token
    cost; None without a 1-token point."""
    if not (frame["tokens"] == 1).any():
        return None
    # profile.free_tokens measures against the first point: the 1-token one, once sorted.
    points = frame.sort_values("tokens")[["tokens", "ms"]].to_dict("records")
    return int(free_tokens({"points": points}, 1 + tolerance))


def marginal_ms(frame: pd.DataFrame, start: int) -> float | None:
    """Milliseconds per extra verified token beyond `start`: the least-squares slope of
    the medians at `start` tokens and above (None with fewer than two such points)."""
    part = frame[frame["tokens"] >= start]
    if len(part) < 2:
        return None
    x, y = part["tokens"].astype(float), part["ms"].astype(float)
    mx, my = x.mean(), y.mean()
    return float(((x - mx) * (y - my)).sum() / ((x - mx) ** 2).sum())


def hardware(doc: Any, study: optuna.Study | None = None, objective: ObjectiveInfo | None = None,
             problem: str | None = None) -> Hardware:
    """The hardware panel from the run folder's hardware_profile.json (`doc`: its parsed
    content, None when there is none; `problem`: why it could not be read), with the best
    speculative trial's mean verified tokens per pass when the study is given."""
    empty = pd.DataFrame(columns=_PROFILE_COLUMNS)
    if problem:
        return Hardware(empty, note=f"Cannot read {PROFILE_FILE}: {problem}. `autotune search` "
                                    f"writes it into the run folder.")
    if doc is None:
        return Hardware(empty, note=f"No {PROFILE_FILE} in this run folder: `autotune search` "
                                    "writes it into the run folder (runs from before it did "
                                    "have none).")
    frame, dropped = profile_points(doc)
    if frame.empty:
        what = "is not a JSON object" if not isinstance(doc, dict) else (
            "has no list of points" if not isinstance(doc.get("points"), list)
            else "has no valid point (tokens >= 1, ms > 0)")
        return Hardware(empty, note=f"{PROFILE_FILE} {what}: nothing to plot. `autotune search` "
                                    "writes it into the run folder.")
    info = _pick(doc, ("model", "device", "dtype", "context_tokens", "repeats"))
    out = Hardware(frame, info)
    notes = []
    out.free_up_to = free_up_to(frame)
    if out.free_up_to is None:
        notes.append("The profile has no 1-token point: the cost of verifying one token, "
                     "which 'free' is measured against, is unknown.")
    else:
        out.base_ms = float(frame[frame["tokens"] == 1]["ms"].iloc[0])
        n = out.free_up_to
        if n >= int(frame["tokens"].max()):
            notes.append(f"Verifying up to {n} tokens, every size measured, costs about as much "
                         f"as one on this hardware ({out.base_ms:.3g} ms, within "
                         f"{FREE_TOLERANCE:.0%}).")
        else:
            out.extra_ms_per_token = marginal_ms(frame, n)
            extra = (f"; beyond that each extra token costs ~{out.extra_ms_per_token:.3g} ms"
                     if out.extra_ms_per_token is not None else "")
            if n == 1:
                nxt = frame[frame["tokens"] > 1].iloc[0]
                notes.append(f"Verifying is not free on this hardware: already "
                             f"{int(nxt['tokens'])} tokens cost {nxt['ms'] / out.base_ms:.2f}x "
                             f"one ({out.base_ms:.3g} ms){extra}.")
            else:
                notes.append(f"Verifying up to {n} tokens costs about as much as one on this "
                             f"hardware ({out.base_ms:.3g} ms, within "
                             f"{FREE_TOLERANCE:.0%}){extra}.")
    if dropped:
        notes.append(f"{dropped} malformed point{'s' if dropped != 1 else ''} left out.")
    if study is not None and objective is not None:
        best, _ = best_speculative(study, objective)
        verified = _finite(_metrics(best).get("mean_verified_tokens")) if best is not None else None
        if best is not None and verified is not None:
            out.verified, out.verified_number = verified, best.number
            where = ""
            if out.free_up_to is not None:
                where = (" (inside the free range)" if verified <= out.free_up_to
                         else " (past the free range)")
            notes.append(f"The best speculative config, #{best.number}, verifies {verified:.3g} "
                         f"tokens per pass on average{where}.")
    out.note = " ".join(notes) or None
    return out


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
    tree: TreePanel
    time_split: TimeSplit
    hardware: Hardware
    leviathan: Leviathan
    pareto: Pareto
    top: TopTrials


def collect(study: optuna.Study, run: dict[str, Any] | None = None,
            best_doc: dict[str, Any] | None = None, profile: Any = None,
            profile_problem: str | None = None) -> ReportData:
    """Every panel's data for `study` (run / best_doc: the run folder's JSON documents;
    profile: its parsed hardware_profile.json, None when absent, with `profile_problem`
    saying why it could not be read)."""
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
        tree=tree_panel(study, objective),
        time_split=time_split(study, objective),
        hardware=hardware(profile, study, objective, profile_problem),
        leviathan=leviathan(study, objective),
        pareto=pareto(study, objective),
        top=top_trials(study, objective),
    )
