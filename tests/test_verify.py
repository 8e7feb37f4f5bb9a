"""The shared verifier (greedy matching, Leviathan rejection sampling) and probabilities()."""

from __future__ import annotations

import pytest
import torch

from autotune.decoding.sampling import probabilities
from autotune.decoding.verify import (
    acceptance_probability,
    greedy_verify,
    rejection_sample,
    residual_distribution,
)

V = 7


def _logits_with_argmax(argmaxes: list[list[int]], vocab: int = V) -> torch.Tensor:
    """[B, T, V] logits whose row argmaxes are `argmaxes` (noise elsewhere)."""
    gen = torch.Generator().manual_seed(0)
    b, t = len(argmaxes), len(argmaxes[0])
    logits = torch.rand(b, t, vocab, generator=gen)
    for i, row in enumerate(argmaxes):
        for j, tok in enumerate(row):
            logits[i, j, tok] = 5.0
    return logits


# ------------------------------------------------------------------ greedy

def test_greedy_all_accepted_gives_bonus():
    logits = _logits_with_argmax([[3, 1, 4, 6]])
    n, nxt = greedy_verify(torch.tensor([[3, 1, 4]]), logits)
    assert n.tolist() == [3] and nxt.tolist() == [6]


def test_greedy_first_rejected():
    logits = _logits_with_argmax([[3, 1, 4, 6]])
    n, nxt = greedy_verify(torch.tensor([[2, 1, 4]]), logits)
    assert n.tolist() == [0] and nxt.tolist() == [3]


def test_greedy_stops_at_first_mismatch_even_if_later_ones_match():
    logits = _logits_with_argmax([[3, 1, 4, 6]])
    n, nxt = greedy_verify(torch.tensor([[3, 0, 4]]), logits)
    assert n.tolist() == [1] and nxt.tolist() == [1]


def test_greedy_k0():
    logits = _logits_with_argmax([[5]])
    n, nxt = greedy_verify(torch.zeros(1, 0, dtype=torch.long), logits)
    assert n.tolist() == [0] and nxt.tolist() == [5]


def test_greedy_batch_rows_independent():
    logits = _logits_with_argmax([[3, 1, 4], [0, 2, 2]])
    n, nxt = greedy_verify(torch.tensor([[3, 1], [0, 5]]), logits)
    assert n.tolist() == [2, 1] and nxt.tolist() == [4, 2]


# ------------------------------------------------------------------ exactness

