"""What the panels read off a trial: its config, metrics, method, label and draft shape,
the knob counts derived from them, which trials rank best in the search (`autotune.records.ranking`)
and which config the run recommends (`autotune.records.answer.answer`, the rule `best.json`
follows, so the report and the run folder never disagree).

Conventions shared by every panel:
- only COMPLETE trials carry objective values worth plotting (a pruned trial's value is
  its last intermediate report, not a measurement);
- the objective's first metric ranks trials (for two metrics: the Pareto front first);
- a trial's `label` is `run_folder.describe(config)`, the same text as `trials.csv`;
- a trial's `method` comes from its canonical config (the AR baseline's when it has none);
- everything about a method (its keys, derived counts, label, colour) comes from the
  registry in `autotune.schema.methods`, so a new method needs nothing here.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial
from pydantic import JsonValue

from autotune.common.errors import AutotuneError
from autotune.records.summary import MeasurementSummary
from autotune.schema.config import DecodeConfig, shape_of_mapping
from autotune.schema.label import describe
from autotune.schema.methods import all_methods, find_method
from autotune.schema.shape import DYNAMIC, DraftShape
from autotune.report.objective import ObjectiveInfo
from autotune.records import ranking
from autotune.records.answer import answer
from autotune.records.trial import TrialRecord

# A config without `method` is DecodeConfig's default: the AR baseline.
DEFAULT_METHOD: str = DecodeConfig().method

# Per-layer and per-exit on/off bits (`layer_skip.attn_skip[12]`, `sorted_exit.exits[6]`):
# one knob per layer is unreadable as a panel; derived counts and the heatmap show them.
INDEXED = re.compile(r"^(?P<base>.+)\[(?P<index>\d+)\]$")

# Knobs computed from a draft tree's canonical config (tree trials only; a chain lacks
# them): width and depth of a dynamic tree, and the nodes one verify pass checks.
TREE_KNOBS: tuple[tuple[str, str], ...] = (
    ("tree_width", "tree width"),
    ("tree_depth", "tree depth"),
    ("tree_nodes", "tree nodes verified per round"),
)


# ------------------------------------------------------------------ values
def finite(value: Any) -> float | None:
    """A float, or None for missing / non-numeric / NaN / infinite values (and bools)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def fmt(value: Any) -> str:
    """A config or document value as display text (floats to 4 significant digits)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    return str(value)


def pick(source: Any, keys: Iterable[str]) -> dict[str, str]:
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
        out[key] = fmt(value)
    return out


# ------------------------------------------------------------------ one trial
# A trial's config as stored (`DecodeConfig.to_dict()`): the label, the draft shape and
# the header read it by key, as `trials.csv` does (a plug-in's method not loaded here
# still gets a label).
ConfigJson = dict[str, JsonValue]

# What a trial without figures reads as: every figure None.
NO_METRICS = MeasurementSummary()


def config_of(t: FrozenTrial) -> ConfigJson:
    """The config the trial ran, as stored; empty for a trial never run."""
    return TrialRecord.of(t).config_json or {}


def decoded_config(t: FrozenTrial) -> DecodeConfig | None:
    """The config the trial ran, parsed; None for a trial never run, or one this autotune
    cannot read (a plug-in's method not loaded here): the report draws it without."""
    try:
        return TrialRecord.of(t).config
    except AutotuneError:
        return None


def metrics_of(t: FrozenTrial) -> MeasurementSummary:
    """The figures the trial stored; every figure None for a trial without them."""
    return TrialRecord.of(t).metrics or NO_METRICS


def trial_method(t: FrozenTrial) -> str:
    """The trial's method: from its config, else its `method` param, else the baseline."""
    return TrialRecord.of(t).method


def drafts(method: str) -> bool:
    """Whether `method` speculates: every method but the AR baseline (an unknown name,
    from a plug-in not loaded here, is taken to draft)."""
    spec = find_method(method)
    return spec is None or spec.drafts


def trial_label(t: FrozenTrial) -> str:
    """The short human label of `trials.csv`; trials never run get their method's name."""
    config = config_of(t)
    if config:
        return describe(config)
    method = t.params.get("method")
    return f"{method} (not run)" if method else "(not run)"


def trial_preset(t: FrozenTrial) -> str | None:
    return TrialRecord.of(t).preset


def value_of(t: FrozenTrial, index: int = 0) -> float | None:
    return finite(t.values[index]) if t.values and len(t.values) > index else None


def shape_of(config: ConfigJson, method: str) -> DraftShape | None:
    """The draft shape of a speculative config of `method`; None for the AR baseline, no
    config, or shape keys that do not parse (a hand-edited config)."""
    if not config or not drafts(method):
        return None
    return shape_of_mapping(config)


def derived_titles() -> dict[str, str]:
    """Every derived knob's name and title: the registry's counts, then the tree knobs."""
    titles = {d.name: d.title for spec in all_methods() for d in spec.derived}
    return titles | dict(TREE_KNOBS)


def derived_values(t: FrozenTrial) -> dict[str, int]:
    """Derived knob values of a trial, for the methods that have them: layer / exit
    counts, and a tree's width, depth and verified nodes (trees only)."""
    method = trial_method(t)
    config, spec = config_of(t), find_method(method)
    out = {}
    for derived in spec.derived if spec is not None else ():
        value = config.get(derived.key)
        if isinstance(value, list):
            out[derived.name] = len(value)
    shape = shape_of(config, method)
    if shape is not None and shape.is_tree:
        if shape.kind == DYNAMIC:
            out["tree_width"], out["tree_depth"] = shape.width, shape.depth
        out["tree_nodes"] = shape.nodes
    return out


# ------------------------------------------------------------------ optuna params
def is_bit(name: str, dist: BaseDistribution | None) -> bool:
    """A per-layer / per-exit on-off param (`…attn_skip[12]`, `…exits[6]`): two
    categories 0 and 1, or in a study made before they were, an integer 0..1."""
    if INDEXED.match(name) is None:
        return False
    if isinstance(dist, CategoricalDistribution):
        return tuple(dist.choices) == (0, 1)
    return isinstance(dist, IntDistribution) and dist.low == 0 and dist.high == 1


def leaf(name: str) -> str:
    """`layer_skip.k` -> `k`: the joint space namespaces each branch's knobs by method."""
    return name.rsplit(".", 1)[-1] if not INDEXED.match(name) else name


# ------------------------------------------------------------------ which trials
def complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    """COMPLETE trials with finite objective values, by trial number (what panels plot)."""
    return [t for t in ranking.complete(study)
            if t.values and all(finite(v) is not None for v in t.values)]


def pareto_numbers(study: optuna.Study, objective: ObjectiveInfo) -> set[int]:
    """Trial numbers on the Pareto front (empty for a single objective)."""
    return ranking.pareto_numbers(study, objective)


def ranked(study: optuna.Study, objective: ObjectiveInfo) -> list[FrozenTrial]:
    """Complete trials best first, as `autotune.records.ranking` orders them."""
    return ranking.ranked(study, objective)


def best_trial(study: optuna.Study, objective: ObjectiveInfo) -> FrozenTrial | None:
    """The config the run recommends, the one best.json holds (`validation.answer`): the
    validated winner, the AR baseline's trial when validation said "do not speculate"
    (None when the study has no baseline trial), else the search's best by
    `autotune.records.ranking`. None when no trial has completed."""
    return answer(study, objective).trial


def best_speculative(study: optuna.Study, objective: ObjectiveInfo) -> tuple[FrozenTrial | None, str | None]:
    """The recommended trial when it speculates, else the search's best speculative trial
    with a note saying why (the AR baseline won, or validation said "do not speculate"):
    panels about drafting have nothing to show for the baseline itself."""
    chosen = answer(study, objective)
    if chosen.trial is not None and drafts(trial_method(chosen.trial)):
        return chosen.trial, None
    order = ranked(study, objective)
    if not order:
        return None, None
    why = ("Validation says do not speculate" if not chosen.speculate
           else "The best config is the AR baseline")
    for t in order:
        if drafts(trial_method(t)):
            return t, f"{why}; showing the best speculative trial #{t.number} instead."
    return None, "No speculative trial completed."


# ------------------------------------------------------------------ the response metric
def response_metric(trials: list[FrozenTrial], objective: ObjectiveInfo) -> tuple[str, str]:
    """(`speedup`, title) when any trial measured it, else the first objective metric:
    the y of the knob panels."""
    if any(finite(metrics_of(t).speedup) is not None for t in trials):
        return "speedup", "speedup (× AR)"
    return objective.metrics[0], f"{objective.axis_title(0)} (objective; no speedup measured)"


def response(t: FrozenTrial, metric: str, objective: ObjectiveInfo) -> float | None:
    if metric in objective.metrics:
        return value_of(t, objective.metrics.index(metric))
    return finite(metrics_of(t).figure(metric))


# ------------------------------------------------------------------ knob order
# Tree knobs read best as width, depth, nodes (then any searched tree_tokens).
_TREE_ORDER = {name: f"tree_{i}" for i, (name, _) in enumerate(TREE_KNOBS)}


def knob_order(names: Iterable[str]) -> list[str]:
    """`method` first, then by namespace in order of appearance, then by name."""
    names = list(dict.fromkeys(names))
    spaces: dict[str, int] = {}
    for name in names:
        spaces.setdefault(name.rsplit(".", 1)[0] if "." in name else "", len(spaces))

    def key(n: str) -> tuple[bool, int, str]:
        space, _, leaf_name = n.rpartition(".")
        return n != "method", spaces[space], _TREE_ORDER.get(leaf_name, leaf_name)
    return sorted(names, key=key)
