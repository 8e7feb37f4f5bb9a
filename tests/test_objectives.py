"""Objectives: the metric registry, YAML loading and its errors, constraints,
evaluation through `measure` (with pruning reports), and teacher-forced agreement."""

from __future__ import annotations

import dataclasses
import math
import random
import time
from pathlib import Path

import optuna
import pytest
import torch
from conftest import real_prompts
from tiny import tiny_llama

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import did_you_mean, load_yaml
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.methods.ngram.drafter import lookup
from autotune.decoding.reference import reference_continuations
from autotune.measure.agreement import teacher_forced_agreement
from autotune.measure.results import Measurement
from autotune.search.evaluation import evaluate
from autotune.search.objectives import (
    CONSTRAINT_METRICS,
    METRICS,
    Constraint,
    EvalContext,
    available_objectives,
    load_objective,
)
from autotune.workloads.prompts import Prompt

SUMMARY_KEYS_WITHOUT_AGREEMENT = set(METRICS) - {"agreement"}


# ------------------------------------------------------------------ registry
def test_registry_directions_and_units():
    expect = {
        "latency_ms_per_token": ("minimize", "ms/token"), "speedup": ("maximize", "x"),
        "peak_memory_mb": ("minimize", "MiB"), "acceptance_rate": ("maximize", "fraction"),
        "mean_accepted_tokens": ("maximize", "tokens/round"),
        "prefill_ms": ("minimize", "ms"), "draft_time_share": ("minimize", "fraction"),
        "agreement": ("maximize", "fraction"),
    }
    assert {n: (m.direction, m.unit) for n, m in METRICS.items()} == expect
    assert all(m.description for m in METRICS.values())
    assert CONSTRAINT_METRICS == set(METRICS) | {"lossless"}


def test_registry_names_are_summary_keys(tiny_ctx):
    summary = evaluate(load_objective("latency"), tiny_ctx, DecodeConfig(method="ngram"))
    assert SUMMARY_KEYS_WITHOUT_AGREEMENT | {"lossless"} <= set(summary.to_json())


@pytest.mark.parametrize("name", ["latency", "speedup", "latency_memory", "agreement"])
def test_shipped_objectives_load(name):
    assert name in available_objectives()
    obj = load_objective(name)
    assert obj.name == name and obj.description and len(obj.sha256) == 64
    assert Path(obj.path).read_text().startswith("#")          # a comment on what it is for
    assert obj.workload.max_new_tokens == 64
    assert obj.workload.prompts == (16 if name == "agreement" else 8)
    if name == "agreement":
        assert obj.metrics == ("agreement",) and not obj.constraints and not obj.needs_timing
    else:
        assert obj.constraints == (Constraint("lossless", equals=True, greedy_only=True),)
    assert obj.multi == (name == "latency_memory")
    assert obj.directions == {"latency": ["minimize"], "speedup": ["maximize"],
                              "latency_memory": ["minimize", "minimize"],
                              "agreement": ["maximize"]}[name]
    # The same file by path gives the same objective.
    assert load_objective(obj.path).sha256 == obj.sha256


def test_unknown_preset_suggests():
    with pytest.raises(AutotuneError, match="did you mean 'latency'"):
        load_objective("latncy")


# ---------------------------------------------------------------- bad YAML
GOOD = """\
description: ok
metrics: [latency_ms_per_token]
constraints:
  - metric: lossless
    equals: true
workload:
  prompts: 4
"""

