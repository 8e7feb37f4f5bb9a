"""vLLM itself as the oracle of its drafting rule: real vLLM (its CPU build, Model Runner
V1, eager, float32) decodes Spec-Bench prompts with n-gram speculation, and its own
spec-decode counters (`LLM.get_metrics()`: drafts, draft tokens, accepted tokens) must
equal, prompt by prompt, what autotune's decoder and its replay tier draft and accept
under vLLM's V1 rules (`engine=vllm_v1`); every output must equal vLLM's own output
without speculation. A vLLM release that drafts otherwise, or a change to the rule in
autotune, fails here.

They skip where vLLM's venv is missing (python -m autotune.backends.vllm_install),
except in CI (`AUTOTUNE_REQUIRE_VLLM=1`, set by .ci/run after setup.sh --test installs
it)."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
from conftest import real_prompts, real_vllm

from autotune.backends.embedded import EmbeddedBackend
from autotune.backends.vllm import VllmBackend, unavailable
from autotune.schema.config import DecodeConfig
from autotune.schema.engines import rules_for
from autotune.schema.methods import get_method
from autotune.replay.reference import Reference
from autotune.replay.simulate import simulate
from autotune.workloads.prompts import encode_prompt

MAX_NEW = 48
PROMPTS = 4
# vLLM's documented n-gram example (k 5, n 5..5 would rarely match in 48 tokens) and a
# short-n config that drafts on most steps.
CONFIGS = (DecodeConfig(method="ngram", k=4, ngram_min=2, ngram_max=3),
           DecodeConfig(method="ngram", k=6, ngram_min=1, ngram_max=4))


def _need_vllm() -> None:
    with real_vllm():
        why = unavailable()
    if why is None:
        return
    if os.environ.get("AUTOTUNE_REQUIRE_VLLM"):
        pytest.fail(f"vLLM is required here: {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def prompts(default_model):
    chosen = real_prompts(PROMPTS)
    return chosen, [encode_prompt(default_model.tokenizer, p) for p in chosen]


@pytest.fixture(scope="module")
def in_vllm(default_model, prompts):
    """Per config (and None: no speculation), vLLM's Generation of every prompt and its
    spec-decode counters for it."""
    _need_vllm()
    _, ids = prompts
    # One unbound thread per engine (two pytest workers share two cores), eager.
    with real_vllm():
        backend = VllmBackend.for_model(default_model, ids, MAX_NEW)
    backend.eager, backend.threads = True, 1
    out = {}
    try:
        for config in (None, *CONFIGS):
            runner = backend.runner(config or DecodeConfig())
            try:
                generations = [runner.generate(p, MAX_NEW, time.perf_counter) for p in ids]
                out[config] = list(zip(generations, runner.counters))
            finally:
                runner.close()
    finally:
        backend.close()                 # the engines kept idle between runners
    assert backend.runner_name == "V1", backend.label     # the runner the rules are of
    return out


def _counts_of_rounds(rounds) -> tuple[int, int, int]:
    """(drafts, draft tokens, accepted) as vLLM counts them: a draft is a step that
    verified at least one draft token."""
    return (sum(1 for r in rounds if r.drafted > 0), sum(r.drafted for r in rounds),
            sum(r.accepted for r in rounds))


def _vllm_counts(counters) -> tuple[int, int, int]:
    return counters.drafts, counters.draft_tokens, counters.accepted


def test_vllm_on_this_cpu_runs_model_runner_v1():
    assert rules_for("vllm", "cpu") == "vllm_v1"
    assert rules_for("vllm", "cuda") == "vllm"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"k{c.k}-n{c.ngram_min}..{c.ngram_max}")
def test_vllm_outputs_equal_its_ar(in_vllm, config):
    for (plain, _), (speculated, counters) in zip(in_vllm[None], in_vllm[config]):
        assert speculated.tokens == plain.tokens
        # The rounds the backend reports agree with vLLM's counters.
        assert _counts_of_rounds(speculated.rounds) == _vllm_counts(counters)
    assert sum(c.accepted for _, c in in_vllm[config]) > 0     # the rule was exercised


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"k{c.k}-n{c.ngram_min}..{c.ngram_max}")
def test_decoder_under_v1_rules_accepts_what_vllm_accepts(default_model, prompts, in_vllm,
                                                          config):
    _, ids = prompts
    ours = dataclasses.replace(config, engine=rules_for("vllm", "cpu"))
    runner = EmbeddedBackend(default_model).runner(ours)
    for prompt, (theirs, counters) in zip(ids, in_vllm[config]):
        generation = runner.generate(prompt, MAX_NEW, time.perf_counter)
        assert generation.tokens == theirs.tokens
        assert _counts_of_rounds(generation.rounds) == _vllm_counts(counters)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"k{c.k}-n{c.ngram_min}..{c.ngram_max}")
def test_replay_under_v1_rules_accepts_what_vllm_accepts(default_model, prompts, in_vllm,
                                                         config):
    chosen, ids = prompts
    ours = dataclasses.replace(config, engine=rules_for("vllm", "cpu"))
    references = [Reference(p.prompt_id, p.category, prompt, list(plain.tokens))
                  for p, prompt, (plain, _) in zip(chosen, ids, in_vllm[None])]
    source = get_method("ngram").replay_factory()(default_model, None)
    source.prepare(ours, references)
    for reference, (_, counters) in zip(references, in_vllm[config]):
        rounds = simulate(source.track(ours, reference), ours, reference, MAX_NEW)
        assert _counts_of_rounds(rounds) == _vllm_counts(counters)
