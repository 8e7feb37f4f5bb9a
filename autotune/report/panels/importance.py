"""Parameter importance: the share of the objective's variance each knob explains
(Optuna's fANOVA evaluator), over all methods and within each method."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from autotune.schema.methods import find_method
from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.style import (
    SMALL_FIG_HEIGHT,
    esc,
    figure,
    layout,
    method_color,
    note,
    section,
)
from autotune.report.trials import (
    INDEXED,
    complete_trials,
    derived_values,
    drafts,
    leaf,
    trial_method,
)
from autotune.space.entries import ParamValue

MIN_IMPORTANCE_TRIALS = 5      # fANOVA on fewer trials is noise
_ALL_METHODS = "all methods"
_NEUTRAL_COLOR = "#555"        # the all-methods scope's bars

Row = tuple[dict[str, ParamValue], dict[str, BaseDistribution], float]    # params, distributions, value


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


def _group(scope: str, rows: list[Row], direction: str) -> ImportanceGroup:
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


def data(study: optuna.Study, objective: ObjectiveInfo) -> Importance:
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
    trials = [t for t in complete_trials(study) if drafts(trial_method(t)) and t.params]
    per_method: dict[str, list[Row]] = {}
    joint = []
    for t in trials:
        params: dict[str, ParamValue] = {}
        dists: dict[str, BaseDistribution] = {}
        for name, dist in t.distributions.items():
            if INDEXED.match(name):
                continue
            params[leaf(name)], dists[leaf(name)] = t.params[name], dist
        # A derived count's "distribution" is the single observed point; merging a
        # scope's points gives the observed range, which is what fANOVA should span.
        for name, value in derived_values(t).items():
            params[name], dists[name] = value, IntDistribution(value, value)
        joint.append((params, dists, t.values[0]))
        per_method.setdefault(trial_method(t), []).append((params, dists, t.values[0]))
    direction = objective.directions[0]
    groups = []
    if len(per_method) > 1:
        groups.append(_group(_ALL_METHODS, joint, direction))
    for method in sorted(per_method):
        groups.append(_group(method, per_method[method], direction))
    text = None
    if not trials:
        text = "No speculative trial with searched knobs has completed."
    elif not any(not g.frame.empty for g in groups):
        text = "Too few trials per scope to estimate importance."
    if objective.multi and trials:
        text = (text + " " if text else "") + f"Importance of the first objective, {objective.metrics[0]}."
    return Importance(groups, objective.metrics[0], text)


def render(imp: Importance) -> str:
    how = ("Share of the objective's variance each knob explains (fANOVA), within all methods "
           "and within each method; per-layer bits are summarised by the number of layers skipped.")
    cells = []
    for i, group in enumerate(imp.groups):
        head = f"{group.scope} ({group.n_trials} trials)"
        if group.frame.empty:
            cells.append(f'<div class="cell"><h3>{esc(head)}</h3>{note(group.note)}</div>')
            continue
        frame = group.frame.iloc[::-1]      # largest on top of a horizontal bar chart
        color = method_color(group.scope) if find_method(group.scope) is not None else _NEUTRAL_COLOR
        fig = go.Figure(go.Bar(x=frame["importance"], y=frame["param"], orientation="h",
                               marker_color=color,
                               hovertemplate="%{y}: %{x:.2f}<extra></extra>"))
        layout(fig, f"importance for {imp.metric} (share, fANOVA)", "", SMALL_FIG_HEIGHT,
               title=head, legend=False)
        fig.update_xaxes(range=[0, 1])
        cells.append(f'<div class="cell">{figure(fig, f"fig-importance-{i}")}{note(group.note)}</div>')
    body = note(imp.note)
    if any(not g.frame.empty for g in imp.groups):
        body += f'<div class="grid">{"".join(cells)}</div>'
    elif not imp.note:
        body += note("Too few trials to estimate importance.")
    return section("importance", "Parameter importance", how, body)


PANEL = Panel("importance", lambda i: data(i.study, i.objective), render)