BAD_CASES = {
    "unknown_key": (GOOD + "repeets: 2\n", 8, "repeets", "did you mean 'repeats'"),
    "unknown_metric": (GOOD.replace("[latency_ms_per_token]", "[latency_ms_per_tokn]"),
                       2, "metrics[0]", "did you mean 'latency_ms_per_token'"),
    "metric_prefix": (GOOD.replace("[latency_ms_per_token]", "[speedup, latency]"),
                      2, "metrics[1]", "did you mean 'latency_ms_per_token'"),
    "repeats_zero": (GOOD + "repeats: 0\n", 8, "repeats", "at least 1"),
    "two_comparators": (GOOD.replace("    equals: true\n", "    at_most: 1\n    at_least: 0\n"),
                        6, "constraints[0].at_least", "exactly one of"),
    "bad_workload": (GOOD + "  top_p: 1.5\n", 8, "workload.top_p", "(0, 1]"),
    "workload_key": (GOOD + "  max_new_token: 8\n", 8, "workload.max_new_token",
                     "did you mean 'max_new_tokens'"),
    "constraint_metric": (GOOD.replace("metric: lossless", "metric: losless"), 4,
                          "constraints[0].metric", "did you mean 'lossless'"),
    "syntax": (GOOD.replace("metrics: [latency_ms_per_token]", "metrics: a: b"), 2,
               "YAML syntax error", "mapping values are not allowed"),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_yaml_gives_one_line_with_file_line_key(tmp_path, case):
    text, line, key, hint = BAD_CASES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    with pytest.raises(AutotuneError) as info:
        load_objective(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: {key}"), message
    assert hint in message


def test_good_yaml_parses(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(GOOD + "  categories: [coding]\n  temperature: 0.7\n")
    obj = load_objective(str(path))
    assert obj.name == "mine" and obj.repeats == 1 and obj.metrics == ("latency_ms_per_token",)
    assert obj.workload.categories == ("coding",) and obj.workload.temperature == 0.7
    assert obj.workload.prompts == 4 and obj.workload.max_new_tokens == 64


def test_load_yaml_line_map(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(GOOD)
    data, lines = load_yaml(path)
    assert data["workload"]["prompts"] == 4
    assert lines[("workload", "prompts")] == 7
    assert lines[("constraints", 0)] == 4 and lines[("constraints", 0, "equals")] == 5
    assert did_you_mean("zzz", ["metrics"]) == ""


# ----------------------------------------------------------- constraints
def test_constraint_violation_respects_greedy_only():
    lossless = Constraint("lossless", equals=True, greedy_only=True)
    greedy, sampled = DecodeConfig(), DecodeConfig(temperature=0.8)
    assert lossless.violation({"lossless": True}, greedy) is None
    assert lossless.violation({"lossless": False}, greedy) == "lossless is False, must be True"
    assert lossless.violation({"lossless": None}, sampled) is None
    # Measured in an engine whose multi-token passes round differently (llama.cpp): the
    # mismatch is reported, not held against the config; where it binds, it still does.
    assert lossless.violation({"lossless": False, "lossless_binding": False}, greedy) is None
    assert lossless.violation({"lossless": False, "lossless_binding": True}, greedy) == \
        "lossless is False, must be True"
    assert "undefined" in Constraint("lossless", equals=True).violation({"lossless": None},
                                                                        sampled)
    memory = Constraint("peak_memory_mb", at_most=500.0)
    assert memory.violation({"peak_memory_mb": 400.0}, sampled) is None
    assert memory.violation({"peak_memory_mb": 612.5}, sampled) == \
        "peak_memory_mb is 612.5, must be at most 500"
    accept = Constraint("acceptance_rate", at_least=0.5)
    assert accept.violation({"acceptance_rate": 0.4}, greedy) == \
        "acceptance_rate is 0.4, must be at least 0.5"
    assert "undefined" in accept.violation({}, greedy)


def test_objective_values_and_violation():
    obj = load_objective("latency_memory")
    assert obj.values({"latency_ms_per_token": 3, "peak_memory_mb": 100.5}) == [3.0, 100.5]
    for bad in (None, float("nan")):
        with pytest.raises(AutotuneError, match="latency_ms_per_token is undefined"):
            obj.values({"latency_ms_per_token": bad, "peak_memory_mb": 1.0})
    assert obj.violation({"lossless": False}, DecodeConfig()) == "lossless is False, must be True"
    assert obj.violation({"lossless": None}, DecodeConfig(temperature=1.0)) is None


# ------------------------------------------------------------ evaluation
def _tiny_prompts(n: int, length: int = 5, seed: int = 0) -> list[Prompt]:
    rng = random.Random(seed)
    return [Prompt(" ".join(f"t{rng.randrange(1, 64)}" for _ in range(length)), "default",
                   f"p{i}") for i in range(n)]


@pytest.fixture(scope="module")
def tiny_model():
    return tiny_llama(seed=0, layers=4)


@pytest.fixture()
def tiny_ctx(tiny_model):
    return EvalContext(target=tiny_model, draft=None, prompts=_tiny_prompts(3),
                       max_new_tokens=12, seed=0)


def test_evaluate_reports_partial_summary_each_prompt(tiny_ctx, monkeypatch):
    from autotune.search import objectives
    partials: list[float] = []
    real_record = Measurement.record

    def spy(self):
        out = real_record(self)
        partials.append(out.latency_ms_per_token)
        return out

    monkeypatch.setattr(Measurement, "record", spy)
    reports: list[tuple[int, float]] = []
    obj = objectives.load_objective("latency")
    metrics = evaluate(obj, tiny_ctx, DecodeConfig(method="layer_skip", attn_skip=(1,)),
                           report=lambda step, value: reports.append((step, value)))
    assert [s for s, _ in reports] == [0, 1, 2]
    # Three partial summaries (one per prompt), then the final one.
    assert [v for _, v in reports] == partials[:3]
    assert reports[-1][1] == metrics.latency_ms_per_token == partials[-1]
    values = obj.values(metrics)
    assert len(values) == 1 and math.isfinite(values[0]) and values[0] > 0
    assert metrics.lossless is True and obj.violation(metrics, DecodeConfig()) is None


def test_evaluate_repeats_are_pooled(tiny_ctx, monkeypatch):
    """Repeats are one measurement: every run's time and tokens summed, never the median
    or the best of separate repeats."""
    seen: list[Measurement] = []
    real = Measurement.record

    def spy(self):
        seen.append(self)
        return real(self)

    monkeypatch.setattr(Measurement, "record", spy)
    obj = dataclasses.replace(load_objective("latency"), repeats=3)
    reports: list[tuple[int, float]] = []
    metrics = evaluate(obj, tiny_ctx, DecodeConfig(method="ngram"),
                           report=lambda s, v: reports.append((s, v)))
    runs = seen[-1].runs
    assert len(runs) == 9 and [r.prompt_id for r in runs[:3]] == [r.prompt_id for r in runs[3:6]]
    decoded = sum(len(r.candidate.tokens) - 1 for r in runs)
    pooled = 1000 * sum(r.candidate.decode_s for r in runs) / decoded
    assert metrics.latency_ms_per_token == pytest.approx(pooled)
    assert metrics.repeats == 3 and metrics.prompts == 3 and metrics.runs == 9
    assert [s for s, _ in reports] == list(range(9))
    assert reports[-1][1] == metrics.latency_ms_per_token
    assert metrics.lossless is True


def test_report_raising_pruned_propagates(tiny_ctx):
    calls = []

    def prune(step: int, value: float) -> None:
        calls.append(step)
        raise optuna.TrialPruned()

    with pytest.raises(optuna.TrialPruned):
        evaluate(load_objective("speedup"), tiny_ctx, DecodeConfig(method="ngram"), report=prune)
    assert calls == [0]


def test_multi_objective_does_not_report(tiny_ctx):
    reports = []
    metrics = evaluate(load_objective("latency_memory"), tiny_ctx, DecodeConfig(), report=lambda s, v: reports.append(v))
    assert reports == [] and len(load_objective("latency_memory").values(metrics)) == 2


def test_agreement_objective_does_not_decode_candidates(tiny_ctx, monkeypatch):
    from autotune.search import evaluation, objectives

    def no_measure(*args, **kwargs):
        raise AssertionError("agreement must not call measure")

    monkeypatch.setattr(evaluation, "measure_arms", no_measure)
    obj = objectives.load_objective("agreement")
    reports = []
    out = evaluate(obj, tiny_ctx, DecodeConfig(method="layer_skip"),
                       report=lambda s, v: reports.append((s, v)))
    assert out.agreement == 1.0 and out.agreement_positions == 3 * 11
    assert out.config is not None and out.config["method"] == "layer_skip"
    assert [s for s, _ in reports] == [0, 1, 2] and reports[-1][1] == 1.0
    memo = dict(tiny_ctx.memo)
    assert len(memo) == 1                               # reference decoded once, reused
    evaluate(obj, tiny_ctx, DecodeConfig(method="ngram"))
    assert tiny_ctx.memo.keys() == memo.keys()


# ------------------------------------------------------------- agreement
@pytest.fixture(scope="module")
def sequences(tiny_model) -> list[tuple[int, list[int]]]:
    rng = random.Random(1)
    prompts = [[rng.randrange(64) for _ in range(6)] for _ in range(4)]
    continuations = reference_continuations(tiny_model, prompts, 20)
    assert all(len(c) == 20 for c in continuations)
    return [(len(p), p + c) for p, c in zip(prompts, continuations)]


def test_reference_is_greedy_decode(tiny_model, sequences):
    decoder = SpeculativeDecoder(tiny_model, DecodeConfig())
    p, ids = sequences[0]
    assert decoder.generate(ids[:p], 20, time.perf_counter).tokens == ids[p:]


def test_layer_skip_agreement(tiny_model, sequences):
    total = sum(len(ids) - p - 1 for p, ids in sequences)
    full = teacher_forced_agreement(tiny_model, DecodeConfig(method="layer_skip"), sequences)
    assert full == (total, total)            # skipping nothing IS the target
    heavy = DecodeConfig(method="layer_skip", attn_skip=(1, 2, 3), mlp_skip=(0, 1, 2, 3))
    agree, positions = teacher_forced_agreement(tiny_model, heavy, sequences)
    assert positions == total and agree < total


def test_draft_model_target_as_draft(tiny_model, sequences):
    agree, positions = teacher_forced_agreement(
        tiny_model, DecodeConfig(method="draft_model"), sequences, draft=tiny_model)
    assert agree == positions > 0
    other = tiny_llama(seed=5, layers=2)
    agree, positions = teacher_forced_agreement(
        tiny_model, DecodeConfig(method="draft_model"), sequences, draft=other)
    assert agree < positions


def test_none_agrees_nowhere(tiny_model, sequences):
    agree, positions = teacher_forced_agreement(tiny_model, DecodeConfig(), sequences)
    assert agree == 0 and positions > 0


def test_ngram_agreement_equals_brute_force(tiny_model, sequences):
    config = DecodeConfig(method="ngram", ngram_min=1, ngram_max=3)
    expect = 0
    for p, ids in sequences:
        for t in range(p, len(ids) - 1):
            found = lookup(ids[:t + 1], 1, 3, 1)
            expect += int(bool(found) and found[0] == ids[t + 1])
    assert teacher_forced_agreement(tiny_model, config, sequences)[0] == expect


def test_sorted_exit_deepest_full_depth_agrees_fully(tiny_model, sequences):
    config = DecodeConfig(method="sorted_exit", exits=(1, 2, 4), thresholds=(1.0, 1.0))
    agree, positions = teacher_forced_agreement(tiny_model, config, sequences)
    assert agree == positions > 0


def test_sorted_exit_rule_matches_per_exit_brute_force():
    """Each position takes the first exit whose top-1 probability reaches its threshold
    (the deepest always emits), checked against one full forward per exit."""
    model = tiny_llama(seed=2, layers=4, scale=3.0)      # peaked: confidences spread out
    fwd = model.forward
    rng = random.Random(3)
    prompts = [[rng.randrange(64) for _ in range(6)] for _ in range(3)]
    sequences = [(len(p), p + c) for p, c in
                 zip(prompts, reference_continuations(model, prompts, 16))]
    exits = (1, 2, 4)
    with torch.inference_mode():
        confidences = {}
        for p, ids in sequences:
            x = torch.tensor([ids])
            confidences[p, tuple(ids)] = [
                torch.softmax(fwd.forward(x, fwd.new_cache(1, len(ids)), exit_layer=e)[0], -1)
                for e in exits]
    # Thresholds at the median confidence of each shallow exit: some positions leave early.
    thresholds = tuple(
        float(torch.cat([probs[i][p:len(ids) - 1].max(-1).values
                         for (p, ids), probs in confidences.items()]).median())
        for i in range(2))
    expect = 0
    for (p, ids), probs in confidences.items():
        for t in range(p, len(ids) - 1):
            for prob, threshold in zip(probs, thresholds + (0.0,)):
                if float(prob[t].max()) >= threshold:
                    expect += int(int(prob[t].argmax()) == ids[t + 1])
                    break
    config = DecodeConfig(method="sorted_exit", exits=exits, thresholds=thresholds)
    got, positions = teacher_forced_agreement(model, config, sequences)
    assert got == expect and 0 < got < positions


def test_agreement_checks_config(tiny_model, sequences):
    with pytest.raises(AutotuneError, match="draft"):
        teacher_forced_agreement(tiny_model, DecodeConfig(method="draft_model"), sequences)
    with pytest.raises(AutotuneError, match="outside"):
        teacher_forced_agreement(tiny_model, DecodeConfig(method="layer_skip", attn_skip=(9,)),
                                 sequences)


# --------------------------------------------------------- the real model
@pytest.mark.slow
def test_agreement_on_default_model(default_model):
    ctx = EvalContext(target=default_model, draft=None, prompts=real_prompts(2),
                      max_new_tokens=16)
    obj = load_objective("agreement")
    light = evaluate(obj, ctx, DecodeConfig(method="layer_skip", attn_skip=(12,)))
    heavy = evaluate(obj, ctx, DecodeConfig(method="layer_skip", attn_skip=tuple(range(1, 21))))
    assert light.agreement_positions == heavy.agreement_positions > 20
    assert light.agreement is not None and heavy.agreement is not None
    assert 0.5 <= light.agreement <= 1.0 and heavy.agreement < light.agreement
