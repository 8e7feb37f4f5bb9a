"""Draft trees in the search spaces: the `tree` space, the tree branches of `joint`, the
`switch` knob and `as:` includes they use, and the waste rule (no models)."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import optuna
import pytest

from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.schema.methods import get_method
from autotune.schema.shape import DraftShape
from autotune.search.samplers import make_sampler
from autotune.space import InfeasibleConfig, load_space

optuna.logging.set_verbosity(optuna.logging.ERROR)
SAMPLERS = ["tpe", "random", "gp", "cmaes", "qmc", "bayes_opt"]


def write(tmp_path: Path, text: str, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def run_sampler(bound, sampler: str, n: int, seed: int = 0):
    """n trials through the search's own sampler wrapper; infeasible points are told
    pruned (with the user attr the guard reads), feasible ones a made-up value."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(sampler=make_sampler(sampler, seed, 1, bound.grid))
        out = []
        for _ in range(n):
            trial = study.ask()
            try:
                config = bound.suggest(trial)
            except InfeasibleConfig as exc:
                assert str(exc) and "\n" not in str(exc)
                trial.set_user_attr("infeasible", str(exc))
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                out.append((trial.params, exc))
                continue
            study.tell(trial, float(DraftShape.of(config).tree_nodes + config.k))
            out.append((trial.params, config))
    return out


def check_valid(config: DecodeConfig, n_layers: int, draft_layers: int | None) -> None:
    over_draft = config.method == "sorted_exit" and draft_layers is not None
    config.validate(draft_layers if over_draft else n_layers)
    assert DraftShape.of(config).waste() is None
    if config.is_tree:
        assert get_method(config.method).can_tree
        assert config.exit_policy == "fixed"              # never a policy on a tree
        assert config.k == DecodeConfig().k


# ------------------------------------------------------------------ the tree space

def test_tree_space_offers_the_tree_methods_and_drops_draft_model_without_draft():
    space = load_space("tree")
    assert space.description and Path(space.path).name == "tree.yaml"
    with_draft = {r["param"]: r for r in space.bind(30, 10).knobs()}
    assert with_draft["method"]["choices"] == ["draft_model", "layer_skip", "sorted_exit"]
    assert space.bind(30).knobs()[0]["choices"] == ["layer_skip", "sorted_exit"]
    assert (with_draft["tree_width"]["low"], with_draft["tree_width"]["high"]) == (1, 10)
    assert (with_draft["tree_depth"]["low"], with_draft["tree_depth"]["high"]) == (1, 8)
    tokens = with_draft["tree_tokens"]
    assert (tokens["low"], tokens["high"], tokens["step"]) == (0, 64, 4)
    assert tokens["when"] == ("tree_width in [2, 3, 4, 5, 6, 7, 8, 9, 10] and "
                              "tree_depth in [2, 3, 4, 5, 6, 7, 8]")
    # no exit-policy knob anywhere, and no k: a tree's shape is its own knobs
    assert not {r["key"] for r in with_draft.values()} & {
        "exit_policy", "k", "gamma", "target_acceptance", "epsilon", "beta1", "beta2"}
    assert with_draft["layer_skip.attn_skip[5]"]["when"] == "method == layer_skip"
    assert with_draft["sorted_exit.exits[6]"]["when"] == "method == sorted_exit"


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("n_layers, draft_layers", [(12, 4), (4, None)])
def test_tree_space_gives_valid_trees_under_every_sampler(sampler, n_layers, draft_layers):
    bound = load_space("tree").bind(n_layers, draft_layers)
    points = run_sampler(bound, sampler, 24)
    configs = [c for _, c in points if isinstance(c, DecodeConfig)]
    assert len(configs) >= 6, [str(c) for _, c in points]
    for config in configs:
        assert config.is_tree and not config.tree_choices
        check_valid(config, n_layers, draft_layers)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_joint_gives_chains_and_trees_under_every_sampler(sampler):
    bound = load_space("joint").bind(30, 10)
    points = run_sampler(bound, sampler, 40, seed=3)
    shapes = set()
    for params, config in points:
        tree = params.get("draft_shape") == "tree"
        assert any(p.startswith("tree.") for p in params) == tree
        if not isinstance(config, DecodeConfig):
            continue
        check_valid(config, 30, 10)
        assert config.is_tree == tree
        if params["method"] == "ngram":
            assert "draft_shape" not in params and not config.is_tree
        shapes.add("tree" if tree else "chain")
    assert shapes == {"chain", "tree"}


