"""The measurement core (`autotune.measure.measurement`) itself, on tiny random-weight models:
the order runs are made in (interleaving, alternation, warm-up), what a per-token latency
divides (prefill apart, tokens as generated after the EOS cut), τ after the EOS cut, the
`lossless: false` path reached by a real token mismatch, sampling with a draft model and
top-p (the target's distribution kept), peak memory charged per method, and repeats.

No test reads the wall clock: where time matters, a fake clock stands in for `Clock`.
"""

from __future__ import annotations

import json

import time
from typing import Any

import pytest
import torch
from tiny import llama_model, one_thread, tiny_llama, tiny_loaded  # noqa: F401  (autouse fixture)

import autotune.decoding.decoder as decoder_module
import autotune.measure.measurement as measure_module
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.decoding.prefill import PrefillMemo
from autotune.measure import paired
from autotune.records.summary import MeasurementSummary
from autotune.measure.measurement import WARMUP_TOKENS, measure, measure_arms
from autotune.models.loading import LoadedModel
from autotune.workloads.prompts import Prompt, encode_prompt

# Seed 0 of the tiny Llama at scale 2 has peaked, token-specific continuations (greedy
# outputs of these prompts are listed where a test relies on them).
SCALE = 2.0
PROMPTS = [Prompt("t1 t2 t3 t4 t1 t2", "code", "p0"), Prompt("t5 t6 t7 t5 t6", "code", "p1"),
           Prompt("t9 t8 t9 t8 t9", "chat", "p2")]
MAX_NEW = 10


@pytest.fixture(scope="module")
def target() -> LoadedModel:
    return tiny_llama(seed=0, scale=SCALE)


@pytest.fixture(scope="module")
def draft() -> LoadedModel:
    """Another tiny Llama over the same vocabulary: its drafts are often rejected."""
    return tiny_llama(seed=5, layers=2, scale=SCALE)


def _ids(model: LoadedModel, prompt: Prompt) -> list[int]:
    return encode_prompt(model.tokenizer, prompt)