def _random_pair(seed: int, case: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    p = torch.rand(V, generator=gen, dtype=torch.float64) ** 3
    q = torch.rand(V, generator=gen, dtype=torch.float64) ** 3
    if case == "q_zeros":            # the draft never proposes tokens the target likes
        q[[0, 2, 5]] = 0.0
    elif case == "p_zeros":          # the target rules out tokens the draft proposes
        p[[1, 3]] = 0.0
    elif case == "both_zeros":
        q[[0, 4]] = 0.0
        p[[4, 6]] = 0.0
    elif case == "q_one_hot":        # prompt lookup's deterministic draft
        q = torch.zeros(V, dtype=torch.float64)
        q[seed % V] = 1.0
    elif case == "equal":
        q = p.clone()
    return p / p.sum(), q / q.sum()


def _emit_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """P(first emitted = x) = q(x) a(x) + (1 - sum_y q(y) a(y)) residual(x)."""
    x = torch.arange(V)[None, :]                                        # [1, V]
    a = acceptance_probability(p.expand(1, V, V), q.expand(1, V, V), x)[0]   # [V]
    accept = q * a
    return accept + (1.0 - accept.sum()) * residual_distribution(p, q)


@pytest.mark.parametrize("case", ["plain", "q_zeros", "p_zeros", "both_zeros", "q_one_hot",
                                  "equal"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_rejection_sampling_law_is_exactly_p(seed, case, dtype):
    p, q = (t.to(dtype) for t in _random_pair(seed, case))
    law = _emit_law(p, q)
    assert torch.allclose(law, p, atol=1e-6, rtol=0), (law - p).abs().max()


def test_acceptance_probability_values():
    p = torch.tensor([[[0.5, 0.3, 0.2, 0.0]]])
    q = torch.tensor([[[0.25, 0.6, 0.0, 0.15]]])
    got = [acceptance_probability(p, q, torch.tensor([[x]])).item() for x in range(4)]
    assert got == pytest.approx([1.0, 0.5, 1.0, 0.0])


def test_residual_distribution_values():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.25, 0.6, 0.0, 0.15])
    assert residual_distribution(p, q).tolist() == pytest.approx([0.25 / 0.45, 0.0, 0.2 / 0.45, 0.0])
    # nothing left (p == q): falls back to p, still a distribution
    assert residual_distribution(p, p).tolist() == pytest.approx(p.tolist())


# ------------------------------------------------------------------ rejection_sample itself

B = 20000


def _tv(counts: torch.Tensor, p: torch.Tensor) -> float:
    return 0.5 * float((counts.double() / counts.sum() - p.double()).abs().sum())


def _dist(seed: int) -> torch.Tensor:
    d = torch.rand(V, generator=torch.Generator().manual_seed(seed)) ** 2
    return d / d.sum()


def test_rejection_sample_k1_first_token_follows_p():
    p, q = _dist(10), _dist(11)
    q[2] = 0.0
    q = q / q.sum()
    gen = torch.Generator().manual_seed(0)
    x = torch.multinomial(q.expand(B, V), 1, replacement=True, generator=gen)   # [B, 1]
    pp = torch.stack((p, _dist(12))).expand(B, 2, V)
    n, nxt = rejection_sample(x, q.expand(B, 1, V), pp, gen)
    assert set(n.unique().tolist()) == {0, 1}
    first = torch.where(n >= 1, x[:, 0], nxt)
    assert _tv(torch.bincount(first, minlength=V), p) < 0.02
    # acceptance rate is sum_x min(p, q)
    assert (n == 1).double().mean().item() == pytest.approx(float(torch.minimum(p, q).sum()),
                                                             abs=0.015)
    # a draft-only emitter would be caught by the same bound
    assert _tv(torch.bincount(x[:, 0], minlength=V), p) > 0.05


def test_rejection_sample_k2_joint_behaviour():
    p1, p2, p3 = _dist(20), _dist(21), _dist(22)
    q1, q2 = _dist(23), _dist(24)
    gen = torch.Generator().manual_seed(1)
    x1 = torch.multinomial(q1.expand(B, V), 1, replacement=True, generator=gen)
    x2 = torch.multinomial(q2.expand(B, V), 1, replacement=True, generator=gen)
    x = torch.cat((x1, x2), dim=1)
    q = torch.stack((q1, q2)).expand(B, 2, V)
    p = torch.stack((p1, p2, p3)).expand(B, 3, V)
    n, nxt = rejection_sample(x, q, p, gen)

    beta1, beta2 = float(torch.minimum(p1, q1).sum()), float(torch.minimum(p2, q2).sum())
    freq = torch.bincount(n, minlength=3).double() / B
    assert freq.tolist() == pytest.approx([1 - beta1, beta1 * (1 - beta2), beta1 * beta2],
                                          abs=0.015)
    # first emitted token ~ p1
    first = torch.where(n >= 1, x[:, 0], nxt)
    assert _tv(torch.bincount(first, minlength=V), p1) < 0.02
    # second emitted token, given the first draft was accepted, ~ p2 (independent contexts)
    kept = n >= 1
    second = torch.where(n[kept] == 2, x[kept, 1], nxt[kept])
    assert _tv(torch.bincount(second, minlength=V), p2) < 0.025
    # bonus after all accepted ~ p3
    assert _tv(torch.bincount(nxt[n == 2], minlength=V), p3) < 0.03


def test_rejection_sample_k0_draws_from_p():
    p = _dist(30)
    gen = torch.Generator().manual_seed(2)
    n, nxt = rejection_sample(torch.zeros(B, 0, dtype=torch.long), torch.zeros(B, 0, V),
                              p.expand(B, 1, V), gen)
    assert n.eq(0).all()
    assert _tv(torch.bincount(nxt, minlength=V), p) < 0.02


def test_rejection_sample_never_emits_tokens_p_rules_out():
    p = torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
    q = torch.tensor([0.6, 0.1, 0.0, 0.3, 0.0, 0.0, 0.0])
    gen = torch.Generator().manual_seed(3)
    x = torch.multinomial(q.expand(2000, V), 1, replacement=True, generator=gen)
    n, nxt = rejection_sample(x, q.expand(2000, 1, V), torch.stack((p, p)).expand(2000, 2, V),
                              gen)
    first = torch.where(n >= 1, x[:, 0], nxt)
    assert set(first.tolist()) <= {1, 2}
    assert not (n.bool() & (x[:, 0] != 1)).any()     # only token 1 can be accepted


# ------------------------------------------------------------------ probabilities()

def test_probabilities_temperature():
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0]])
    assert torch.allclose(probabilities(logits, 1.0, 1.0), torch.softmax(logits, -1))
    assert torch.allclose(probabilities(logits, 0.5, 1.0), torch.softmax(logits * 2, -1))
    assert torch.allclose(probabilities(logits, 2.0, 1.0), torch.softmax(logits / 2, -1))
    # temperature 0 (greedy) is plain softmax here
    assert torch.allclose(probabilities(logits, 0.0, 1.0), torch.softmax(logits, -1))
    assert probabilities(logits.half(), 1.0, 1.0).dtype == torch.float32