def test_joint_tree_branches_mirror_the_chain_branches():
    rows = {r["param"]: r for r in load_space("joint").bind(30, 10).knobs()}
    assert rows["draft_shape"]["type"] == "switch"
    assert rows["draft_shape"]["choices"] == ["chain", "tree"]
    assert rows["draft_shape"]["when"] == ("method in [draft_model, layer_skip, sorted_exit, "
                                           "eagle, medusa]")
    assert rows["tree.tree_width"]["when"] == "draft_shape == tree"
    for method in ("layer_skip", "sorted_exit"):
        chain = {p.split(".", 1)[1]: r for p, r in rows.items() if p.startswith(f"{method}.")}
        tree = {p.split(".", 1)[1]: r for p, r in rows.items() if p.startswith(f"{method}_tree.")}
        # the tree branch has the drafter's own knobs, same ranges, and nothing else
        assert set(tree) == {name for name, r in chain.items()
                             if r["key"] in ("attn_skip", "mlp_skip", "exits", "thresholds")}
        for name, row in tree.items():
            assert {k: v for k, v in row.items() if k not in ("param", "when")} == \
                {k: v for k, v in chain[name].items() if k not in ("param", "when")}
            assert row["when"].startswith(f"method == {method} and draft_shape == tree")


# ------------------------------------------------------------------ encode / params_to_config

TREE_CONFIGS = [
    ("tree", 10, {"method": "draft_model", "tree_width": 4, "tree_depth": 5, "tree_tokens": 32}),
    ("tree", None, {"method": "layer_skip", "tree_width": 1, "tree_depth": 6,
                    "attn_skip": [15, 17], "mlp_skip": [3]}),
    ("tree", None, {"method": "sorted_exit", "tree_width": 3, "tree_depth": 2,
                    "tree_tokens": 8, "exits": [6, 18], "thresholds": [0.7, 0.0]}),
    ("joint", 10, {"method": "draft_model", "tree_width": 8, "tree_depth": 6,
                   "tree_tokens": 60, "exit_policy": "fixed"}),
    ("joint", None, {"method": "layer_skip", "tree_width": 2, "tree_depth": 3,
                     "tree_tokens": 8, "mlp_skip": [3, 9]}),
    ("joint", 10, {"method": "sorted_exit", "tree_width": 2, "tree_depth": 2,
                   "exits": [2, 10], "thresholds": [0.5, 0.0]}),
    ("joint", None, {"method": "layer_skip", "k": 8, "exit_policy": "adaptive", "gamma": 0.8,
                     "attn_skip": [15, 17]}),                    # a chain still is one
]


@pytest.mark.parametrize("name, draft, values", TREE_CONFIGS)
def test_tree_configs_round_trip(name, draft, values):
    bound = load_space(name).bind(30, draft)
    params = bound.encode(values)
    assert params is not None
    expected = config_from_mapping(values)
    assert bound.params_to_config(params) == expected
    if name == "joint":
        assert params["draft_shape"] == ("tree" if expected.is_tree else "chain")
    # and through a real study: an enqueued known config is what the trial suggests
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(params)
    assert bound.suggest(study.ask()) == expected
    # a finished config (every key given, as best.json holds it) encodes the same way
    assert bound.encode(expected.to_dict()) == params


@pytest.mark.parametrize("name, draft, values", [
    ("joint", None, {"method": "layer_skip", "tree_width": 2, "tree_depth": 3,
                     "exit_policy": "adaptive"}),                  # a policy on a tree
    ("joint", None, {"method": "ngram", "tree_width": 2, "tree_depth": 3}),   # not a drafter
    ("tree", None, {"method": "layer_skip", "k": 8, "tree_width": 2, "tree_depth": 3}),
    ("tree", None, {"method": "layer_skip", "tree_width": 1, "tree_depth": 3,
                    "tree_tokens": 2}),                           # no tokens knob at width 1
    ("tree", None, {"method": "layer_skip", "tree_width": 4, "tree_depth": 1,
                    "tree_tokens": 2}),                           # nor at depth 1
    ("tree", None, {"method": "layer_skip", "tree_choices": [[0], [1]]}),   # static trees
    ("tree", 10, {"method": "draft_model", "k": 20, "exit_policy": "confidence"}),  # a chain
])
def test_inexpressible_tree_configs_encode_to_none(name, draft, values):
    assert load_space(name).bind(30, draft).encode(values) is None