# ------------------------------------------------------------------ order of runs
class _CallLog:
    """A spy on `SpeculativeDecoder.generate`: (arm, prompt ids, max_new_tokens) per call,
    the arm named by identity of the decoder's config."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, arms: dict[str, DecodeConfig]) -> None:
        self.calls: list[tuple[str, tuple[int, ...], int]] = []
        original = SpeculativeDecoder.generate
        log = self

        def spy(decoder: SpeculativeDecoder, prompt: list[int], max_new_tokens: int,
                *args: Any, **kwargs: Any):
            name = next((n for n, c in arms.items() if decoder.config is c), "baseline")
            log.calls.append((name, tuple(prompt), max_new_tokens))
            return original(decoder, prompt, max_new_tokens, *args, **kwargs)

        monkeypatch.setattr(SpeculativeDecoder, "generate", spy)


def test_one_candidate_alternates_which_runs_first(target, monkeypatch):
    config = DecodeConfig(method="ngram", k=3)
    log = _CallLog(monkeypatch, {"candidate": config})
    result = measure(target, config, PROMPTS, MAX_NEW)
    warmup, timed = log.calls[:2], log.calls[2:]
    # Warm-up: each decoder once, on the first prompt, with the short warm-up budget.
    assert sorted(name for name, _, _ in warmup) == ["baseline", "candidate"]
    assert {(ids, n) for _, ids, n in warmup} == {(tuple(_ids(target, PROMPTS[0])), WARMUP_TOKENS)}
    # Then per prompt both runs, prompt by prompt, the first alternating.
    p0, p1, p2 = (tuple(_ids(target, p)) for p in PROMPTS)
    assert [(name, ids) for name, ids, _ in timed] == [
        ("baseline", p0), ("candidate", p0), ("candidate", p1), ("baseline", p1),
        ("baseline", p2), ("candidate", p2)]
    assert all(n == MAX_NEW for _, _, n in timed)
    assert [r.prompt_id for r in result.runs] == ["p0", "p1", "p2"]


def test_three_arms_rotate_and_share_one_baseline(target, monkeypatch):
    arms = {"a": DecodeConfig(method="ngram", k=2), "b": DecodeConfig(method="ngram", k=4)}
    log = _CallLog(monkeypatch, arms)
    results = measure_arms(target, arms, PROMPTS, MAX_NEW)
    warmup, timed = log.calls[:3], log.calls[3:]
    assert sorted(name for name, _, _ in warmup) == ["a", "b", "baseline"]
    assert all(n == WARMUP_TOKENS for _, _, n in warmup)
    assert all(n == MAX_NEW for _, _, n in timed) and len(timed) == 3 * len(PROMPTS)
    orders = [[name for name, _, _ in timed[i:i + 3]] for i in range(0, len(timed), 3)]
    # Every arm runs on a prompt before the next prompt starts ...
    for i, prompt in enumerate(PROMPTS):
        assert {ids for _, ids, _ in timed[3 * i:3 * i + 3]} == {tuple(_ids(target, prompt))}
    # ... and the order rotates by one per prompt: each arm once in each position.
    assert orders == [["baseline", "a", "b"], ["a", "b", "baseline"], ["b", "baseline", "a"]]
    # Both arms are paired with the very same baseline runs.
    for run_a, run_b in zip(results["a"].runs, results["b"].runs):
        assert run_a.baseline is run_b.baseline


# ------------------------------------------------------------------ what is timed
class _FakeClock:
    """Virtual seconds: every reading advances by one tick; `wait` adds more."""

    def __init__(self, tick: float = 0.001) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def wait(self, seconds: float) -> None:
        self.now += seconds


PREFILL_S = 10.0


def test_prefill_is_reported_apart_and_kept_out_of_per_token_latency(monkeypatch):
    """A prefill made 10 virtual seconds slow shows in `prefill_ms`, never in the
    per-token latency or the speedup, which divide decode time by the tokens after the
    first (the prefill's)."""
    target = tiny_llama(seed=0, scale=SCALE)           # its forward is patched below
    clock = _FakeClock()
    monkeypatch.setattr(measure_module, "Clock", lambda device: clock)
    forward = target.forward.forward

    def slow_prefill(ids: torch.Tensor, cache: Any, *args: Any, last_only: bool = False,
                     **kwargs: Any) -> torch.Tensor:
        if last_only:                    # the decoder's prefill pass over the prompt
            clock.wait(PREFILL_S)
        return forward(ids, cache, *args, last_only=last_only, **kwargs)

    monkeypatch.setattr(target.forward, "forward", slow_prefill)
    result = measure(target, DecodeConfig(method="ngram", k=3), PROMPTS, MAX_NEW)
    summary = result.summary()
    # Every key the JSON of `autotune measure` writes is declared (records/summary.py).
    declared = {field.alias or name for name, field in MeasurementSummary.model_fields.items()}
    assert set(summary) <= declared, set(summary) - declared
    # The record reads back what it wrote, and writes it again key for key.
    record = MeasurementSummary.from_json(summary)
    assert json.dumps(record.to_json()) == json.dumps(summary) == json.dumps(result.record().to_json())
    # Three prompts: fewer than an interval holds its level on (issue 59), so none.
    assert record.ci90 is None and summary["speedup_ci90"] is None
    for side in ("candidate", "baseline"):
        gens = [getattr(r, side) for r in result.runs]
        assert all(PREFILL_S <= g.prefill_s < PREFILL_S + 1 for g in gens)
        assert all(g.decode_s < 1 for g in gens)
        key = "latency_ms_per_token" if side == "candidate" else "baseline_latency_ms_per_token"
        decoded = sum(len(g.tokens) - 1 for g in gens)
        assert decoded == len(PROMPTS) * (MAX_NEW - 1)
        assert summary[key] == pytest.approx(1000 * sum(g.decode_s for g in gens) / decoded)
    assert summary["prefill_ms"] >= 1000 * PREFILL_S
    assert summary["baseline_prefill_ms"] >= 1000 * PREFILL_S
    assert summary["latency_ms_per_token"] < 100        # 10 s / 9 tokens would be > 1000
    assert summary["speedup"] == pytest.approx(
        summary["baseline_latency_ms_per_token"] / summary["latency_ms_per_token"])


# ------------------------------------------------------------------ the EOS cut
def test_eos_cut_stops_both_sides_and_tau_counts_tokens_appended():
    """A model whose EOS is the 4th greedy token of p0: both decoders stop there, the
    speculative round that ran past it counts only the tokens appended, and per-token
    latency divides by the tokens actually generated."""
    plain = tiny_loaded(llama_model(seed=0, scale=SCALE))
    ar = SpeculativeDecoder(plain, DecodeConfig())
    full = {p.prompt_id: ar.generate(_ids(plain, p), MAX_NEW, time.perf_counter).tokens
            for p in PROMPTS[:2]}
    eos = full["p0"][3]
    # The set-up the test relies on: EOS first appears at index 3 of p0, never in p1.
    assert eos not in full["p0"][:3] and eos not in full["p1"], full
    stopping = tiny_loaded(llama_model(seed=0, scale=SCALE, eos=eos))   # same weights
    assert stopping.eos_token_ids == {eos}
    # The target as its own draft accepts every draft: round 1 proposes k=4 tokens and
    # returns 5, of which only 3 (up to the EOS) are appended; the 4th accepted draft,
    # past the EOS, is never emitted and so not counted as accepted either.
    config = DecodeConfig(method="draft_model", k=4)
    result = measure(stopping, config, PROMPTS[:2], MAX_NEW, draft=stopping)
    by_id = {r.prompt_id: r for r in result.runs}
    assert by_id["p0"].baseline.tokens == full["p0"][:4]
    assert by_id["p0"].candidate.tokens == full["p0"][:4]
    assert by_id["p1"].candidate.tokens == by_id["p1"].baseline.tokens == full["p1"]
    first = by_id["p0"].candidate.rounds
    assert [(t.drafted, t.accepted, t.emitted) for t in first] == [(4, 3, 3)]
    summary = result.summary()
    rounds = [t for r in result.runs for t in r.candidate.rounds]
    emitted = sum(t.emitted for t in rounds)
    assert emitted == sum(len(r.candidate.tokens) - 1 for r in result.runs)
    assert summary["mean_accepted_tokens"] == pytest.approx(emitted / len(rounds))
    # Counting every accepted draft + 1 would claim more than was appended.
    assert sum(t.accepted + 1 for t in rounds) > emitted
    assert summary["tokens_generated"] == 4 + MAX_NEW
    for side, key in (("candidate", "latency_ms_per_token"),
                      ("baseline", "baseline_latency_ms_per_token")):
        gens = [getattr(r, side) for r in result.runs]
        assert summary[key] == pytest.approx(
            1000 * sum(g.decode_s for g in gens) / (3 + MAX_NEW - 1))
    assert summary["lossless"] is True


# ------------------------------------------------------------------ lossless: false
def test_a_broken_verifier_makes_lossless_false_and_names_the_prompt(target, draft,
                                                                       monkeypatch):
    """A greedy verifier that accepts one draft token past the first mismatch, active
    only while p1 is measured: the summary says lossless false and names p1 alone."""
    good = decoder_module.greedy_verify
    broken = {"on": False, "corrupted": 0}

    def accept_one_too_many(draft_tokens: torch.Tensor, target_logits: torch.Tensor):
        n, nxt = good(draft_tokens, target_logits)
        k = draft_tokens.shape[1]
        if broken["on"] and int(n[0]) < k:
            broken["corrupted"] += 1
            n = n + 1                         # a rejected token taken as accepted
            nxt = target_logits.argmax(dim=-1).gather(1, n[:, None]).squeeze(1)
        return n, nxt

    monkeypatch.setattr(decoder_module, "greedy_verify", accept_one_too_many)

    def switch(index: int, run: Any, so_far: Any) -> None:
        broken["on"] = index == 0            # after p0: on for p1; after p1: off again

    config = DecodeConfig(method="draft_model", k=3)
    summary = measure(target, config, PROMPTS, MAX_NEW, draft=draft, on_prompt=switch).summary()
    assert broken["corrupted"] > 0
    assert summary["lossless"] is False
    assert summary["mismatched_prompts"] == ["p1"]

    # Control: the real verifier on the same runs is lossless.
    monkeypatch.setattr(decoder_module, "greedy_verify", good)
    summary = measure(target, config, PROMPTS, MAX_NEW, draft=draft).summary()
    assert summary["lossless"] is True and summary["mismatched_prompts"] == []


# ------------------------------------------------------------------ sampling, draft, top-p
def test_draft_model_with_top_p_measures_under_sampling(target, draft):
    config = DecodeConfig(method="draft_model", k=3, temperature=0.8, top_p=0.9)
    summary = measure(target, config, PROMPTS, MAX_NEW, draft=draft).summary()
    assert summary["lossless"] is None and summary["mismatched_prompts"] == []
    # Three prompts: no interval (paired.MIN_INTERVAL_PROMPTS).
    assert summary["speedup"] > 0 and summary["speedup_ci90"] is None
    assert summary["tokens_generated"] == len(PROMPTS) * MAX_NEW
    assert summary["rounds"] > 0 and summary["acceptance_rate"] is not None
    assert set(summary["by_category"]) == {"code", "chat"}


# The distribution check: as tests/test_sampling_e2e.py does for the drafters over the
# target's own layers, here for a separate draft model with top-p filtering both models.
V = 6
DIST_PROMPT = list(range(V)) + [0]
TOP_P = 0.8         # V=6: the nucleus drops 1-4 tokens per row
DIST_N = 1000


def _peaked(seed: int, layers: int) -> torch.nn.Module:
    model = llama_model(seed=seed, layers=layers, vocab=V, scale=3.0)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    return model


def _nucleus(p: torch.Tensor, top_p: float) -> torch.Tensor:
    """Top-p filtering written apart from the decoder's: keep the most likely tokens
    until their mass reaches top_p, renormalise. p: [..., V]."""
    ordered, order = p.sort(dim=-1, descending=True)
    ordered = ordered.masked_fill(ordered.cumsum(dim=-1) - ordered >= top_p, 0.0)
    kept = torch.zeros_like(p).scatter(-1, order, ordered)
    return kept / kept.sum(dim=-1, keepdim=True)


@torch.no_grad()
def _tables(hf_model: torch.nn.Module, top_p: float):
    """p1 [V], p2 [V, V] = p(t2 | t1), p3 [V, V, V] = p(t3 | t1, t2), after top-p."""
    p1 = torch.softmax(hf_model(torch.tensor([DIST_PROMPT])).logits[0, -1].double(), -1)
    pairs = torch.tensor([DIST_PROMPT + [a, b] for a in range(V) for b in range(V)])
    logits = hf_model(pairs).logits.double()
    p2 = torch.softmax(logits[::V, -2], -1)
    p3 = torch.softmax(logits[:, -1], -1).reshape(V, V, V)
    return _nucleus(p1, top_p), _nucleus(p2, top_p), _nucleus(p3, top_p)


def _law(p1: torch.Tensor, p2: torch.Tensor, p3: torch.Tensor) -> torch.Tensor:
    """Joint law [V, V] of (token 2, token 3), token 1 marginalised out."""
    return (p1[:, None, None] * p2[:, :, None] * p3).sum(0)


def _tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a - b).abs().sum())