def test_probabilities_top_p_keeps_smallest_set_reaching_top_p():
    # probabilities 0.05, 0.5, 0.15, 0.3 in scrambled order
    base = torch.tensor([0.05, 0.5, 0.15, 0.3])
    logits = base.log()[None, None, :].expand(2, 3, 4)          # extra batch dims
    def kept(top_p: float) -> set[int]:
        probs = probabilities(logits, 1.0, top_p)
        assert torch.allclose(probs.sum(-1), torch.ones(2, 3))
        assert (probs == probs[0, 0]).all()
        return {i for i in range(4) if probs[0, 0, i] > 0}

    assert kept(0.4) == {1}
    assert kept(0.75) == {1, 3}
    assert kept(0.9) == {1, 3, 2}
    assert kept(0.99) == {0, 1, 2, 3}
    assert kept(1.0) == {0, 1, 2, 3}
    probs = probabilities(logits, 1.0, 0.75)[0, 0]
    assert probs.tolist() == pytest.approx([0.0, 0.5 / 0.8, 0.0, 0.3 / 0.8], abs=1e-6)


def test_probabilities_temperature_applies_before_top_p():
    base = torch.tensor([0.6, 0.3, 0.1])
    logits = base.log()
    # at T=1, top_p=0.7 keeps two tokens; at T=0.25 the top token alone has > 0.7
    assert (probabilities(logits, 1.0, 0.7) > 0).sum() == 2
    sharp = probabilities(logits, 0.25, 0.7)
    assert sharp.tolist() == pytest.approx([1.0, 0.0, 0.0])


@pytest.mark.parametrize("scale", [0.3, 3.0, 10.0])      # flat (falls back to a full sort) .. peaked
@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.99])
def test_probabilities_top_p_on_a_large_vocabulary_equals_a_full_sort(scale, top_p):
    """The nucleus found among the most likely tokens is the one a sort of the whole
    vocabulary finds, whichever path probabilities() takes."""
    logits = torch.randn(3, 49152, generator=torch.Generator().manual_seed(7)) * scale
    full = torch.softmax(logits / 0.8, -1)
    sorted_probs, order = full.sort(dim=-1, descending=True)
    sorted_probs = sorted_probs.masked_fill(sorted_probs.cumsum(-1) - sorted_probs >= top_p, 0.0)
    expected = torch.zeros_like(full).scatter(-1, order, sorted_probs)
    expected /= expected.sum(-1, keepdim=True)
    got = probabilities(logits, 0.8, top_p)
    assert torch.equal(got > 0, expected > 0)
    assert torch.allclose(got, expected, atol=1e-7)
