"""End to end: speculative sampling through SpeculativeDecoder keeps the target's
distribution (DESIGN principle 10), checked against the exact distribution of a tiny
model enumerated with HF's own forward.

Set-up: vocabulary of 6, no EOS, prompt 0 1 .. 5 0, max_new_tokens=3, temperature 1.
Token 1 comes from the prefill (no draft). Round 1 then drafts exactly one token
(limit = min(k, budget - 1) = 1) for position 2 and emits the accepted draft plus the
bonus (positions 2, 3) or the residual draw (position 2) followed by a plain target step
(position 3). So positions 2 and 3 are the tokens produced after drafting, and the
test compares the empirical joint law of (token 2, token 3) over N seeded runs with the
exact one (36 outcomes) by total variation.

The bound is the 99.9% quantile of the TV distance between the exact law and the
empirical law of N exact draws (simulated, seeded): a correct sampler passes, and each
test also checks that a broken verifier that accepted every draft would exceed the bound
(so the check has power), and that runs saw both accepted and rejected drafts.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter

import pytest
import torch
from tiny import llama_model, one_thread, tiny_loaded  # noqa: F401  (autouse fixture)

from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.methods.ngram.drafter import lookup

V = 6
PROMPT = list(range(V)) + [0]   # every token occurs with a continuation: ngram always drafts
N = 1000                        # seeded runs per method
MAX_NEW = 3


@pytest.fixture(scope="module")
def target():
    # Random init gives nearly uniform distributions, under which every draft looks like
    # the target; larger weights make the layers matter and the head peaked.
    model = llama_model(seed=3, layers=4, vocab=V, scale=3.0)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    return tiny_loaded(model)


@torch.no_grad()
def _target_tables(hf_model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """p1 [V], p2 [V, V] = p(t2 | t1), p3 [V, V, V] = p(t3 | t1, t2) from HF's forward."""
    p1 = torch.softmax(hf_model(torch.tensor([PROMPT])).logits[0, -1].double(), -1)
    pairs = torch.tensor([PROMPT + [a, b] for a in range(V) for b in range(V)])
    logits = hf_model(pairs).logits.double()
    p2 = torch.softmax(logits[::V, -2], -1)                      # rows a, any b
    p3 = torch.softmax(logits[:, -1], -1).reshape(V, V, V)
    return p1, p2, p3


def _law_of_positions_2_3(p1: torch.Tensor, p2_given_1: torch.Tensor,
                          p3: torch.Tensor) -> torch.Tensor:
    """Joint law [V, V] of (token 2, token 3), token 1 marginalised out."""
    return (p1[:, None, None] * p2_given_1[:, :, None] * p3).sum(0)


def _tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a - b).abs().sum())


def _null_bound(law: torch.Tensor, n: int, quantile: float = 0.999) -> float:
    """Quantile of TV(law, empirical law of n exact draws), simulated with a fixed seed."""
    flat = law.flatten().float()
    gen = torch.Generator().manual_seed(12345)
    reps = 4000
    draws = torch.multinomial(flat.expand(reps, -1).contiguous(), n, replacement=True,
                              generator=gen)
    counts = torch.zeros(reps, flat.numel()).scatter_add_(1, draws, torch.ones(reps, n))
    tvs = 0.5 * (counts / n - flat).abs().sum(-1)
    return float(tvs.quantile(quantile))


@torch.no_grad()
def _prefilled(forward):
    cache = forward.new_cache(1, 32)
    forward.forward(torch.tensor([PROMPT]), cache)
    return cache


@torch.no_grad()
def _draft_q_layer_skip(target, attn_skip, mlp_skip) -> torch.Tensor:
    """q(t2 | t1) [V, V] of the layer-skip draft: full-model prefix, skipped pending token."""
    rows = []
    for a in range(V):
        cache = _prefilled(target.forward)
        logits = target.forward.forward(torch.tensor([[a]]), cache, attn_skip=set(attn_skip),
                                        mlp_skip=set(mlp_skip))
        rows.append(torch.softmax(logits[0, -1].double(), -1))
    return torch.stack(rows)