def _null_bound(law: torch.Tensor, n: int, quantile: float = 0.999) -> float:
    """The 99.9% quantile of TV(law, empirical law of n exact draws), simulated, seeded."""
    flat = law.flatten().float()
    reps = 4000
    draws = torch.multinomial(flat.expand(reps, -1).contiguous(), n, replacement=True,
                              generator=torch.Generator().manual_seed(12345))
    counts = torch.zeros(reps, flat.numel()).scatter_add_(1, draws, torch.ones(reps, n))
    return float((0.5 * (counts / n - flat).abs().sum(-1)).quantile(quantile))


def test_draft_model_with_top_p_keeps_the_targets_top_p_distribution():
    """With max_new_tokens 3, round 1 drafts exactly one token with the draft model
    (token 2) and the target then draws token 3, so the law of (token 2, token 3) over
    seeded runs must be the target's own top-p law. The bound is the 99.9% quantile of
    the TV distance of DIST_N exact draws; two plausible wrong laws lie well past it (a
    verifier that takes every draft, a target that ignores top-p), so it has power."""
    target_hf, draft_hf = _peaked(seed=3, layers=4), _peaked(seed=5, layers=2)
    p1, p2, p3 = _tables(target_hf, TOP_P)
    law = _law(p1, p2, p3)
    bound = _null_bound(law, DIST_N)
    _, q2, _ = _tables(draft_hf, TOP_P)
    assert _tv(law, _law(p1, q2, p3)) > 2 * bound            # drafts waved through
    assert _tv(law, _law(*_tables(target_hf, 1.0))) > 2 * bound   # top-p ignored
    assert bool((law == 0).any())                            # top-p rules tokens out

    target, draft = tiny_loaded(target_hf, "target"), tiny_loaded(draft_hf, "draft")
    decoder = SpeculativeDecoder(
        target, DecodeConfig(method="draft_model", k=3, temperature=1.0, top_p=TOP_P), draft)
    counts = torch.zeros(V, V, dtype=torch.float64)
    accepted = 0
    for i in range(DIST_N):
        gen = decoder.generate(DIST_PROMPT, 3, time.perf_counter,
                               torch.Generator().manual_seed(i))
        first = gen.rounds[0]
        assert first.drafted == 1 and first.verified == 2
        accepted += first.accepted
        counts[gen.tokens[1], gen.tokens[2]] += 1
    assert 0.05 * DIST_N < accepted < 0.95 * DIST_N          # both verifier outcomes
    empirical = counts / DIST_N
    assert float(empirical[law == 0].sum()) == 0.0            # nothing outside the nucleus
    tv = _tv(law, empirical)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f} (N={DIST_N})"


