"""The report's panel data on hand-built studies with known answers (no model, no timing)."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.distributions import (
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from autotune.report import collect
from autotune.report import panels as P
from autotune.report.documents import RunFacts, best_record
from autotune.report.objective import ObjectiveInfo, objective_info

optuna.logging.set_verbosity(optuna.logging.WARNING)

METHODS = CategoricalDistribution(("ngram", "layer_skip", "sorted_exit"))
BIT = CategoricalDistribution((0, 1))
LATENCY = ObjectiveInfo("latency", ("latency_ms_per_token",), ("minimize",))


def config(method: str = "none", **knobs: Any) -> dict[str, Any]:
    base = {"method": method, "k": 4, "attn_skip": [], "mlp_skip": [], "exits": [],
            "thresholds": [], "exit_policy": "fixed", "gamma": 0.6, "target_acceptance": 0.85,
            "epsilon": 0.01, "beta1": 0.5, "beta2": 0.9, "ngram_min": 1, "ngram_max": 3,
            "temperature": 0.0, "top_p": 1.0}
    return {**base, **knobs}


def add(study: optuna.Study, value: float | list[float] | None, cfg: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None, params: dict[str, Any] | None = None,
        dists: dict[str, Any] | None = None, preset: str | None = None,
        state: TrialState = TrialState.COMPLETE, **attrs: Any) -> None:
    """Add one finished trial the way `autotune search` records it."""
    user_attrs: dict[str, Any] = dict(attrs)
    if cfg is not None:
        user_attrs["config"] = cfg
    if metrics is not None:
        user_attrs["metrics"] = metrics
    if preset:
        user_attrs["preset"] = preset
    kwargs: dict[str, Any] = {}
    if state == TrialState.COMPLETE:
        kwargs["values" if isinstance(value, list) else "value"] = value
    study.add_trial(optuna.trial.create_trial(
        state=state, params=params or {}, distributions=dists or {}, user_attrs=user_attrs, **kwargs))


def ngram(study: optuna.Study, value: float, k: int, policy: str = "fixed", **metrics: Any) -> None:
    add(study, value, config("ngram", k=k, exit_policy=policy),
        {"latency_ms_per_token": value, "speedup": 20.0 / value, **metrics},
        params={"method": "ngram", "ngram.k": k, "ngram.exit_policy": policy},
        dists={"method": METHODS, "ngram.k": IntDistribution(1, 32),
               "ngram.exit_policy": CategoricalDistribution(("fixed", "heuristic"))})


def layer_skip(study: optuna.Study, value: float, attn: list[int], mlp: list[int], k: int = 4,
               n_layers: int = 6, **metrics: Any) -> None:
    params: dict[str, Any] = {"method": "layer_skip", "layer_skip.k": k}
    dists: dict[str, Any] = {"method": METHODS, "layer_skip.k": IntDistribution(1, 12)}
    for layer in range(1, n_layers):
        params[f"layer_skip.attn_skip[{layer}]"] = int(layer in attn)
        params[f"layer_skip.mlp_skip[{layer}]"] = int(layer in mlp)
        dists[f"layer_skip.attn_skip[{layer}]"] = dists[f"layer_skip.mlp_skip[{layer}]"] = BIT
    add(study, value, config("layer_skip", k=k, attn_skip=attn, mlp_skip=mlp),
        {"latency_ms_per_token": value, "speedup": 20.0 / value, **metrics}, params=params, dists=dists)


def baseline(study: optuna.Study, value: float = 20.0) -> None:
    add(study, value, config(), {"latency_ms_per_token": value, "speedup": 1.0,
                                 "baseline_latency_ms_per_token": value}, preset="baseline")


def new_study(directions: list[str] | None = None) -> optuna.Study:
    return optuna.create_study(directions=directions or ["minimize"])


# ------------------------------------------------------------------ history
def test_history_best_so_far_minimize_and_other_trials_apart() -> None:
    study = new_study()
    for value in (5.0, 3.0, 4.0):
        ngram(study, value, k=2)
    add(study, None, None, params={"method": "ngram"}, dists={"method": METHODS},
        state=TrialState.PRUNED, infeasible="ngram_min=5, ngram_max=1")
    ngram(study, 2.0, k=3)
    add(study, None, config("ngram"), state=TrialState.FAIL, error="out of memory: boom")
    ngram(study, 6.0, k=1)
    h = P.history.data(study, LATENCY)
    assert h.frame["number"].tolist() == [0, 1, 2, 4, 6]
    assert h.frame["best_so_far"].tolist() == [5.0, 3.0, 3.0, 2.0, 2.0]
    assert h.frame["is_best"].tolist() == [False, False, False, True, False]
    assert h.other["number"].tolist() == [3, 5]
    assert h.other["reason"].tolist() == ["ngram_min=5, ngram_max=1", "out of memory: boom"]
    assert h.note is None


def test_history_best_so_far_maximize() -> None:
    study = new_study(["maximize"])
    for value in (1.0, 1.5, 1.2, 1.7):
        ngram(study, value, k=2)
    h = P.history.data(study, ObjectiveInfo("speedup", ("speedup",), ("maximize",)))
    assert h.frame["best_so_far"].tolist() == [1.0, 1.5, 1.5, 1.7]


# ------------------------------------------------------------------ layer heatmap
def test_layer_heatmap_fractions_of_three_known_masks() -> None:
    study = new_study()
    layer_skip(study, 10.0, attn=[1, 2], mlp=[5])
    layer_skip(study, 11.0, attn=[2, 3], mlp=[])
    layer_skip(study, 12.0, attn=[2], mlp=[5])
    ngram(study, 5.0, k=2)     # other methods are not counted
    heat = P.layers.data(study, LATENCY, n_layers=6, top_fraction=1.0)
    assert heat.n_top == 3 and heat.n_candidates == 3 and heat.best_number == 0
    frame = heat.frame.set_index("layer")
    assert frame["attn_fraction"].tolist() == pytest.approx([0, 1 / 3, 1, 1 / 3, 0, 0])
    assert frame["mlp_fraction"].tolist() == pytest.approx([0, 0, 0, 0, 0, 2 / 3])
    assert frame["best_attn"].tolist() == [0, 1, 1, 0, 0, 0]
    assert frame["best_mlp"].tolist() == [0, 0, 0, 0, 0, 1]


def test_layer_heatmap_takes_the_top_tenth_at_least_one() -> None:
    study = new_study()
    for i in range(30):               # the best three skip layer 1's attention only
        layer_skip(study, 10.0 + i, attn=[1] if i < 3 else [4], mlp=[])
    heat = P.layers.data(study, LATENCY, n_layers=None)
    assert heat.n_top == 3
    assert heat.frame["attn_fraction"].tolist() == [0.0, 1.0]     # max index + 1 layers
    study = new_study()
    layer_skip(study, 10.0, attn=[3], mlp=[])
    assert P.layers.data(study, LATENCY, n_layers=4).n_top == 1


def test_layer_heatmap_without_layer_skip_trials_is_a_note() -> None:
    study = new_study()
    ngram(study, 5.0, k=2)
    heat = P.layers.data(study, LATENCY, n_layers=6)
    assert heat.frame.empty and "layer_skip" in heat.note


def test_n_layers_from_run_then_best_then_indices() -> None:
    study = new_study()
    layer_skip(study, 10.0, attn=[2], mlp=[], n_layers=8)
    best = best_record({"model": {"n_layers": 12}})
    assert P.layers.n_layers_of(RunFacts(n_layers=30), best, study) == 30
    assert P.layers.n_layers_of(RunFacts(), best, study) == 12
    assert P.layers.n_layers_of(RunFacts(), best_record(None), study) == 8   # bit params up to [7]
    assert P.layers.n_layers_of(None, None, new_study()) is None


def test_panels_about_drafting_use_the_best_speculative_trial_when_ar_wins() -> None:
    study = new_study()
    baseline(study, 10.0)
    ngram(study, 12.0, k=2, pos_acc=[0.9, 0.5])
    acc = P.pos_acc.data(study, LATENCY)
    assert acc.frame["number"].unique().tolist() == [1]
    assert "AR baseline" in acc.note


# ------------------------------------------------------------------ Pareto
def test_pareto_front_of_two_objectives() -> None:
    study = new_study(["minimize", "minimize"])
    info = ObjectiveInfo("latency_memory", ("latency_ms_per_token", "peak_memory_mb"),
                           ("minimize", "minimize"))
    for lat, mem in ((10.0, 500.0), (12.0, 400.0), (13.0, 450.0), (9.0, 600.0), (11.0, 550.0)):
        add(study, [lat, mem], config("ngram"), {"latency_ms_per_token": lat, "peak_memory_mb": mem})
    p = P.pareto.data(study, info)
    assert p.x_metric == "latency_ms_per_token" and p.y_metric == "peak_memory_mb"
    assert p.frame.set_index("number")["on_front"].to_dict() == {0: True, 1: True, 2: False,
                                                                  3: True, 4: False}
    assert p.frame[p.frame["is_best"]]["number"].tolist() == [3]     # front's best latency
    top = P.top.data(study, info)
    assert top.frame["number"].tolist()[:3] == [3, 0, 1] and top.frame["pareto"].tolist()[:3] == [True] * 3


def test_pareto_single_objective_is_a_note() -> None:
    study = new_study()
    ngram(study, 10.0, k=2)
    p = P.pareto.data(study, LATENCY)
    assert p.frame.empty and "Single-objective" in p.note


# ------------------------------------------------------------------ missing metrics
def test_missing_metrics_give_notes_not_errors() -> None:
    study = new_study()
    baseline(study)
    ngram(study, 10.0, k=2)          # an old run: no pos_acc, no split, no α / c
    assert "no draft / verify / other split" in P.time_split.data(study, LATENCY).note
    assert "position-wise" in P.pos_acc.data(study, LATENCY).note.lower()
    assert P.predicted.data(study, LATENCY).note            # measured only: no predictions


def test_time_split_rows_of_best_and_baseline() -> None:
    study = new_study()
    ngram(study, 10.0, k=2, draft_ms_per_token=1.0, verify_ms_per_token=7.0, other_ms_per_token=2.0,
          baseline_verify_ms_per_token=18.0, baseline_other_ms_per_token=2.0)
    split = P.time_split.data(study, LATENCY)
    totals = split.frame.groupby("config")["ms_per_token"].sum().to_dict()
    assert totals == {"best #0": 10.0, "AR baseline": 20.0} and split.note is None


def test_pos_acc_of_best_and_completed_presets() -> None:
    study = new_study()
    baseline(study)
    ngram(study, 10.0, k=2, pos_acc=[0.9, 0.8])
    add(study, 15.0, config("ngram", k=5), {"speedup": 1.3, "pos_acc": [0.7, 0.6, 0.5]},
        preset="vllm_ngram")
    add(study, None, config("draft_model"), state=TrialState.FAIL, preset="hf_assisted")
    acc = P.pos_acc.data(study, LATENCY)
    assert acc.frame.groupby("role").size().to_dict() == {"best": 2, "vllm_ngram": 3}
    assert acc.frame["position"].tolist() == [1, 2, 1, 2, 3]
    assert acc.note is None


def test_zero_complete_trials_give_notes_everywhere() -> None:
    study = new_study()
    add(study, None, None, params={"method": "ngram"}, dists={"method": METHODS},
        state=TrialState.PRUNED, infeasible="bad")
    report = collect(study, {"study": "s", "objective": "latency"}, None)
    assert report.header.best_trial is None and report.header.note
    assert report.history.frame.empty and len(report.history.other) == 1
    for panel in (report.finalists, report.knobs, report.parallel, report.importance,
                  report.layers, report.tree, report.pos_acc, report.time_split,
                  report.hardware, report.predicted, report.pareto, report.top):
        assert panel.note, type(panel).__name__


# ------------------------------------------------------------------ knobs
def test_knobs_skip_bits_add_derived_counts_and_flag_categoricals() -> None:
    study = new_study()
    baseline(study)
    ngram(study, 10.0, k=2, policy="heuristic")
    ngram(study, 11.0, k=3)
    layer_skip(study, 15.0, attn=[1, 2], mlp=[3])
    k = P.knobs.data(study, LATENCY)
    names = [knob.name for knob in k.knobs]
    assert not any("[" in name for name in names)
    assert names[0] == "method"
    assert {"ngram.k", "ngram.exit_policy", "layer_skip.k", "layer_skip.n_attn_skipped",
            "layer_skip.n_mlp_skipped"} <= set(names)
    by_name = {knob.name: knob for knob in k.knobs}
    assert by_name["method"].categorical and by_name["ngram.exit_policy"].categorical
    assert not by_name["ngram.k"].categorical and by_name["ngram.k"].integer
    assert by_name["method"].frame["x"].tolist() == ["none", "ngram", "ngram", "layer_skip"]
    assert by_name["layer_skip.n_attn_skipped"].frame["x"].tolist() == [2]
    assert by_name["ngram.k"].frame["y"].tolist() == pytest.approx([2.0, 20 / 11])
    assert k.y_metric == "speedup" and "× AR" in k.y_title


def test_knobs_fall_back_to_the_objective_without_speedup() -> None:
    study = new_study(["maximize"])
    info = ObjectiveInfo("agreement", ("agreement",), ("maximize",))
    for k, value in ((2, 0.5), (4, 0.7)):
        add(study, value, config("ngram", k=k), {"agreement": value}, params={"ngram.k": k},
            dists={"ngram.k": IntDistribution(1, 10)})
    knobs = P.knobs.data(study, info)
    assert knobs.y_metric == "agreement" and "no speedup" in knobs.y_title
    assert knobs.knobs[0].frame["y"].tolist() == [0.5, 0.7]


# ------------------------------------------------------------------ parallel coordinates
def test_encode_dimension_categorical_and_missing() -> None:
    dim = P.parallel.encode_dimension("policy", ["fixed", None, "heuristic", "fixed"], True,
                             choices=("heuristic", "fixed", "adaptive"))
    assert dim.values == [1.0, -1.0, 0.0, 1.0]
    assert dim.ticktext == ["n/a", "heuristic", "fixed"] and dim.tickvals == [-1.0, 0.0, 1.0]
    num = P.parallel.encode_dimension("k", [2, 4, None], False)
    assert num.values[:2] == [2.0, 4.0] and num.values[2] < 2.0
    assert num.ticktext[0] == "n/a" and num.tickvals[1:] == [2.0, 4.0]


def test_parallel_merges_namespaced_knobs_by_leaf_name() -> None:
    study = new_study()
    ngram(study, 10.0, k=2)
    ngram(study, 11.0, k=3)
    layer_skip(study, 15.0, attn=[1, 2], mlp=[], k=5)
    p = P.parallel.data(study, LATENCY)
    labels = [d.label for d in p.dimensions]
    assert labels[0] == "method" and "k" in labels and labels[-1].startswith("latency_ms_per_token")
    k = p.dimensions[labels.index("k")]
    assert k.values == [2.0, 3.0, 5.0]          # ngram.k and layer_skip.k on one axis
    assert p.color == [10.0, 11.0, 15.0] and p.reverse_scale


# ------------------------------------------------------------------ importance
def test_importance_per_method_with_derived_counts() -> None:
    study = new_study()
    baseline(study)
    for i in range(8):
        ngram(study, 10.0 + i, k=1 + i % 4, policy="heuristic" if i % 2 else "fixed")
    for i in range(6):
        layer_skip(study, 12.0 + 3 * i, attn=list(range(1, 1 + i)), mlp=[], k=2 + i % 2)
    layer_skip_only = [t for t in study.trials if t.user_attrs["config"]["method"] == "layer_skip"]
    assert len(layer_skip_only) == 6
    imp = P.importance.data(study, LATENCY)
    scopes = {g.scope: g for g in imp.groups}
    assert set(scopes) == {"all methods", "ngram", "layer_skip"}
    assert scopes["all methods"].n_trials == 14                     # baseline excluded
    assert set(scopes["all methods"].frame["param"]) == {"method", "k"}
    ls = scopes["layer_skip"].frame
    assert "n_attn_skipped" in set(ls["param"]) and not any("[" in p for p in ls["param"])
    assert "n_mlp_skipped" not in set(ls["param"])                  # constant: no information
    for group in imp.groups:
        assert group.frame["importance"].sum() == pytest.approx(1.0)
    # The latency grows with the number of attention layers skipped, k barely matters.
    assert ls.iloc[0]["param"] == "n_attn_skipped"


def test_importance_with_too_few_trials_is_a_note() -> None:
    study = new_study()
    for i in range(3):
        ngram(study, 10.0 + i, k=1 + i)
    imp = P.importance.data(study, LATENCY)
    assert [g.scope for g in imp.groups] == ["ngram"]
    assert imp.groups[0].frame.empty and "at least" in imp.groups[0].note
    assert imp.note


def test_importance_names_conditional_knobs_it_left_out() -> None:
    study = new_study()
    dists = {"ngram.k": IntDistribution(1, 10), "ngram.gamma": FloatDistribution(0.0, 1.0)}
    for i in range(6):
        params: dict[str, Any] = {"ngram.k": 1 + i}
        if i % 2:
            params["ngram.gamma"] = 0.1 * i
        add(study, 10.0 + i, config("ngram", k=1 + i), {"speedup": 1.0},
            params=params, dists={k: dists[k] for k in params})
    group = P.importance.data(study, LATENCY).groups[0]
    assert group.frame["param"].tolist() == ["k"] and "gamma" in group.note


# ------------------------------------------------------------------ header and top trials
def test_header_shows_the_params_of_the_best_method_and_tolerates_missing_keys() -> None:
    study = new_study()
    baseline(study)
    add(study, 10.0, config("layer_skip", k=3, attn_skip=[1], exit_policy="confidence", gamma=0.7),
        {"latency_ms_per_token": 10.0, "speedup": 2.0, "baseline_latency_ms_per_token": 20.5})
    head = P.header.data(study, LATENCY, RunFacts(), None)
    assert head.best_trial == 1 and head.speedup == 2.0 and head.baseline_ms_per_token == 20.5
    assert head.best_params == {"method": "layer_skip", "k": 3, "attn_skip": [1], "mlp_skip": [],
                                "exit_policy": "confidence", "gamma": 0.7}
    assert head.model == {} and head.counts == {"complete": 2}
    best_doc = {"model": {"id": "m", "n_layers": 30, "sha256": "a" * 64},
                "hardware": {"device": "cuda", "device_name": "H100"},
                "workload": {"source": "builtin", "prompts": 8}}
    head = P.header.data(study, LATENCY, RunFacts.read({"study": "s", "model": "ignored"}),
                         best_record(best_doc))
    assert head.model == {"id": "m", "n_layers": "30", "sha256": "a" * 12}
    assert head.hardware == {"device": "cuda", "device_name": "H100"}
    assert head.workload == {"source": "builtin", "prompts": "8"}


def test_header_baseline_latency_falls_back_to_the_baseline_trial() -> None:
    study = new_study()
    baseline(study, 21.0)
    ngram(study, 10.0, k=2)
    assert P.header.data(study, LATENCY).baseline_ms_per_token == 21.0


def test_top_trials_order_and_columns() -> None:
    study = new_study()
    baseline(study)
    for value in (12.0, 9.0, 15.0):
        ngram(study, value, k=2, mean_accepted_tokens=1.5, acceptance_rate=0.5, lossless=True)
    top = P.top.data(study, LATENCY, n=3)
    assert top.frame["number"].tolist() == [2, 1, 3]
    assert top.frame["rank"].tolist() == [1, 2, 3]
    assert "value.latency_ms_per_token" in top.frame and "latency_ms_per_token" not in top.frame
    assert {"speedup", "mean_accepted_tokens", "acceptance_rate", "lossless"} <= set(top.frame)


def test_objective_info_sources() -> None:
    study = new_study()
    best_doc = {"objective": {"name": "latency", "metrics": ["latency_ms_per_token"]}}
    assert objective_info(study, RunFacts(), best_record(best_doc)).metrics == (
        "latency_ms_per_token",)
    assert objective_info(study, RunFacts(objective="latency"), None).metrics == (
        "latency_ms_per_token",)
    info = objective_info(study, RunFacts(), None)
    assert info.metrics == ("objective",) and info.directions == ("minimize",)
    # A run made before the presets moved (issue 62) names its preset's file under
    # search/, gone from this install: the preset is read by its name instead.
    moved = RunFacts(objective="latency",
                     objective_file="/opt/autotune/search/objective_presets/latency.yaml")
    assert objective_info(study, moved, None).metrics == ("latency_ms_per_token",)


def test_a_layer_bit_is_two_categories_or_in_an_older_study_an_integer_0_to_1():
    from autotune.report.trials import is_bit
    assert is_bit("layer_skip.attn_skip[3]", BIT)
    assert is_bit("layer_skip.attn_skip[3]", IntDistribution(0, 1))       # a study made before
    assert not is_bit("layer_skip.attn_skip[3]", CategoricalDistribution((0, 1, 2)))
    assert not is_bit("layer_skip.attn_skip[3]", IntDistribution(0, 2))
    assert not is_bit("ngram.k", BIT)