@torch.no_grad()
def _draft_q_sorted_exit(target, exits, threshold) -> torch.Tensor:
    """q(t2 | t1) [V, V] of S2D with two exits: the shallow exit when confident enough."""
    fw, rows = target.forward, []
    for a in range(V):
        cache = _prefilled(fw)
        step = fw.begin(torch.tensor([[a]]), cache)
        fw.run_layers(step, 0, exits[0])
        q = torch.softmax(fw.logits(step)[0, -1].double(), -1)
        if q.max() < threshold:
            fw.run_layers(step, exits[0], exits[1])
            q = torch.softmax(fw.logits(step)[0, -1].double(), -1)
        rows.append(q)
    return torch.stack(rows)


def _draft_q_ngram() -> torch.Tensor:
    """q(t2 | t1) [V, V] of prompt lookup: one-hot on the looked-up continuation."""
    q = torch.zeros(V, V, dtype=torch.float64)
    for a in range(V):
        found = lookup(PROMPT + [a], 1, 3, 1)
        assert found, "the prompt is built so that lookup always finds a continuation"
        q[a, found[0]] = 1.0
    return q


def _run(target, config: DecodeConfig, n: int = N, draft=None):
    decoder = SpeculativeDecoder(target, config, draft)
    counts = torch.zeros(V, V, dtype=torch.float64)
    first_rounds = []
    for i in range(n):
        gen = decoder.generate(PROMPT, MAX_NEW, time.perf_counter,
                               torch.Generator().manual_seed(i))
        assert len(gen.tokens) == MAX_NEW
        counts[gen.tokens[1], gen.tokens[2]] += 1
        first_rounds.append(gen.rounds[0] if gen.rounds else None)
    return counts / n, first_rounds


CONFIGS = {
    "layer_skip": DecodeConfig(method="layer_skip", attn_skip=(1,), mlp_skip=(2,), k=3,
                               temperature=1.0),
    "ngram": DecodeConfig(method="ngram", k=3, temperature=1.0),
    "sorted_exit": DecodeConfig(method="sorted_exit", exits=(1, 3), thresholds=(0.3,), k=3,
                                temperature=1.0),
    # Engine rules (`search --target`): vLLM drafts the argmax (a one-hot q); TensorRT-LLM
    # drafts the argmax and accepts a draft only where it equals the target's own sample.
    "sorted_exit@vllm": DecodeConfig(method="sorted_exit", exits=(1, 3), thresholds=(0.3,),
                                     k=3, temperature=1.0, engine="vllm"),
    "layer_skip@trtllm": DecodeConfig(method="layer_skip", attn_skip=(1,), mlp_skip=(2,), k=3,
                                      temperature=1.0, engine="trtllm"),
    "ngram@trtllm": DecodeConfig(method="ngram", k=3, temperature=1.0, engine="trtllm"),
}
# The engines whose model drafters propose their argmax under sampling.
GREEDY_DRAFTS = {"vllm", "sglang", "trtllm"}


@pytest.fixture(scope="module")
def exact(target):
    """(p1, p2, p3, exact law of tokens 2-3, TV bound for N runs)."""
    p1, p2, p3 = _target_tables(target.hf_model)
    law = _law_of_positions_2_3(p1, p2, p3)
    return p1, p2, p3, law, _null_bound(law, N)