# ------------------------------------------------------------------ peak memory
def test_peak_memory_charges_the_draft_only_to_methods_that_use_it(target, draft):
    arms = {"ngram": DecodeConfig(method="ngram", k=3),
            "layer_skip": DecodeConfig(method="layer_skip", attn_skip=(1,), k=3),
            "draft_model": DecodeConfig(method="draft_model", k=3)}
    results = measure_arms(target, arms, PROMPTS[:2], MAX_NEW, draft=draft)
    own, extra = target.forward.nbytes(), draft.forward.nbytes()
    assert extra > 0
    expected = {"ngram": own, "layer_skip": own, "draft_model": own + extra}
    for name, result in results.items():
        assert result.memory_kind == "weights_plus_kv_cache"
        assert result.weights_bytes == expected[name], name
        # CPU: the weights read plus the largest caches one candidate run allocated.
        caches = max(r.candidate.cache_bytes for r in result.runs)
        assert result.peak_memory_bytes == expected[name] + caches, name
        assert result.summary()["peak_memory_mb"] == pytest.approx(
            (expected[name] + caches) / 2**20)
    # draft_model's runs hold the draft's cache too.
    assert (max(r.candidate.cache_bytes for r in results["draft_model"].runs)
            > max(r.candidate.cache_bytes for r in results["ngram"].runs))


