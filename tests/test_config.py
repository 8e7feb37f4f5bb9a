"""DecodeConfig parsing and validation, config files, and the draft-exit policies."""

from __future__ import annotations

import json
import time

import pytest
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.common.errors import AutotuneError
from autotune.schema.config import (
    DecodeConfig,
    config_from_mapping,
    load_config_file,
    parse_assignments,
)
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.decoding.policies import (
    AdaptivePolicy,
    ConfidencePolicy,
    ExitPolicy,
    HeuristicPolicy,
    make_policy,
)


def _from_sets(*items: str, base: DecodeConfig | None = None) -> DecodeConfig:
    return config_from_mapping(parse_assignments(list(items)), base)


# ------------------------------------------------------------------ parse_assignments

def test_parse_assignments():
    assert parse_assignments(["k=4", "attn_skip=12,17", " gamma = 0.5 "]) == {
        "k": "4", "attn_skip": "12,17", "gamma": "0.5"}
    assert parse_assignments(["method=a=b"]) == {"method": "a=b"}   # first '=' splits
    assert parse_assignments(["attn_skip="]) == {"attn_skip": ""}
    assert parse_assignments([]) == {}


@pytest.mark.parametrize("item", ["k", "=4", " =4", ""])
def test_parse_assignments_rejects_malformed(item):
    with pytest.raises(AutotuneError, match="key=value"):
        parse_assignments([item])


# ------------------------------------------------------------------ config_from_mapping

def test_lists_and_scalars_are_coerced():
    c = _from_sets("method=layer_skip", "attn_skip=12,17", "mlp_skip=3", "k=6",
                   "gamma=0.25", "temperature=0.7", "exits=16,8", "thresholds=0.3, 0.5")
    assert c.method == "layer_skip"
    assert c.attn_skip == (12, 17) and c.mlp_skip == (3,)
    assert c.k == 6 and isinstance(c.k, int)
    assert c.gamma == 0.25 and c.temperature == 0.7
    assert c.exits == (16, 8)                     # order kept: validate() judges it
    assert c.thresholds == (0.3, 0.5)


def test_skip_sets_are_sorted_and_deduplicated():
    assert _from_sets("attn_skip=17,12,17, 3").attn_skip == (3, 12, 17)


def test_empty_list():
    base = DecodeConfig(attn_skip=(1, 2))
    assert _from_sets("attn_skip=", base=base).attn_skip == ()
    assert config_from_mapping({"mlp_skip": []}).mlp_skip == ()


def test_file_style_values():
    c = config_from_mapping({"attn_skip": [4, 2], "exits": 8, "k": 3.0, "top_p": 1,
                             "thresholds": [0.5]})
    assert c.attn_skip == (2, 4) and c.exits == (8,) and c.k == 3 and c.top_p == 1.0
    assert c.thresholds == (0.5,)


def test_overlay_keeps_base():
    base = DecodeConfig(method="ngram", k=7, ngram_max=5)
    c = _from_sets("k=2", base=base)
    assert (c.method, c.k, c.ngram_max) == ("ngram", 2, 5)
    assert base.k == 7                            # base untouched


def test_unknown_key_suggests():
    with pytest.raises(AutotuneError, match=r"unknown config key 'atn_skip'.*did you mean 'attn_skip'"):
        _from_sets("atn_skip=1")
    with pytest.raises(AutotuneError, match=r"did you mean 'temperature'"):
        config_from_mapping({"temprature": 0.5})


def test_unknown_key_without_close_match():
    with pytest.raises(AutotuneError) as err:
        _from_sets("zzzzzz=1")
    assert "unknown config key 'zzzzzz'" in str(err.value)
    assert "did you mean" not in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key,value,kind", [
    ("k", "four", "an integer"),
    ("k", "4.5", "an integer"),
    ("k", "", "an integer"),
    ("ngram_min", "1.5", "an integer"),
    ("gamma", "high", "a number"),
    ("temperature", "", "a number"),
    ("attn_skip", "1,x", "a comma-separated list of integers"),
    ("attn_skip", "1.5", "a comma-separated list of integers"),
    ("exits", "8;16", "a comma-separated list of integers"),
    ("thresholds", "0.3,abc", "a comma-separated list of numbers"),
])
def test_bad_values(key, value, kind):
    with pytest.raises(AutotuneError) as err:
        _from_sets(f"{key}={value}")
    message = str(err.value)
    assert message.startswith(f"bad value for {key}:") and kind in message
    assert "\n" not in message


