"""The shared verifier (greedy matching, Leviathan rejection sampling) and probabilities()."""

from __future__ import annotations

import pytest
import torch

from autotune.decoding.sampling import probabilities
from autotune.decoding.verify import (
    acceptance_probability,
    block_verify,
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


# ------------------------------------------------------------------ block verification
# Three drafts over a vocabulary of 4, every distribution depending on the whole prefix
# (p_i(. | x_<i), q_i(. | x_<i)), so the test sees what block verification changes:
# a kept token whose acceptance depends on the tokens after it.
BV, BK, BN = 4, 3, 100_000


def _tables(seed: int, power: float) -> list[torch.Tensor]:
    """Distributions after every prefix of length 0..BK: tables [V]*i + [V]."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(BK + 1):
        t = torch.rand((BV,) * (i + 1), generator=gen, dtype=torch.float64) ** power
        out.append(t / t.sum(-1, keepdim=True))
    return out


def _after(table: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
    """Rows of `table` after each row of prefix [N, i]: [N, V]."""
    return table[tuple(prefix.T)] if prefix.shape[1] else table.expand(prefix.shape[0], BV)


def _block_run(rule, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BN seeded rounds of `rule` on drafts drawn from q: (n_accepted [N], the first
    BK+1 emitted tokens [N, BK+1], the output continued with target draws, exact law
    of BK+1 target tokens [V]*(BK+1))."""
    ptab, qtab = _tables(40, 3.0), _tables(41, 1.0)
    gen = torch.Generator().manual_seed(seed)
    x = torch.zeros(BN, 0, dtype=torch.long)
    for i in range(BK):
        x = torch.cat((x, torch.multinomial(_after(qtab[i], x), 1, generator=gen)), dim=1)
    p = torch.stack([_after(ptab[i], x[:, :i]) for i in range(BK + 1)], dim=1)
    q = torch.stack([_after(qtab[i], x[:, :i]) for i in range(BK)], dim=1)
    n, nxt = rule(x, q, p, gen)
    out = torch.zeros(BN, BK + 1, dtype=torch.long)
    for j in range(BK + 1):
        drawn = torch.multinomial(_after(ptab[j], out[:, :j]), 1, generator=gen).squeeze(1)
        out[:, j] = torch.where(j < n, x[:, j] if j < BK else drawn,
                                torch.where(j == n, nxt, drawn))
    law = ptab[0]
    for j in range(1, BK + 1):
        law = law[..., None] * ptab[j]
    return n, out, law


def _law_tv(out: torch.Tensor, law: torch.Tensor) -> float:
    flat = (out * BV ** torch.arange(BK, -1, -1)).sum(1)
    counts = torch.bincount(flat, minlength=BV ** (BK + 1)).double()
    return 0.5 * float((counts / BN - law.flatten()).abs().sum())


def _law_bound(law: torch.Tensor) -> float:
    """99% quantile of TV(law, empirical law of BN exact draws), seeded (100 draws of
    the null keep the test fast; the laws checked sit well inside or far outside it)."""
    gen = torch.Generator().manual_seed(7)
    flat, reps = law.flatten(), 100
    counts = torch.stack([torch.bincount(torch.multinomial(flat, BN, replacement=True,
                                                           generator=gen),
                                         minlength=flat.numel()) for _ in range(reps)])
    return float((0.5 * (counts.double() / BN - flat).abs().sum(-1)).quantile(0.99))


def test_block_verify_keeps_the_target_law_and_accepts_more():
    n_block, out, law = _block_run(block_verify)
    bound = _law_bound(law)
    assert set(n_block.unique().tolist()) == set(range(BK + 1))
    assert _law_tv(out, law) < bound
    # Theorem 2 of Sun et al.: at least as many tokens as token-by-token verification
    # of the same drafts; here strictly more, by far more than the noise.
    n_token, out_token, _ = _block_run(rejection_sample)
    assert _law_tv(out_token, law) < bound
    assert n_block.double().mean() > n_token.double().mean() + 0.02


def _block_without_lookahead(x: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
                             gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A plausible bug: block verification with h_i = w_i (the running weight alone,
    without the residual mass R_i of the next position), the rest unchanged."""
    b, k = x.shape
    ratio = p[:, :k].gather(-1, x[..., None]).squeeze(-1) / q.gather(-1, x[..., None]).squeeze(-1)
    w = [torch.ones(b, dtype=p.dtype)]
    for i in range(k):
        w.append((w[-1] * ratio[:, i]).clamp(max=1.0))
    wt = torch.stack(w, dim=1)
    u = torch.rand(b, k, generator=gen, dtype=p.dtype)
    pos = torch.arange(1, k + 1)
    n = torch.where(u < wt[:, 1:], pos, torch.zeros_like(pos)).amax(dim=-1)
    rows = n[:, None, None].expand(b, 1, p.shape[-1])
    q_row = torch.cat((q, torch.zeros_like(p[:, :1])), dim=1).gather(1, rows).squeeze(1)
    dist = residual_distribution(wt.gather(1, n[:, None]) * p.gather(1, rows).squeeze(1), q_row)
    return n, torch.multinomial(dist, 1, generator=gen).squeeze(1)


def test_block_verify_check_catches_a_missing_lookahead():
    """Power: the same check fails for a rule that drops the look-ahead term of h_i."""
    _, out, law = _block_run(_block_without_lookahead)
    assert _law_tv(out, law) > _law_bound(law)


@pytest.mark.parametrize("case", ["plain", "q_one_hot", "p_zeros"])
def test_block_verify_k1_is_the_token_rule(case):
    """One draft token: block verification is token-by-token verification, draw for draw."""
    p, q = _random_pair(5, case)
    gen = torch.Generator().manual_seed(0)
    x = torch.multinomial(q.float().expand(4000, V), 1, replacement=True, generator=gen)
    pp = torch.stack((p, _dist(50).double())).expand(4000, 2, V)
    qq = q.expand(4000, 1, V)
    got = block_verify(x, qq, pp, torch.Generator().manual_seed(1))
    want = rejection_sample(x, qq, pp, torch.Generator().manual_seed(1))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_block_verify_k0_draws_from_p():
    p = _dist(31)
    n, nxt = block_verify(torch.zeros(B, 0, dtype=torch.long), torch.zeros(B, 0, V),
                          p.expand(B, 1, V), torch.Generator().manual_seed(4))
    assert n.eq(0).all() and _tv(torch.bincount(nxt, minlength=V), p) < 0.02


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