@pytest.mark.parametrize("method", list(CONFIGS))
def test_speculative_sampling_matches_target_distribution(target, exact, method):
    config = CONFIGS[method]
    p1, p2, p3, law, bound = exact

    if config.method == "layer_skip":
        q2 = _draft_q_layer_skip(target, config.attn_skip, config.mlp_skip)
    elif config.method == "sorted_exit":
        q2 = _draft_q_sorted_exit(target, config.exits, config.thresholds[0])
    else:
        q2 = _draft_q_ngram()
    if config.engine in GREEDY_DRAFTS and config.method != "ngram":
        q2 = torch.nn.functional.one_hot(q2.argmax(dim=-1), V).to(q2.dtype)
    # Power: a verifier that waved every draft through (token 2 drawn from the draft's
    # q, token 3 from the target) would fail this test.
    assert _tv(law, _law_of_positions_2_3(p1, q2, p3)) > 2 * bound

    empirical, first_rounds = _run(target, config)

    # Drafting really happened for position 2, and both outcomes of the verifier occurred.
    assert all(r is not None and r.drafted == 1 and r.verified == 2 for r in first_rounds)
    accepted = sum(r.accepted for r in first_rounds)
    assert 0.05 * N < accepted < 0.95 * N
    if config.method == "sorted_exit":
        layers = Counter(r.exit_layers[0] for r in first_rounds)
        assert set(layers) == {1, 3}, layers

    tv = _tv(law, empirical)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f} (N={N})"


def test_sampling_round_without_draft_does_not_crash(target):
    """A round that drafts nothing under sampling (budget left for one token only, or a
    drafter with nothing to propose) must fall back to a plain target sample."""
    config = CONFIGS["layer_skip"]
    gen = SpeculativeDecoder(target, config).generate(
        PROMPT, 2, time.perf_counter, torch.Generator().manual_seed(0))
    assert len(gen.tokens) == 2
    assert [r.drafted for r in gen.rounds] == [0]


def test_autoregressive_sampling_matches_target_distribution(target, exact):
    """The AR baseline (`none`) under sampling: every round has an empty draft."""
    _, _, _, law, bound = exact
    empirical, first_rounds = _run(target, DecodeConfig(temperature=1.0), n=N)
    assert all(r.drafted == 0 for r in first_rounds)
    assert _tv(law, empirical) < bound


# ------------------------------------------------------------------ draft trees
TREE_N = 3000
TREE_CONFIGS = {
    # Round 1 has a budget of 3 tokens, so a tree of depth 2: root -> 2 children, each
    # with 2 children (after the rerank, 5 of the 6 nodes are kept), verified in one pass.
    "layer_skip_dynamic": DecodeConfig(method="layer_skip", attn_skip=(1,), mlp_skip=(2,),
                                       tree_width=2, tree_depth=2, tree_tokens=5,
                                       temperature=1.0),
    "sorted_exit_static": DecodeConfig(method="sorted_exit", exits=(1, 3), thresholds=(0.3,),
                                       tree_choices=((0,), (1,), (2,), (0, 0), (0, 1), (1, 0)),
                                       temperature=1.0),
}


@torch.no_grad()
def _law_of_positions_2_3_4(hf_model) -> torch.Tensor:
    """Exact joint law [V, V, V] of tokens 2, 3, 4 (token 1 marginalised out)."""
    p1 = torch.softmax(hf_model(torch.tensor([PROMPT])).logits[0, -1].double(), -1)
    seqs = torch.tensor([PROMPT + list(t) for t in itertools.product(range(V), repeat=3)])
    logits = hf_model(seqs).logits.double()
    # Row (a, b, c): p(. | a) at -3, p(. | a, b) at -2, p(. | a, b, c) at -1.
    p2 = torch.softmax(logits[:, -3], -1).reshape(V, V, V, V)[:, 0, 0]          # [a, b]
    p3 = torch.softmax(logits[:, -2], -1).reshape(V, V, V, V)[:, :, 0]          # [a, b, c]
    p4 = torch.softmax(logits[:, -1], -1).reshape(V, V, V, V)                   # [a, b, c, d]
    return (p1[:, None, None, None] * p2[:, :, None, None] * p3[:, :, :, None] * p4).sum(0)