@pytest.mark.parametrize("values", [
    {"k": True}, {"k": 2.5}, {"gamma": False}, {"method": 3}, {"attn_skip": [1.5]},
    {"attn_skip": {"a": 1}}, {"thresholds": None},
])
def test_bad_file_values(values):
    with pytest.raises(AutotuneError, match="bad value for"):
        config_from_mapping(values)


# ------------------------------------------------------------------ validate

@pytest.mark.parametrize("kwargs,n_layers,match", [
    (dict(method="medusae"), None, "method='medusae' is not one of"),
    (dict(exit_policy="greedy"), None, "exit_policy='greedy' is not one of"),
    (dict(k=0), None, "k=0 must be at least 1"),
    (dict(gamma=1.5), None, "gamma=1.5 must lie in"),
    (dict(target_acceptance=-0.1), None, "target_acceptance"),
    (dict(beta2=2.0), None, "beta2"),
    (dict(top_p=0.0), None, "top_p=0"),
    (dict(epsilon=1.5), None, "epsilon"),
    (dict(temperature=-1.0), None, "temperature"),
    (dict(ngram_min=3, ngram_max=2), None, "ngram_min"),
    (dict(ngram_min=0), None, "ngram_min"),
    (dict(method="sorted_exit"), None, "needs exits"),
    (dict(method="sorted_exit", exits=(8, 8)), None, "increasing"),
    (dict(method="sorted_exit", exits=(16, 8)), None, "increasing"),
    (dict(method="sorted_exit", exits=(0, 8)), None, ">= 1"),
    (dict(method="sorted_exit", exits=(4, 8), thresholds=(0.1, 0.2, 0.3)), None,
     "thresholds has 3 values for 2 exits"),
    (dict(method="sorted_exit", exits=(4, 8), thresholds=(1.5,)), None, "thresholds"),
    (dict(method="layer_skip", attn_skip=(3, 30)), 30, r"attn_skip has layer\(s\) \[30\]"),
    (dict(method="layer_skip", mlp_skip=(-1,)), 30, r"mlp_skip has layer\(s\) \[-1\]"),
    (dict(method="sorted_exit", exits=(8, 31)), 30, "exits=.*30 layers"),
])
def test_validate_errors(kwargs, n_layers, match):
    config = DecodeConfig(**kwargs)
    with pytest.raises(AutotuneError, match=match):
        config.validate(n_layers=n_layers)


def test_validate_accepts_good_configs():
    good = [
        DecodeConfig(),
        DecodeConfig(method="layer_skip", attn_skip=(0, 29), mlp_skip=(29,), k=1),
        DecodeConfig(method="sorted_exit", exits=(8, 16, 30), thresholds=(0.5, 0.7)),
        DecodeConfig(method="sorted_exit", exits=(8, 16), thresholds=(0.5, 0.7)),
        DecodeConfig(method="sorted_exit", exits=(30,)),
        DecodeConfig(method="ngram", ngram_min=2, ngram_max=2, exit_policy="heuristic"),
        DecodeConfig(temperature=0.8, top_p=0.9, gamma=0.0, exit_policy="adaptive"),
    ]
    for config in good:
        assert config.validate(n_layers=30) is config
    # out-of-range layers only matter once the model is known
    DecodeConfig(method="layer_skip", attn_skip=(99,)).validate()


def test_exit_thresholds_padding():
    assert DecodeConfig(exits=(4, 8, 12), thresholds=(0.5,)).exit_thresholds() == (0.5, 0.0, 0.0)
    assert DecodeConfig(exits=(4, 8), thresholds=(0.5, 0.9)).exit_thresholds() == (0.5, 0.9)


def test_to_dict_round_trips():
    c = DecodeConfig(method="sorted_exit", exits=(4, 8), thresholds=(0.4,), k=3)
    d = c.to_dict()
    assert d["exits"] == [4, 8] and "extras" not in d
    assert json.loads(json.dumps(d)) == d
    assert config_from_mapping(d) == c


# ------------------------------------------------------------------ config files