# ------------------------------------------------------------------ repeats
def test_repeats_are_pooled_per_prompt(target):
    repeats = 3
    arms = {"ngram": DecodeConfig(method="ngram", k=3, temperature=1.0)}
    result = measure_arms(target, arms, PROMPTS, MAX_NEW, repeats=repeats, seed=4)["ngram"]
    summary = result.summary()
    assert summary["runs"] == len(result.runs) == len(PROMPTS) * repeats
    assert summary["prompts"] == len(PROMPTS)
    assert summary["tokens_generated"] == len(PROMPTS) * repeats * MAX_NEW
    assert [r.prompt_id for r in result.runs] == [p.prompt_id for p in PROMPTS] * repeats
    # Each repeat draws afresh (its own seed): sampled outputs differ between repeats.
    p0 = [r.candidate.tokens for r in result.runs if r.prompt_id == "p0"]
    assert len({tuple(t) for t in p0}) > 1
    # The statistic pools the repeats: the ratio of the summed times and tokens.
    base_s = sum(r.baseline.decode_s for r in result.runs)
    base_t = sum(len(r.baseline.tokens) - 1 for r in result.runs)
    cand_s = sum(r.candidate.decode_s for r in result.runs)
    cand_t = sum(len(r.candidate.tokens) - 1 for r in result.runs)
    assert summary["speedup"] == pytest.approx((base_s / base_t) / (cand_s / cand_t))
    # Three prompts, nine runs: the repeats are not prompts, so still no interval.
    assert paired.interval([r.pair() for r in result.runs]) is None
    assert summary["speedup_ci90"] is None
    assert {c: v["prompts"] for c, v in summary["by_category"].items()} == {"code": 2, "chat": 1}