def test_the_waste_rule_rejects_duplicates_and_dominated_trees():
    bound = load_space("tree").bind(30, 10)
    base = {"method": "draft_model", "tree_width": 2, "tree_depth": 6}    # pool 2 + 5*4 = 22
    for tokens, message in ((24, "tree_tokens=24 keeps all 22 nodes a width-2 depth-6 tree "
                                 "drafts: the same tree as tree_tokens=0"),
                            (4, "tree_tokens=4 < tree_depth=6: the rerank keeps no node below "
                                "level 4, so levels 5..6 are drafted for nothing")):
        params = bound.encode({**base, "tree_tokens": tokens})
        with pytest.raises(InfeasibleConfig) as info:
            bound.params_to_config(params)
        assert str(info.value) == message
    assert bound.params_to_config(bound.encode({**base, "tree_tokens": 20})).tree_tokens == 20
    assert DraftShape.of(config_from_mapping({**base, "tree_tokens": 0})).waste() is None
    assert DraftShape.of(config_from_mapping({"method": "draft_model",
                                              "tree_choices": [[0], [0, 0]]})).waste() is None


# ------------------------------------------------------------------ grid

def test_grid_sampler_on_the_tree_space():
    bound = load_space("tree").bind(4, 2)
    grid = bound.grid()
    assert grid["tree_width"] == [1, 2, 4, 8] and grid["tree_depth"] == [2, 4, 6]
    assert grid["tree_tokens"] == [0, 8, 16, 32, 60]
    points = run_sampler(bound, "grid", 30)
    configs = [c for _, c in points if isinstance(c, DecodeConfig)]
    assert configs
    for config in configs:
        check_valid(config, 4, 2)
        assert config.tree_width in (1, 2, 4, 8) and config.tree_depth in (2, 4, 6)


# ------------------------------------------------------------------ the space-file features

def test_switch_knob_and_as_include(tmp_path):
    write(tmp_path, """
        fixed: {method: layer_skip}
        knobs:
          k: {type: int, low: 2, high: 3}
    """, "part.yaml")
    path = write(tmp_path, """
        knobs:
          method: {type: categorical, choices: [layer_skip, draft_model]}
          shape: {type: switch, choices: [chain, tree], when: {method: layer_skip}}
          k: {type: int, low: 1, high: 5, when: {shape: tree}}
        include:
          - {space: part.yaml, as: first, when: {shape: chain}}
    """)
    bound = load_space(str(path)).bind(4, 2)
    rows = {r["param"]: r for r in bound.knobs()}
    assert list(rows) == ["method", "shape", "k", "first.k"]
    assert rows["shape"]["key"] == "shape" and rows["first.k"]["when"] == "shape == chain"
    assert bound.params_to_config({"method": "layer_skip", "shape": "chain", "first.k": 3}).k == 3
    assert bound.params_to_config({"method": "layer_skip", "shape": "tree", "k": 5}).k == 5
    assert bound.params_to_config({"method": "draft_model"}).method == "draft_model"
    # encode: first the choice listed first, then the next one
    assert bound.encode({"method": "layer_skip", "k": 2}) == {
        "method": "layer_skip", "shape": "chain", "first.k": 2}
    assert bound.encode({"method": "layer_skip", "k": 5}) == {
        "method": "layer_skip", "shape": "chain", "first.k": 5}     # out of range: kept
    assert bound.encode({"method": "draft_model", "k": 5}) is None