def test_load_json(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"method": "layer_skip", "attn_skip": [1, 2], "k": 3}))
    assert config_from_mapping(load_config_file(path)) == DecodeConfig(
        method="layer_skip", attn_skip=(1, 2), k=3)


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_load_yaml(tmp_path, suffix):
    path = tmp_path / f"c{suffix}"
    path.write_text("method: sorted_exit\nexits: [4, 8]\nthresholds: 0.4\ngamma: 0.5\n")
    c = config_from_mapping(load_config_file(str(path)))
    assert (c.method, c.exits, c.thresholds, c.gamma) == ("sorted_exit", (4, 8), (0.4,), 0.5)


def test_params_nesting(tmp_path):
    path = tmp_path / "frozen.json"
    path.write_text(json.dumps({"params": {"method": "ngram", "k": 5},
                                "metrics": {"speedup": 1.4}, "provenance": {}}))
    assert load_config_file(path) == {"method": "ngram", "k": 5}
    yaml_path = tmp_path / "frozen.yaml"
    yaml_path.write_text("params:\n  method: ngram\n  ngram_max: 4\nmetrics: {}\n")
    assert load_config_file(yaml_path) == {"method": "ngram", "ngram_max": 4}


def test_missing_file(tmp_path):
    with pytest.raises(AutotuneError, match="config file not found"):
        load_config_file(tmp_path / "nope.yaml")
    with pytest.raises(AutotuneError, match="config file not found"):
        load_config_file(tmp_path)                # a folder is not a file