# ------------------------------------------------------------------ shared prefills
SHARED_ARMS = {"ngram": DecodeConfig(method="ngram", k=3),
               "skip": DecodeConfig(method="layer_skip", k=3, attn_skip=[1], mlp_skip=[2]),
               "tree": DecodeConfig(method="layer_skip", k=3, attn_skip=[1], tree_width=2,
                                    tree_depth=2, tree_tokens=4)}


def _trace(generation: Any) -> tuple[Any, ...]:
    return (tuple(generation.tokens),
            tuple((t.drafted, t.accepted, t.emitted, t.verified) for t in generation.rounds))


def test_a_shared_prefill_decodes_exactly_as_its_own(target):
    """A decoder that copies another's prefill of the prompt (`PrefillMemo`) emits the
    same tokens in the same rounds as one that runs the pass itself; the pass runs once
    per prompt, whatever the number of decoders."""
    memo = PrefillMemo()
    for prompt in PROMPTS:
        ids = _ids(target, prompt)
        for config in [DecodeConfig(), *SHARED_ARMS.values()]:
            own = SpeculativeDecoder(target, config).generate(ids, MAX_NEW, time.perf_counter)
            shared = SpeculativeDecoder(target, config)
            shared.share_prefills(memo)
            copied = shared.generate(ids, MAX_NEW, time.perf_counter)
            assert _trace(copied) == _trace(own)
    assert memo.hits == len(PROMPTS) * len(SHARED_ARMS)


def test_measure_arms_prefills_each_prompt_once(target, monkeypatch):
    """Timed runs share the target's prefill of their prompt: one pass per prompt and
    repeat (the warm-up keeps its own), outputs as without sharing."""
    passes: list[int] = []
    forward = target.forward.forward

    def counted(ids: torch.Tensor, cache: Any, *args: Any, last_only: bool = False,
                **kwargs: Any) -> torch.Tensor:
        if cache.length == 0:            # a prefill: the pass over the whole prompt
            passes.append(ids.shape[1])
        return forward(ids, cache, *args, last_only=last_only, **kwargs)

    monkeypatch.setattr(target.forward, "forward", counted)
    results = measure_arms(target, SHARED_ARMS, PROMPTS, MAX_NEW, repeats=2)
    # The warm-up prefills prompt 0 once for its four runners; the timed runs start
    # from a fresh memo: one pass per prompt and repeat.
    assert len(passes) == 1 + len(PROMPTS) * 2
    for name, config in SHARED_ARMS.items():
        for run in results[name].runs:
            prompt = next(p for p in PROMPTS if p.prompt_id == run.prompt_id)
            own = SpeculativeDecoder(target, config).generate(_ids(target, prompt), MAX_NEW,
                                                              time.perf_counter)
            assert _trace(run.candidate) == _trace(own)
            assert run.candidate.prefill_s > 0


