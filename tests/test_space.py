"""Search spaces: YAML loading and its errors, binding, suggest / encode / grid (no models)."""

from __future__ import annotations

import dataclasses
import hashlib
import textwrap
import warnings
from pathlib import Path

import optuna
import pytest

from autotune.common.errors import AutotuneError
from autotune.schema.config import KNOBS, DecodeConfig, config_from_mapping
from autotune.schema.methods import get_method
from autotune.space import (
    BoundSpace,
    InfeasibleConfig,
    SearchSpace,
    available_spaces,
    load_space,
)
from autotune.space import loading as space_loading

optuna.logging.set_verbosity(optuna.logging.WARNING)

SHIPPED = ["draft_model", "engine_hf", "engine_llama_server", "engine_sglang", "engine_trtllm",
           "engine_vllm", "joint", "layer_skip", "ngram", "sa", "sorted_exit", "suffix", "tree"]
POLICY_KNOBS = {"gamma", "target_acceptance", "epsilon", "beta1", "beta2"}


def write(tmp_path: Path, text: str, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def random_points(bound: BoundSpace, n: int, seed: int = 0):
    """(params, DecodeConfig or the InfeasibleConfig) for n RandomSampler trials."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(n):
        trial = study.ask()
        try:
            result: DecodeConfig | InfeasibleConfig = bound.suggest(trial)
        except InfeasibleConfig as exc:
            result = exc
        yield trial.params, result


def canonical(config: DecodeConfig) -> DecodeConfig:
    """Thresholds as the decoder reads them (one per exit, the deepest's ignored -> 0.0),
    for the methods that read them."""
    if config.method not in KNOBS["thresholds"].methods:
        return config
    padded = config.exit_thresholds()
    return dataclasses.replace(config, thresholds=padded[:-1] + (0.0,) * bool(padded))


# ------------------------------------------------------------------ shipped spaces

# The spaces of trained heads (train-draft): they bind only with such a --draft.
TRAINED = ["eagle", "medusa"]
# Suffix decoding joins the spaces where arctic-inference is installed (CI requires it).
SUFFIX = ["suffix"] if get_method("suffix").available() else []


def test_available_spaces_lists_shipped_files_but_not_fragments():
    assert available_spaces() == sorted(SHIPPED + TRAINED)
    assert load_space("_policy").name == "_policy"          # fragments load by name


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("n_layers, draft_layers", [(30, None), (30, 10), (4, None), (4, 2)])
def test_shipped_spaces_load_and_bind(name, n_layers, draft_layers):
    space = load_space(name)
    assert isinstance(space, SearchSpace) and space.name == name and space.description
    assert Path(space.path).name == f"{name}.yaml" and len(space.sha256) == 64
    if name == "draft_model" and draft_layers is None:
        with pytest.raises(AutotuneError, match="needs a draft model: pass --draft"):
            space.bind(n_layers, draft_layers)
        return
    bound = space.bind(n_layers, draft_layers)
    assert bound.n_layers == n_layers and bound.space is space
    rows = bound.knobs()
    assert rows and len({r["param"] for r in rows}) == len(rows)
    assert all(set(r) >= {"param", "key", "type", "low", "high", "choices", "when"} for r in rows)


def test_each_shipped_file_starts_with_a_comment_on_its_sources():
    folder = Path(load_space("ngram").path).parent
    for path in folder.glob("*.yaml"):
        assert path.read_text(encoding="utf-8").startswith("# "), path.name


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("n_layers, draft_layers", [(30, 10), (30, None), (4, None)])
def test_random_trials_give_valid_configs_or_infeasible(name, n_layers, draft_layers):
    if name == "draft_model" and draft_layers is None:
        pytest.skip("needs a draft")
    bound = load_space(name).bind(n_layers, draft_layers)
    feasible = 0
    for _, result in random_points(bound, 50):
        if isinstance(result, InfeasibleConfig):
            assert str(result) and "\n" not in str(result)
            continue
        feasible += 1
        over_draft = result.method == "sorted_exit" and draft_layers is not None
        result.validate(draft_layers if over_draft else n_layers)
        if name not in ("joint", "tree") and not name.startswith("engine_"):
            assert result.method == name
        assert result.temperature == 0.0 and result.top_p == 1.0   # workload's, untouched
    # the search gives up after 20 infeasible points in a row: shipped spaces must be
    # mostly feasible even for a random sampler
    assert feasible >= 15


def test_draft_model_choice_dropped_without_draft():
    assert load_space("joint").bind(30).knobs()[0]["choices"] == [
        "ngram", *SUFFIX, "layer_skip", "sorted_exit"]
    assert load_space("joint").bind(30, 10).knobs()[0]["choices"] == [
        "ngram", *SUFFIX, "draft_model", "layer_skip", "sorted_exit"]


@pytest.mark.parametrize("kind", TRAINED)
def test_a_trained_head_brings_its_own_method_and_no_other_draft(kind):
    """--draft DIR of a trained head: its method joins; draft_model (which needs a draft
    model) stays out, and so does sorted_exit (with --draft it would run over the
    drafter's stack: a trained drafter serves its own method only)."""
    assert load_space("joint").bind(30, None, kind).knobs()[0]["choices"] == [
        "ngram", *SUFFIX, "layer_skip", kind]
    other = "medusa" if kind == "eagle" else "eagle"
    with pytest.raises(AutotuneError, match=f"no method that runs with a trained {other}"):
        load_space(kind).bind(30, None, other)
    with pytest.raises(AutotuneError, match="needs a draft model: pass --draft"):
        load_space(kind).bind(30)
    bound = load_space(kind).bind(30, None, kind)
    feasible = 0
    for _, result in random_points(bound, 40):
        if isinstance(result, InfeasibleConfig):
            continue
        feasible += 1
        assert result.method == kind
    assert feasible >= 15


def test_sha256_covers_the_file_and_its_includes_in_order():
    space = load_space("layer_skip")
    folder = Path(space.path).parent
    expected = hashlib.sha256((folder / "layer_skip.yaml").read_bytes()
                              + (folder / "_policy.yaml").read_bytes()).hexdigest()
    assert space.sha256 == expected


def test_unknown_space_name_and_missing_file(tmp_path):
    with pytest.raises(AutotuneError, match=r"did you mean 'layer_skip'\?.*available: draft_model, eagle, engine_hf"):
        load_space("layer_skp")
    with pytest.raises(AutotuneError, match="not found.*shipped spaces: draft_model"):
        load_space(str(tmp_path / "nope.yaml"))


# ------------------------------------------------------------------ conditions

def test_policy_knobs_only_when_their_policy_is_chosen():
    bound = load_space("draft_model").bind(30, 10)
    seen = set()
    for params, config in random_points(bound, 60):
        policy = params["exit_policy"]
        seen.add(policy)
        assert ("gamma" in params) == (policy in ("confidence", "adaptive"))
        adaptive = {"target_acceptance", "epsilon", "beta1", "beta2"}
        assert (adaptive <= set(params)) == (policy == "adaptive")
        assert not (adaptive & set(params)) or policy == "adaptive"
        assert config.exit_policy == policy
        if "gamma" in params:
            assert config.gamma == params["gamma"]
        else:
            assert config.gamma == DecodeConfig().gamma
    assert seen == {"fixed", "confidence", "adaptive", "heuristic"}


def test_joint_suggests_only_the_chosen_methods_params():
    bound = load_space("joint").bind(30, 10)
    methods = set()
    for params, result in random_points(bound, 80, seed=1):
        method = params["method"]
        methods.add(method)
        # a drafter's tree branch: the draft_shape switch, the shared tree shape and
        # the drafter's own knobs under `<method>_tree.`
        others = [p for p in params if p not in ("method", "draft_shape")
                  and not p.startswith(("tree.", f"{method}_tree."))]
        shape = params.get("draft_shape", "chain")
        assert (others or shape == "tree") and all(
            p.startswith(f"{method}.") for p in others), (method, others)
        if isinstance(result, DecodeConfig):
            assert result.method == method
            if method == "ngram":
                assert result.k == params["ngram.k"] and result.ngram_min == params["ngram.ngram_min"]
    assert methods == {"ngram", *SUFFIX, "draft_model", "layer_skip", "sorted_exit"}


def test_joint_params_are_namespaced_and_conditions_chain():
    rows = {r["param"]: r for r in load_space("joint").bind(30).knobs()}
    assert rows["layer_skip.k"]["high"] == 12 and rows["ngram.k"]["high"] == 10
    assert rows["layer_skip.attn_skip[5]"]["key"] == "attn_skip"
    assert "layer_skip.attn_skip[0]" not in rows                  # never_skip: [0]
    assert rows["layer_skip.gamma"]["when"] == (
        "method == layer_skip and draft_shape == chain and "
        "layer_skip.exit_policy in [confidence, adaptive]")
    assert rows["sorted_exit.thresholds[6]"]["when"].startswith("method == sorted_exit")
    assert not any(p.startswith("draft_model.") for p in rows)     # no draft: branch unreachable


def test_condition_on_fixed_key_and_on_int_range(tmp_path):
    path = write(tmp_path, """
        fixed: {method: ngram}
        knobs:
          k: {type: int, low: 1, high: 6}
          exit_policy: {type: categorical, choices: [fixed, heuristic], when: {method: ngram, k: [4, 5, 6]}}
    """)
    bound = load_space(str(path)).bind(4)
    assert bound.params_to_config({"k": 2}).exit_policy == "fixed"
    assert bound.params_to_config({"k": 5, "exit_policy": "heuristic"}).exit_policy == "heuristic"


# ------------------------------------------------------------------ includes

def test_include_local_keys_win(tmp_path):
    path = write(tmp_path, """
        include: [draft_model]
        fixed:
          exit_policy: heuristic      # replaces the included exit_policy knob
        knobs:
          k: {type: int, low: 2, high: 3}
    """)
    rows = load_space(str(path)).bind(30, 10).knobs()
    assert [r["param"] for r in rows] == ["k"]
    assert (rows[0]["low"], rows[0]["high"]) == (2, 3)
    config = load_space(str(path)).bind(30, 10).params_to_config({"k": 3})
    assert (config.method, config.exit_policy, config.k) == ("draft_model", "heuristic", 3)

    # a local knob replaces an included fixed value
    path = write(tmp_path, """
        include: [ngram]
        knobs:
          method: {type: categorical, choices: [ngram, none]}
    """, "other.yaml")
    bound = load_space(str(path)).bind(4)
    assert bound.knobs()[0]["choices"] == ["ngram", "none"]
    params = {"method": "none", "k": 1, "ngram_min": 1, "ngram_max": 1, "exit_policy": "fixed"}
    assert bound.params_to_config(params).method == "none"


def test_include_relative_path_and_when_namespacing(tmp_path):
    write(tmp_path, """
        fixed: {method: ngram}
        knobs:
          k: {type: int, low: 1, high: 4}
          ngram_max: {type: int, low: 2, high: 3}
          ngram_min: {type: int, low: 1, high: 2, when: {ngram_max: 3}}
    """, "parts/mine.yaml")
    path = write(tmp_path, """
        knobs:
          method: {type: categorical, choices: [ngram, layer_skip]}
        include:
          - {space: parts/mine.yaml, when: {method: ngram}}
          - {space: layer_skip, when: {method: layer_skip}}
    """)
    bound = load_space(str(path)).bind(4)
    params = [r["param"] for r in bound.knobs()]
    assert params[:4] == ["method", "mine.k", "mine.ngram_max", "mine.ngram_min"]
    assert "layer_skip.attn_skip[3]" in params and "layer_skip.k" in params
    config = bound.params_to_config({"method": "ngram", "mine.k": 3, "mine.ngram_max": 2})
    assert (config.method, config.k, config.ngram_max, config.ngram_min) == ("ngram", 3, 2, 1)
    config = bound.params_to_config({"method": "ngram", "mine.k": 3, "mine.ngram_max": 3,
                                     "mine.ngram_min": 2})
    assert config.ngram_min == 2


def test_include_cycle_names_the_chain(tmp_path):
    write(tmp_path, "include: [b.yaml]\nknobs: {}\n", "a.yaml")
    write(tmp_path, "description: b\ninclude:\n  - a.yaml\n", "b.yaml")
    with pytest.raises(AutotuneError) as info:
        load_space(str(tmp_path / "a.yaml"))
    message = str(info.value)
    assert "b.yaml:3: include[0]: include cycle: a.yaml -> b.yaml -> a.yaml" in message


# ------------------------------------------------------------------ layers, exits, thresholds

def bits(prefix: str, candidates, chosen) -> dict[str, int]:
    return {f"{prefix}[{c}]": int(c in chosen) for c in candidates}


def test_layer_sets_honour_never_skip_negatives_and_max(tmp_path):
    path = write(tmp_path, """
        fixed: {method: layer_skip}
        knobs:
          attn_skip: {type: layers, candidates: [-1, -2, 3, 5], never_skip: [-1], max_skipped: 2}
          mlp_skip: {type: layers, candidates: {from: 10, to: -5, step: 5}, min_skipped: 1}
    """)
    bound = load_space(str(path)).bind(30)
    assert [r["param"] for r in bound.knobs()] == [
        "attn_skip[3]", "attn_skip[5]", "attn_skip[28]", "mlp_skip[10]", "mlp_skip[15]",
        "mlp_skip[20]"]
    params = {**bits("attn_skip", (3, 5, 28), {3, 28}), **bits("mlp_skip", (10, 15, 20), {15})}
    config = bound.params_to_config(params)
    assert (config.attn_skip, config.mlp_skip) == ((3, 28), (15,))
    with pytest.raises(InfeasibleConfig, match="attn_skip has 3 skipped layers; the space allows 0..2"):
        bound.params_to_config({**params, **bits("attn_skip", (3, 5, 28), {3, 5, 28})})
    with pytest.raises(InfeasibleConfig, match="mlp_skip has 0 skipped layers; the space allows 1..3"):
        bound.params_to_config({**params, **bits("mlp_skip", (10, 15, 20), ())})
    # the same file on a 4-layer model: the listed layer 5 does not exist
    with pytest.raises(AutotuneError, match=r"space.yaml:3: knobs.attn_skip: layer 5 is outside 0..3"):
        load_space(str(path)).bind(4)


def test_max_skipped_fraction_floors_on_the_model_depth():
    bound = load_space("layer_skip").bind(30)            # 0.6 * 30 = 18 of layers 1..29
    base = load_space("layer_skip").bind(30).encode({"method": "layer_skip"})
    assert base is not None and len(base) == 2 * 29 + 2 and base["exit_policy"] == "fixed"
    assert sum(v for p, v in base.items() if "skip[" in p) == 0
    params = {**base, **bits("attn_skip", range(1, 30), set(range(1, 19)))}
    assert len(bound.params_to_config(params).attn_skip) == 18
    with pytest.raises(InfeasibleConfig, match="19 skipped layers; the space allows 0..18"):
        bound.params_to_config({**params, **bits("attn_skip", range(1, 30), set(range(1, 20)))})
    small = load_space("layer_skip").bind(4)              # floor(0.6 * 4) = 2 of layers 1..3
    assert sum(r["key"] == "attn_skip" for r in small.knobs()) == 3
    with pytest.raises(InfeasibleConfig, match="allows 0..2"):
        small.params_to_config({**small.encode({"method": "layer_skip"}),
                                **bits("attn_skip", (1, 2, 3), {1, 2, 3})})


def test_exits_and_thresholds_shape():
    bound = load_space("sorted_exit").bind(30)
    rows = bound.knobs()
    exit_params = [r["param"] for r in rows if r["key"] == "exits"]
    assert exit_params == [f"exits[{d}]" for d in range(2, 31, 4)]
    assert [r["param"] for r in rows if r["key"] == "thresholds"] == [
        f"thresholds[{d}]" for d in range(2, 27, 4)]                      # not the deepest
    params = {**bits("exits", range(2, 31, 4), {6, 10, 18}), "thresholds[6]": 0.3,
              "thresholds[10]": 0.5, "k": 3, "exit_policy": "fixed"}
    config = bound.params_to_config(params)
    assert config.exits == (6, 10, 18) and config.thresholds == (0.3, 0.5, 0.0)
    with pytest.raises(InfeasibleConfig, match="exits has 4 exits; the space allows 1..3"):
        bound.params_to_config({**params, "exits[22]": 1, "thresholds[18]": 0.2})
    with pytest.raises(InfeasibleConfig, match="exits has 0 exits"):
        bound.params_to_config({**params, **bits("exits", range(2, 31, 4), ())})
    # over a 10-layer draft, exits resolve against the draft and validate against it
    over_draft = load_space("sorted_exit").bind(30, 10)
    assert [r["param"] for r in over_draft.knobs() if r["key"] == "exits"] == [
        "exits[2]", "exits[6]", "exits[10]"]
    config = over_draft.params_to_config({**bits("exits", (2, 6, 10), {10}), "k": 2,
                                          "exit_policy": "fixed"})
    assert config.exits == (10,) and config.thresholds == (0.0,)


def test_exit_range_reaches_the_full_stack(tmp_path):
    # `to` is exclusive and defaults past the deepest depth, so the full stack can exit
    path = write(tmp_path, """
        fixed: {method: sorted_exit}
        knobs:
          exits: {type: exits, candidates: {from: 2, step: 2}}
    """)
    rows = load_space(str(path)).bind(30, 10).knobs()
    assert [r["param"] for r in rows] == ["exits[2]", "exits[4]", "exits[6]", "exits[8]", "exits[10]"]


def test_exit_candidates_count_negatives_from_the_end(tmp_path):
    path = write(tmp_path, """
        fixed: {method: sorted_exit}
        knobs:
          exits: {type: exits, candidates: [-1, 2]}
    """)
    assert [r["param"] for r in load_space(str(path)).bind(30).knobs()] == ["exits[2]", "exits[29]"]


# ------------------------------------------------------------------ encode

@pytest.mark.parametrize("name, draft, values", [
    ("ngram", None, {"method": "ngram", "k": 5, "ngram_min": 5, "ngram_max": 5}),
    ("ngram", None, {"k": 50, "ngram_min": 2}),                      # out of range: kept
    ("layer_skip", None, {"method": "layer_skip", "k": 8, "exit_policy": "adaptive",
                          "gamma": 0.8, "attn_skip": [15, 17]}),
    ("layer_skip", None, {"k": 30, "mlp_skip": [1, 2], "ngram_min": 1, "temperature": 0.7}),
    ("joint", None, {"method": "layer_skip", "k": 8, "exit_policy": "adaptive",
                     "gamma": 0.8, "attn_skip": [15, 17]}),
    ("joint", None, {"method": "ngram", "k": 5, "ngram_min": 5, "ngram_max": 5}),
    ("joint", 10, {"method": "draft_model", "k": 4, "exit_policy": "confidence", "gamma": 0.4}),
    ("joint", None, {"method": "sorted_exit", "exits": [6, 18], "thresholds": [0.7, 0.9]}),
    ("sorted_exit", 10, {"exits": [2, 10], "thresholds": [0.6], "k": 0}),
    ("engine_llama_server", None, {"method": "llama_draft", "exits": [7], "k": 3,
                                   "llama_draft_n_min": 0, "llama_draft_p_min": 0.0,
                                   "engine": "llama_server"}),
])
def test_encode_round_trips(name, draft, values):
    if name.startswith("engine_"):
        values = {k: v for k, v in values.items() if k != "engine"}
    bound = load_space(name).bind(30, draft)
    params = bound.encode(values)
    assert params is not None
    fixed_method = {} if name == "joint" or name.startswith("engine_") else {"method": name}
    expected = canonical(config_from_mapping({**fixed_method, **values, "temperature": 0.0}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                          # Optuna: out of range
        try:
            config = bound.params_to_config(params)
        except InfeasibleConfig:
            assert values.get("k") == 0                          # encoded as given
            return
        assert config == expected
        # and through a real study: enqueued values are what the trial suggests
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        study.enqueue_trial(params)
        assert bound.suggest(study.ask()) == expected


def test_encode_fills_missing_keys_with_defaults_and_only_active_params():
    bound = load_space("draft_model").bind(30, 10)
    assert bound.encode({"k": 6}) == {"k": 6, "exit_policy": "fixed"}
    params = bound.encode({"exit_policy": "adaptive"})
    assert params == {"k": 4, "exit_policy": "adaptive", "gamma": 0.6, "target_acceptance": 0.85,
                      "epsilon": 0.01, "beta1": 0.5, "beta2": 0.9}


@pytest.mark.parametrize("name, draft, values", [
    ("joint", None, {"method": "draft_model", "k": 4}),             # no draft: not a choice
    ("joint", None, {"k": 4}),                                      # method 'none' not offered
    ("ngram", None, {"exit_policy": "confidence"}),                 # not among choices
    ("layer_skip", None, {"attn_skip": [0, 3]}),                    # never_skip layer
    ("layer_skip", None, {"attn_skip": [31]}),                      # not a layer
    ("layer_skip", None, {"method": "ngram"}),                      # against a fixed value
    ("layer_skip", None, {"ngram_min": 2}),                         # no knob, not the default
    ("joint", None, {"method": "ngram", "attn_skip": [3]}),         # knob of another branch
    ("sorted_exit", None, {"exits": [3]}),                          # not a candidate depth
])
def test_encode_returns_none_for_inexpressible_values(name, draft, values):
    assert load_space(name).bind(30, draft).encode(values) is None


# ------------------------------------------------------------------ grid

def test_grid_sizes_and_sampler():
    grid = load_space("ngram").bind(30).grid()
    assert grid == {"k": list(range(1, 11)), "ngram_max": [1, 2, 3, 4, 5],
                    "ngram_min": [1, 2, 3, 4, 5], "exit_policy": ["fixed", "heuristic"]}
    grid = load_space("draft_model").bind(30, 10).grid()
    assert len(grid) == 7 and grid["gamma"] == [0.2, 0.4, 0.6, 0.8]
    small = load_space("layer_skip").bind(4).grid()
    assert sum(len(v) == 2 and v == [0, 1] for v in small.values()) == 6   # layers 1..3 twice
    bound = load_space("ngram").bind(30)
    study = optuna.create_study(sampler=optuna.samplers.GridSampler(bound.grid(), seed=0))
    configs = []
    for _ in range(5):
        trial = study.ask()
        try:
            configs.append(bound.suggest(trial))
        except InfeasibleConfig:
            pass
        study.tell(trial, 0.0)
    assert configs and all(c.method == "ngram" for c in configs)


def test_grid_errors(tmp_path, monkeypatch):
    with pytest.raises(AutotuneError, match=r"grid points on 30 layers, more than the grid sampler's 100,000"):
        load_space("layer_skip").bind(30).grid()
    path = write(tmp_path, """
        fixed: {method: draft_model}
        knobs:
          k: {type: int, low: 1, high: 4, grid: [1, 4]}
          gamma: {type: float, low: 0.1, high: 0.9}
    """)
    with pytest.raises(AutotuneError, match=r"space.yaml:4: knobs.gamma: float knob 'gamma' needs a `grid:` list"):
        load_space(str(path)).bind(30, 4).grid()
    # bool knobs (no DecodeConfig field is a bool today): grid [False, True]
    monkeypatch.setitem(space_loading._KNOB_TYPES, "k", ("bool",))
    path = write(tmp_path, "knobs:\n  k: {type: bool}\n", "bool.yaml")
    assert load_space(str(path)).bind(4).grid() == {"k": [False, True]}


# ------------------------------------------------------------------ bad input: one line, file:line: key

BAD = {
    "unknown top key": ("""
        description: x
        knob:
          k: {type: int, low: 1, high: 3}
        """, 2, "knob", "did you mean 'knobs'?"),
    "unknown knob": ("""
        knobs:
          k: {type: int, low: 1, high: 3}
          gama: {type: float, low: 0.1, high: 0.9}
        """, 3, "knobs.gama", "unknown knob 'gama'; did you mean 'gamma'?"),
    "unknown spec key": ("""
        knobs:
          k:
            type: int
            low: 1
            hgh: 3
        """, 5, "knobs.k.hgh", "unknown key for an int knob; did you mean 'high'?"),
    "bad type": ("""
        knobs:
          k:
            type: integer
        """, 3, "knobs.k.type", "did you mean 'int'?"),
    "missing required key": ("""
        knobs:
          k:
            type: int
            low: 1
        """, 2, "knobs.k", "missing key 'high'"),
    "wrong value type": ("""
        knobs:
          k:
            type: int
            low: one
            high: 3
        """, 4, "knobs.k.low", "'one' is not an integer"),
    "low above high": ("""
        knobs:
          k:
            type: int
            high: 2
            low: 5
        """, 5, "knobs.k.low", "low 5 is above high 2"),
    "log with low <= 0": ("""
        knobs:
          beta1:
            type: float
            low: 0.0
            high: 0.5
            log: true
        """, 4, "knobs.beta1.low", "log-scale range needs low > 0"),
    "bound DecodeConfig rejects": ("""
        knobs:
          gamma:
            type: float
            low: 0.1
            high: 1.5
        """, 5, "knobs.gamma.high", "gamma=1.5 must lie in [0, 1]"),
    "k below 1": ("""
        knobs:
          k: {type: int, low: 0, high: 3}
        """, 2, "knobs.k.low", "k=0 must be at least 1"),
    "empty choices": ("""
        knobs:
          exit_policy:
            type: categorical
            choices: []
        """, 4, "knobs.exit_policy.choices", "must be a non-empty list"),
    "choice not a method": ("""
        knobs:
          method:
            type: categorical
            choices:
              - ngram
              - hydra
        """, 6, "knobs.method.choices[1]", "method='hydra' is not one of"),
    "when on unknown knob": ("""
        knobs:
          exit_policy: {type: categorical, choices: [fixed, adaptive]}
          gamma:
            type: float
            low: 0.1
            high: 0.9
            when:
              exit_polcy: adaptive
        """, 8, "knobs.gamma.when.exit_polcy", "did you mean 'exit_policy'?"),
    "when value not possible": ("""
        knobs:
          exit_policy: {type: categorical, choices: [fixed, adaptive]}
          gamma:
            type: float
            low: 0.1
            high: 0.9
            when:
              exit_policy: [fixed, adaptiv]
        """, 8, "knobs.gamma.when.exit_policy", "'adaptiv' is never a value of 'exit_policy'"),
    "when int out of range": ("""
        knobs:
          k: {type: int, low: 1, high: 4}
          exit_policy: {type: categorical, choices: [fixed], when: {k: 9}}
        """, 3, "knobs.exit_policy.when.k", "9 is never a value of 'k' (range 1..4)"),
    "when on a layers knob": ("""
        knobs:
          attn_skip: {type: layers}
          k: {type: int, low: 1, high: 4, when: {attn_skip: 3}}
        """, 3, "knobs.k.when.attn_skip", "cannot condition on a layers knob"),
    "condition cycle": ("""
        knobs:
          exit_policy:
            type: categorical
            choices: [fixed, confidence]
            when: {k: 2}
          k:
            type: int
            low: 1
            high: 4
            when: {exit_policy: fixed}
        """, 5, "knobs.exit_policy.when", "condition cycle: exit_policy -> k -> exit_policy"),
    "include cycle": ("""
        description: includes itself
        include:
          - space.yaml
        """, 3, "include[0]", "include cycle: space.yaml -> space.yaml"),
    "missing include": ("""
        include:
          - ngram
          - {space: nope.yaml, when: {method: ngram}}
        """, 3, "include[1]", "search space file not found"),
    "unknown include name": ("""
        include: [layer_skp]
        """, 1, "include[0]", "unknown search space 'layer_skp'; did you mean 'layer_skip'?"),
    "YAML syntax error": ("""
        description: x
        knobs:
          k: type: int
        """, 3, "YAML syntax error", "mapping values are not allowed here"),
    "duplicate key": ("""
        knobs:
          k: {type: int, low: 1, high: 3}
          k: {type: int, low: 1, high: 4}
        """, 3, "knobs.k", "duplicate key"),
    "temperature as a knob": ("""
        knobs:
          temperature: {type: float, low: 0.0, high: 1.0}
        """, 2, "knobs.temperature", "belongs to the workload, not the space"),
    "top_p fixed": ("""
        fixed:
          top_p: 0.9
        """, 2, "fixed.top_p", "belongs to the workload, not the space"),
    "fixed value rejected": ("""
        fixed:
          method: ngram
          k: 0
        """, 3, "fixed.k", "k=0 must be at least 1"),
    "layers type on k": ("""
        knobs:
          k: {type: layers}
        """, 2, "knobs.k.type", "knob 'k' cannot be a layers knob; it takes int or categorical"),
    "both fixed and knob": ("""
        fixed: {k: 3}
        knobs:
          k: {type: int, low: 1, high: 3}
        """, 3, "knobs.k", "is also under fixed"),
    "max_skipped not a fraction": ("""
        knobs:
          attn_skip:
            type: layers
            max_skipped: 1.5
        """, 4, "knobs.attn_skip.max_skipped", "fraction of the layers in (0, 1)"),
    "bad candidates range": ("""
        knobs:
          exits:
            type: exits
            candidates: {from: 2, stp: 2}
        """, 4, "knobs.exits.candidates.stp", "did you mean 'step'?"),
    "log with step": ("""
        knobs:
          k:
            type: int
            low: 1
            high: 8
            log: true
            step: 2
        """, 7, "knobs.k.step", "log-scale range cannot have a step"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_with_file_line_and_key(tmp_path, case):
    text, line, key, fragment = BAD[case]
    path = write(tmp_path, text)
    with pytest.raises(AutotuneError) as info:
        load_space(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: "), message
    assert key in message and fragment in message, message


def test_paths_in_messages_are_relative_to_the_cwd(tmp_path, monkeypatch):
    # as shipped files read `autotune/space/presets/<name>.yaml:LINE:` from the repository root
    write(tmp_path, "knobs:\n  gama: {type: float, low: 0.1, high: 0.9}\n", "sub/s.yaml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AutotuneError, match=r"^sub/s.yaml:2: knobs.gama: unknown knob"):
        load_space("sub/s.yaml")


def test_one_exit_is_one_categorical_choice():
    """An exits knob with exactly one exit (llama_draft's depth, transformers' early exit)
    is one categorical param over the depths, not a 0/1 bit per depth that would draw
    exactly one set bit in few trials."""
    hf_names = [row["param"] for row in load_space("engine_hf").bind(30).knobs()]
    assert "sorted_exit.exits" in hf_names and not any("exits[" in n for n in hf_names)
    bound = load_space("engine_llama_server").bind(30)
    names = [row["param"] for row in bound.knobs()]
    assert "llama_draft.exits" in names and not any("exits[" in n for n in names)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = []
    for _ in range(30):
        try:
            config = bound.suggest(study.ask())
        except InfeasibleConfig as exc:                     # never from the depth
            assert "exits" not in str(exc)
            continue
        if config.method == "llama_draft":
            drawn.append(config.exits)
    assert drawn and all(len(e) == 1 and 1 <= e[0] <= 30 for e in drawn)
    preset = get_method("llama_draft").presets(30)[0].values
    assert bound.encode(preset) is not None                  # the preset's depth is in it
    row = next(r for r in bound.knobs() if r["param"] == "llama_draft.exits")
    assert row["choices"] == list(range(1, 31))
    hf = load_space("engine_hf").bind(30)
    assert hf.grid()["sorted_exit.exits"] == [2, 6, 10, 14, 18, 22, 26, 30]