@pytest.mark.parametrize("name,text", [
    ("list.json", "[1, 2]"),
    ("scalar.yaml", "just a string\n"),
    ("empty.yaml", ""),
    ("params_list.json", '{"params": [1]}'),   # params must be a mapping to be unwrapped
])
def test_non_mapping(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    if name == "params_list.json":
        # the outer mapping is used as is; its 'params' key is then unknown
        with pytest.raises(AutotuneError, match="unknown config key 'params'"):
            config_from_mapping(load_config_file(path))
        return
    with pytest.raises(AutotuneError, match="must hold a mapping"):
        load_config_file(path)


@pytest.mark.parametrize("name,text", [("bad.json", "{not json"),
                                       ("bad.yaml", "a: [1, 2\n"),
                                       ("bin.yaml", None)])
def test_unreadable(tmp_path, name, text):
    path = tmp_path / name
    if text is None:
        path.write_bytes(b"\xff\xfe\x00bad")
    else:
        path.write_text(text)
    with pytest.raises(AutotuneError, match="cannot read config file") as err:
        load_config_file(path)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ policies

def test_make_policy_kinds_and_fresh_state():
    kinds = {"fixed": ExitPolicy, "confidence": ConfidencePolicy, "adaptive": AdaptivePolicy,
             "heuristic": HeuristicPolicy}
    for name, cls in kinds.items():
        assert type(make_policy(DecodeConfig(exit_policy=name))) is cls
    config = DecodeConfig(exit_policy="heuristic", k=3)
    first = make_policy(config)
    first.update(3, 3)
    assert first.limit() == 5
    assert make_policy(config).limit() == 3       # no state shared between runs


def test_fixed_policy():
    policy = make_policy(DecodeConfig(k=5))
    assert policy.limit() == 5 and policy.keep_going(0.0)
    policy.update(5, 0)
    assert policy.limit() == 5


def test_confidence_policy_stops_below_gamma():
    policy = make_policy(DecodeConfig(exit_policy="confidence", gamma=0.6, k=4))
    assert policy.limit() == 4
    assert not policy.keep_going(0.59)
    assert policy.keep_going(0.6)
    assert policy.keep_going(0.95)
    policy.update(4, 0)                           # not adaptive: gamma stays
    assert not policy.keep_going(0.59)


def test_heuristic_policy_plus_two_minus_one_floor_one():
    policy = make_policy(DecodeConfig(exit_policy="heuristic", k=3))
    limits = []
    for drafted, accepted in [(3, 3), (5, 5), (7, 6), (6, 0), (5, 1), (4, 0), (3, 2),
                              (2, 0), (1, 0), (1, 0), (0, 0), (1, 1)]:
        policy.update(drafted, accepted)
        limits.append(policy.limit())
    assert limits == [5, 7, 6, 5, 4, 3, 2, 1, 1, 1, 1, 3]


def test_adaptive_policy_follows_draft_and_verify_rule():
    """Hand-computed with alpha=0.7, epsilon=0.05, beta1=0.25, beta2=0.5, gamma0=0.5.

    AR <- b1*AR + (1-b1)*AR_e (b1 = 0 in the first round);
    g~ = g + eps if AR <= alpha else g - eps;  g <- b2*g + (1-b2)*g~.
    round (4 drafted, 4 accepted): AR = 1           > 0.7 -> g = .5*.5  + .5*.45  = 0.475
    round (0, 0): no draft, nothing changes
    round (4, 1): AR = .25*1 + .75*.25 = 0.4375   <= 0.7 -> g = .5*.475 + .5*.525 = 0.5
    round (2, 2): AR = .25*.4375 + .75*1 = 0.859375 > 0.7 -> g = 0.475
    round (5, 0): AR = .25*.859375 = 0.21484375   <= 0.7 -> g = 0.5
    round (4, 3): AR = .25*.21484375 + .75*.75 = 0.6162109375 <= 0.7 -> g = 0.525
    """
    policy = make_policy(DecodeConfig(exit_policy="adaptive", gamma=0.5, target_acceptance=0.7,
                                      epsilon=0.05, beta1=0.25, beta2=0.5, k=6))
    seen = []
    for drafted, accepted in [(4, 4), (0, 0), (4, 1), (2, 2), (5, 0), (4, 3)]:
        policy.update(drafted, accepted)
        seen.append((policy.acceptance, policy.gamma))
    expect = [(1.0, 0.475), (1.0, 0.475), (0.4375, 0.5), (0.859375, 0.475),
              (0.21484375, 0.5), (0.6162109375, 0.525)]
    for (ar, g), (ar_e, g_e) in zip(seen, expect):
        assert ar == pytest.approx(ar_e, abs=1e-12) and g == pytest.approx(g_e, abs=1e-12)
    assert policy.limit() == 6
    assert not policy.keep_going(0.52) and policy.keep_going(0.53)


def test_adaptive_first_round_ignores_beta1_even_after_empty_rounds():
    policy = make_policy(DecodeConfig(exit_policy="adaptive", beta1=0.9, gamma=0.5,
                                      target_acceptance=0.5, epsilon=0.1, beta2=0.0))
    policy.update(0, 0)
    assert policy.acceptance is None and policy.gamma == 0.5
    policy.update(4, 1)                       # AR = 0.25, not 0.9*0 + 0.1*0.25
    assert policy.acceptance == pytest.approx(0.25)
    assert policy.gamma == pytest.approx(0.6)  # beta2 = 0: gamma jumps to g~


def test_confidence_policy_in_the_decoder():
    """gamma=1 stops every layer-skip draft after its first token; gamma=0 never stops."""
    target = tiny_llama(seed=0, layers=4, vocab=64)
    prompt = list(range(10, 20))

    def rounds(gamma: float):
        config = DecodeConfig(method="layer_skip", attn_skip=(1,), mlp_skip=(2,), k=4,
                              exit_policy="confidence", gamma=gamma)
        gen = SpeculativeDecoder(target, config).generate(prompt, 12, time.perf_counter)
        return gen, [r.drafted for r in gen.rounds]

    stop, drafted = rounds(1.0)
    assert drafted and all(d == 1 for d in drafted[:-1])
    go, drafted = rounds(0.0)
    assert max(drafted) == 4
    # the policy changes the rounds, never the greedy output
    assert stop.tokens == go.tokens
    ar = SpeculativeDecoder(target, DecodeConfig()).generate(prompt, 12, time.perf_counter)
    assert ar.tokens == stop.tokens


def test_draft_with_another_vocabulary_is_refused():
    target = tiny_llama(seed=0, layers=4, vocab=64)
    draft = tiny_llama(seed=1, layers=2, vocab=48)
    with pytest.raises(AutotuneError, match="do not share a vocabulary"):
        SpeculativeDecoder(target, DecodeConfig(method="draft_model"), draft)


def test_draft_model_without_draft_is_refused():
    with pytest.raises(AutotuneError, match="needs a draft model"):
        SpeculativeDecoder(tiny_llama(), DecodeConfig(method="draft_model"))