@pytest.mark.parametrize("text, message", [
    ("knobs:\n  k: {type: switch, choices: [a, b]}\n",
     "space.yaml:2: knobs.k.type: a switch sets no config key, so it cannot be named after "
     "the config key 'k'"),
    ("knobs:\n  shape: {type: switch}\n", "space.yaml:2: knobs.shape: a switch needs `choices:`"),
    ("knobs:\n  shape: {type: switch, choices: [a, 1]}\n",
     "knobs.shape.choices[1]: 1 is not a label"),
    ("knobs:\n  shape: {type: switch, choices: [a, a]}\n", "duplicate choice 'a'"),
    ("knobs:\n  shape: {type: switch, choices: [a], low: 1}\n",
     "knobs.shape.low: unknown key for a switch knob"),
    ("knobs:\n  shape: {type: switch, choices: [a]}\n  k: {type: int, low: 1, high: 2, "
     "when: {shape: b}}\n", "'b' is never a value of 'shape' (choices: a)"),
    ("fixed: {shape: a}\n", "unknown config key 'shape'"),
    ("knobs:\n  method: {type: categorical, choices: [ngram]}\ninclude:\n"
     "  - {space: ngram, as: x}\n", "space.yaml:4: include[0].as: names a conditional branch"),
    ("knobs:\n  method: {type: categorical, choices: [ngram]}\ninclude:\n"
     "  - {space: ngram, as: a.b, when: {method: ngram}}\n", "'a.b' is not a branch name"),
    ("knobs:\n  method: {type: categorical, choices: [ngram]}\ninclude:\n"
     "  - {space: ngram, when: {method: ngram}}\n  - {space: ngram, when: {method: ngram}}\n",
     "(name one with `as:`)"),
    ("fixed: {method: draft_model, tree_choices: [[0, 0]]}\n",
     "fixed.tree_choices: tree_choices path [0, 0] has no parent path [0]"),
    ("fixed: {method: draft_model}\nknobs:\n  tree_tokens: {type: int, low: -1, high: 4}\n",
     "knobs.tree_tokens.low: low -1: tree_tokens=-1 must be >= 0"),
    ("fixed: {method: draft_model}\nknobs:\n  tree_width: {type: int, low: 1, high: 8}\n"
     "  tree_tokens: {type: int, low: 0, high: 8, when: {tree_width: [2, 9]}}\n",
     "knobs.tree_tokens.when.tree_width: 9 is never a value of 'tree_width' (range 1..8)"),
])
def test_bad_tree_space_input_is_one_line(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(AutotuneError) as info:
        load_space(str(path)).bind(4, 2)
    assert "\n" not in str(info.value)
    assert message in str(info.value)


def test_tree_knob_ranges_accept_what_validate_accepts(tmp_path):
    path = write(tmp_path, """
        fixed: {method: draft_model, tree_choices: [[0], [0, 0], [1]]}
    """)
    config = load_space(str(path)).bind(4, 2).params_to_config({})
    assert config.tree_choices == ((0,), (0, 0), (1,))
    path = write(tmp_path, """
        fixed: {method: sorted_exit, exits: [2]}
        knobs:
          tree_width: {type: int, low: 0, high: 10}
          tree_depth: {type: int, low: 1, high: 6, when: {tree_width: [1, 2, 10]}}
    """, "other.yaml")
    bound = load_space(str(path)).bind(4, 2)
    assert not bound.params_to_config({"tree_width": 0}).is_tree
    wide = bound.params_to_config({"tree_width": 10, "tree_depth": 2})
    assert DraftShape.of(wide).pool_size == 110
    with pytest.raises(InfeasibleConfig, match="tree_width=3 needs tree_depth >= 1"):
        bound.params_to_config({"tree_width": 3})


# ------------------------------------------------------------------ autotune validate

def test_validate_accepts_tree_spaces_and_configs_and_reports_tree_errors(tmp_path, capsys):
    folder = Path(load_space("tree").path).parent
    good = write(tmp_path, "method: layer_skip\ntree_width: 4\ntree_depth: 3\n"
                           "tree_tokens: 16\n", "good.yaml")
    assert main(["validate", str(folder / "tree.yaml"), str(folder / "joint.yaml"),
                 str(good)]) == 0
    out = capsys.readouterr().out
    assert "tree.yaml: valid search space" in out and "tree_width" in out
    assert "joint.yaml: valid search space" in out and "draft_shape" in out
    bad = write(tmp_path, "method: ngram\ntree_width: 2\ntree_depth: 2\n", "bad.yaml")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"{bad}: method=ngram cannot draft a tree: a tree ranks children by "
                      "the draft's probabilities, which only draft_model, layer_skip, "
                      "sorted_exit, eagle, medusa give")
    assert err[1] == f"{bad}: invalid config (1 problem)"