@pytest.mark.parametrize("name", list(TREE_CONFIGS))
def test_tree_sampling_matches_target_distribution(target, name):
    """Multi-candidate rejection sampling along a tree keeps the target's law of the
    three tokens one tree round produces."""
    law = _law_of_positions_2_3_4(target.hf_model)
    bound = _null_bound(law, TREE_N)
    decoder = SpeculativeDecoder(target, TREE_CONFIGS[name])
    counts = torch.zeros(V, V, V, dtype=torch.float64)
    accepted = Counter()
    for i in range(TREE_N):
        gen = decoder.generate(PROMPT, 4, time.perf_counter, torch.Generator().manual_seed(i))
        assert len(gen.tokens) == 4
        counts[gen.tokens[1], gen.tokens[2], gen.tokens[3]] += 1
        first = gen.rounds[0]
        assert first.draft_depth == 2 and first.verified == first.drafted + 1
        accepted[first.accepted] += 1
    # Every outcome of the walk happened: nothing, one level, both levels accepted.
    assert all(accepted[n] > 0.02 * TREE_N for n in (0, 1, 2)), accepted
    tv = _tv(law, counts / TREE_N)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f} (N={TREE_N})"


def test_tree_sampling_check_catches_a_residual_bug(target, monkeypatch):
    """Power: the same check fails for a plausible bug, a rule that draws from p
    instead of the residual after the candidates were rejected."""
    from autotune.decoding import verify

    def buggy(p, candidates, q=None):
        accept, _ = candidate_acceptance(p, candidates, q)
        return accept, p

    candidate_acceptance = verify.candidate_acceptance
    monkeypatch.setattr(verify, "candidate_acceptance", buggy)
    law = _law_of_positions_2_3_4(target.hf_model)
    decoder = SpeculativeDecoder(target, TREE_CONFIGS["layer_skip_dynamic"])
    counts = torch.zeros(V, V, V, dtype=torch.float64)
    for i in range(TREE_N):
        gen = decoder.generate(PROMPT, 4, time.perf_counter, torch.Generator().manual_seed(i))
        counts[gen.tokens[1], gen.tokens[2], gen.tokens[3]] += 1
    assert _tv(law, counts / TREE_N) > _null_bound(law, TREE_N)


# ------------------------------------------------------------------ block verification
# Round 1 has a budget of 3 tokens, so a chain of 2 drafts: where block verification
# differs from token-by-token verification (with one draft they are the same rule).
BLOCK_N = 1500                  # seeded runs per config (the bound is set for this N)
BLOCK_CONFIGS = {
    "layer_skip": DecodeConfig(method="layer_skip", attn_skip=(1,), mlp_skip=(2,), k=2,
                               temperature=1.0, verify="block"),
    # vLLM's rules: argmax drafts, a one-hot q (vLLM's closed form for one-hot drafts).
    "sorted_exit@vllm": DecodeConfig(method="sorted_exit", exits=(1, 3), thresholds=(0.3,),
                                     k=2, temperature=1.0, engine="vllm", verify="block"),
    # SGLang's rules: block verification makes its drafter sample (with probabilities).
    "layer_skip@sglang": DecodeConfig(method="layer_skip", attn_skip=(1,), mlp_skip=(2,),
                                      k=2, temperature=1.0, engine="sglang", verify="block"),
}


@pytest.mark.parametrize("name", list(BLOCK_CONFIGS))
def test_block_verification_matches_target_distribution(target, name):
    """Block verification keeps the target's law of the three tokens a round of two
    drafts produces (the power of this check: test_tree_sampling_check_catches_...;
    the rule's own power check: tests/test_verify.py)."""
    law = _law_of_positions_2_3_4(target.hf_model)
    bound = _null_bound(law, BLOCK_N)
    decoder = SpeculativeDecoder(target, BLOCK_CONFIGS[name])
    counts = torch.zeros(V, V, V, dtype=torch.float64)
    accepted = Counter()
    for i in range(BLOCK_N):
        gen = decoder.generate(PROMPT, 4, time.perf_counter, torch.Generator().manual_seed(i))
        assert len(gen.tokens) == 4
        counts[gen.tokens[1], gen.tokens[2], gen.tokens[3]] += 1
        first = gen.rounds[0]
        assert first.drafted == 2 and first.verified == 3
        accepted[first.accepted] += 1
    assert all(accepted[n] > 0.02 * BLOCK_N for n in (0, 1, 2)), accepted
    tv = _tv(law, counts / BLOCK_N)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f} (N={BLOCK_N})"