def test_a_searchs_prefill_memo_times_each_prompt_once_across_measurements(target,
                                                                            monkeypatch):
    """Measurements given one memo that holds every prompt (a search's trials) run each
    prompt's prefill once: a later measurement copies them (its warm-up keeps its own
    pass), decodes as without the memo, and reports the pass's own time; a memo of one
    prompt keeps only the latest, so the next measurement runs them all again."""
    passes: list[int] = []
    forward = target.forward.forward
    clock = _FakeClock()
    monkeypatch.setattr(measure_module, "Clock", lambda device: clock)

    def counted(ids: torch.Tensor, cache: Any, *args: Any, last_only: bool = False,
                **kwargs: Any) -> torch.Tensor:
        if cache.length == 0:            # a prefill, made PREFILL_S virtual seconds slow
            passes.append(ids.shape[1])
            clock.wait(PREFILL_S)
        return forward(ids, cache, *args, last_only=last_only, **kwargs)

    monkeypatch.setattr(target.forward, "forward", counted)
    arms = {"a": DecodeConfig(method="ngram", k=3)}
    memo = PrefillMemo(capacity=len(PROMPTS))
    first = measure_arms(target, arms, PROMPTS, MAX_NEW, prefills=memo)["a"]
    assert len(passes) == 1 + len(PROMPTS)
    again = measure_arms(target, {"b": DecodeConfig(method="ngram", k=2)}, PROMPTS, MAX_NEW,
                         prefills=memo)["b"]
    assert len(passes) == 2 + len(PROMPTS)             # its warm-up's pass only
    for before, after in zip(first.runs, again.runs):
        # Copied, not run: still the pass's own (virtual) time, as the first measured it.
        assert PREFILL_S <= before.candidate.prefill_s < PREFILL_S + 1
        assert PREFILL_S <= after.candidate.prefill_s < PREFILL_S + 1
        own = SpeculativeDecoder(target, DecodeConfig(method="ngram", k=2)).generate(
            _ids(target, next(p for p in PROMPTS if p.prompt_id == after.prompt_id)),
            MAX_NEW, time.perf_counter)
        assert _trace(after.candidate) == _trace(own)
    passes.clear()
    latest_only = PrefillMemo(capacity=1)
    for _ in range(2):
        measure_arms(target, arms, PROMPTS, MAX_NEW, prefills=latest_only)
    assert len(passes) == 2 * (1 + len(PROMPTS))


def test_greedy_baseline_outputs_are_kept_as_later_histories(target):
    """Greedy, the baseline's timed output of a prompt is what a later call's warm history
    would decode untimed: `responses` keeps it, so that history costs no decode."""
    responses: dict[str, list[int]] = {}
    first = measure_arms(target, {"a": DecodeConfig(method="ngram", k=3)}, PROMPTS[:2],
                         MAX_NEW, responses=responses)["a"]
    assert responses == {r.prompt_id: r.baseline.tokens for r in first.runs}
    sampled: dict[str, list[int]] = {}
    measure_arms(target, {"a": DecodeConfig(method="ngram", k=3, temperature=1.0)},
                 PROMPTS[:1], MAX_NEW, responses=sampled)
    assert sampled == {}          # a sampled output is one draw, not the history's
