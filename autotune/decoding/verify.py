"""The shared verifier: greedy matching, Leviathan rejection sampling, block verification.

Pure tensor functions, written once and named as in Leviathan et al. (2023): the target
distribution is `p`, the draft's `q`, the draft tokens `x`. Every drafter's proposal goes
through these and nothing else decides acceptance.
"""

from __future__ import annotations

from typing import Callable

import torch


def greedy_verify(draft_tokens: torch.Tensor, target_logits: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Longest prefix of the draft that equals the target's argmax, plus the target's next token.

    draft_tokens: [B, k] (k may be 0); target_logits: [B, k+1, V], row i scoring the
    token after the i-th draft token (row 0: after the last verified token).
    Returns (n_accepted [B], next_token [B]): next_token is the target's argmax after the
    accepted prefix, the bonus token when all k were accepted.
    """
    target_tokens = target_logits.argmax(dim=-1)                          # [B, k+1]
    k = draft_tokens.shape[1]
    matches = (draft_tokens == target_tokens[:, :k]).to(torch.int64)
    n_accepted = matches.cumprod(dim=-1).sum(dim=-1)                      # [B]
    next_token = target_tokens.gather(1, n_accepted[:, None]).squeeze(1)
    return n_accepted, next_token


def match_sample(draft_tokens: torch.Tensor, p: torch.Tensor,
                 generator: torch.Generator | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Verification by exact match under sampling (transformers' assisted generation
    without draft logits; engines that sample the target and compare): draw the target's
    own token from each p_i and accept drafts while they equal it; the next token is the
    target's draw after the accepted prefix. Each emitted token is a draw from p given
    the accepted prefix, so the output is distributed exactly as p, whatever drafted.

    draft_tokens: [B, k]; p: [B, k+1, V]. Returns (n_accepted [B], next_token [B]).
    """
    b, k1, v = p.shape
    drawn = torch.multinomial(p.reshape(b * k1, v), 1, generator=generator).reshape(b, k1)
    k = draft_tokens.shape[1]
    matches = (draft_tokens == drawn[:, :k]).to(torch.int64)
    n_accepted = matches.cumprod(dim=-1).sum(dim=-1)
    return n_accepted, drawn.gather(1, n_accepted[:, None]).squeeze(1)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) along the last dim. Where p == q everywhere (nothing is left,
    and rejection has probability 0) it falls back to p so the result is a distribution."""
    residual = (p - q).clamp_min(0.0)
    total = residual.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, residual / total.clamp_min(torch.finfo(p.dtype).tiny), p)


def acceptance_probability(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) for draft tokens x [B, k]; p, q: [B, k, V]."""
    px = p.gather(-1, x[..., None]).squeeze(-1)
    qx = q.gather(-1, x[..., None]).squeeze(-1)
    return torch.where(qx > 0, (px / qx.clamp_min(torch.finfo(p.dtype).tiny)).clamp(max=1.0),
                       torch.ones_like(px))


def rejection_sample(draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
                     generator: torch.Generator | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling: accept x_i with probability min(1, p_i(x_i)/q_i(x_i)) in order;
    at the first rejection draw from norm(max(0, p_i - q_i)); if all are accepted draw
    the bonus token from p_k. The output is distributed exactly as p.

    draft_tokens: [B, k]; q: [B, k, V] draft probabilities; p: [B, k+1, V] target
    probabilities (both after the same temperature / top-p). Returns (n_accepted [B],
    next_token [B]).
    """
    b, k = draft_tokens.shape
    accept_prob = acceptance_probability(p[:, :k], q, draft_tokens)       # [B, k]
    u = torch.rand(b, k, generator=generator, device=p.device, dtype=p.dtype)
    accepted = (u < accept_prob).to(torch.int64)
    n_accepted = accepted.cumprod(dim=-1).sum(dim=-1)                     # [B]
    # Row n_accepted of the residuals is the distribution to draw from: the residual at
    # the first rejection, or p_k itself (a zero "q" row) when everything was accepted.
    q_padded = torch.cat((q, torch.zeros_like(p[:, :1])), dim=1)          # [B, k+1, V]
    rows = n_accepted[:, None, None].expand(b, 1, p.shape[-1])
    p_row = p.gather(1, rows).squeeze(1)
    q_row = q_padded.gather(1, rows).squeeze(1)
    dist = residual_distribution(p_row, q_row)
    next_token = torch.multinomial(dist, 1, generator=generator).squeeze(1)
    return n_accepted, next_token


def block_verify(draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
                 generator: torch.Generator | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification (Sun et al. 2024, "Block Verification Accelerates Speculative
    Decoding", Algorithm 2), as vLLM (`rejection_sample_method: "block"`,
    v1/worker/gpu/spec_decode/rejection_sampler_utils.py L322-398, L627-658, L920-931)
    and SGLang (kernels/ops/speculative/reject_sampling.py L53-112) run it, in the
    releases engines.PROVENANCE names (read there: schema/engines.py): the
    draft is judged as a block, so a token that token-by-token verification rejects can
    still be kept when the tokens after it make up for it. With the running weight
    w_0 = 1, w_i = min(1, w_{i-1} p_i(x_i) / q_i(x_i)) and, for i < k,
    h_i = R_i / (R_i + 1 - w_i) where R_i = sum_v max(0, w_i p_{i+1}(v) - q_{i+1}(v))
    (h_k = w_k), keep the longest prefix tau whose own coin u_tau < h_tau (tau = 0 if
    none); the next token is drawn from p_k when tau = k, else from
    norm(max(0, w_tau p_tau - q_tau)). Lossless (Theorem 1 of the paper) and it accepts
    at least as many tokens in expectation as `rejection_sample` (Theorem 2). k = 1 is
    token-by-token verification exactly.

    draft_tokens: [B, k]; q: [B, k, V] draft probabilities (one-hot for argmax drafts);
    p: [B, k+1, V] target probabilities. Returns (n_accepted [B], next_token [B]).
    """
    b, k = draft_tokens.shape
    if k == 0:
        return rejection_sample(draft_tokens, q, p, generator)
    px = p[:, :k].gather(-1, draft_tokens[..., None]).squeeze(-1)        # [B, k]
    qx = q.gather(-1, draft_tokens[..., None]).squeeze(-1)
    # A token its own draft gave probability 0 could not have been drafted: weight 0,
    # as SGLang's kernel does (`q_is_prob`), rather than a division by zero.
    ratio = torch.where(qx > 0, px / qx.clamp_min(torch.finfo(p.dtype).tiny),
                        torch.zeros_like(px))
    weights = [torch.ones(b, dtype=p.dtype, device=p.device)]           # w_0 .. w_k
    for i in range(k):
        weights.append((weights[-1] * ratio[:, i]).clamp(max=1.0))
    w = torch.stack(weights, dim=1)                                     # [B, k+1]
    # R_i for i = 1..k-1 reads the distributions after x_1..x_i: p row i, q row i.
    residual_mass = (w[:, 1:k, None] * p[:, 1:k] - q[:, 1:k]).clamp_min(0.0).sum(-1)
    denom = residual_mass + 1.0 - w[:, 1:k]
    # denom == 0 only when w_i = 1 and nothing is left: the block so far is surely kept.
    h_inner = torch.where(denom > 0, residual_mass / denom.clamp_min(torch.finfo(p.dtype).tiny),
                          torch.ones_like(denom))
    h = torch.cat((h_inner, w[:, k:]), dim=1)                           # [B, k]: h_1..h_k
    u = torch.rand(b, k, generator=generator, device=p.device, dtype=p.dtype)
    positions = torch.arange(1, k + 1, device=p.device)
    n_accepted = torch.where(u < h, positions, torch.zeros_like(positions)).amax(dim=-1)
    # The next token: p_k after the whole block, else the block residual at tau.
    q_padded = torch.cat((q, torch.zeros_like(p[:, :1])), dim=1)        # [B, k+1, V]
    rows = n_accepted[:, None, None].expand(b, 1, p.shape[-1])
    p_row = p.gather(1, rows).squeeze(1)
    q_row = q_padded.gather(1, rows).squeeze(1)
    w_row = w.gather(1, n_accepted[:, None])                            # [B, 1]
    dist = residual_distribution(w_row * p_row, q_row)
    next_token = torch.multinomial(dist, 1, generator=generator).squeeze(1)
    return n_accepted, next_token


# ------------------------------------------------------------------ draft trees
def candidate_acceptance(p: torch.Tensor, candidates: list[int], q: torch.Tensor | None = None
                         ) -> tuple[list[float], torch.Tensor]:
    """The multi-candidate rule at one tree node: the candidates x_1..x_m (distinct
    children, tried in order) are accepted with probabilities a_i given x_1..x_{i-1}
    were rejected, and after rejecting all the token is drawn from the final residual.
    The output is distributed exactly as p.

    q None: the candidates were chosen deterministically by the draft (top-k, as in
    EAGLE's trees). Then x_i's proposal is a point mass, a_i = p_i(x_i), and a rejection
    removes x_i: p_{i+1} = norm(p_i with x_i zeroed). For a fixed candidate set this is
    the best any exact rule can do (it accepts with probability sum_i p(x_i)).
    q given [V]: the candidates were drawn from q without replacement (recursive
    rejection sampling, Jeon et al. 2024; SpecInfer's rule with replacement is its
    cousin): a_i = min(1, p_i(x_i)/q_i(x_i)), p_{i+1} = norm(max(0, p_i - q_i)) and
    q_{i+1} = norm(q_i with x_i zeroed).

    p: [V] target probabilities at the node. Returns ([a_1..a_m], final residual [V]).
    """
    accept: list[float] = []
    if q is None:
        # Closed form: after rejecting x_1..x_{i-1} the residual is p without them,
        # renormalised, so a_i = p(x_i) / (mass of p left); one pass over V at the end.
        left = float(p.sum())
        for x in candidates:
            px = float(p[x])
            accept.append(min(1.0, px / left) if left > 0 else 1.0)
            left -= px
        removed = p.clone()
        removed[candidates] = 0.0
        total = removed.sum()
        # total == 0: every candidate together held all the mass, so one of them is
        # surely taken and the residual is never drawn from.
        return accept, (removed / total if total > 0 else p)
    residual, proposal = p, q
    for x in candidates:
        qx, px = float(proposal[x]), float(residual[x])
        accept.append(min(1.0, px / qx) if qx > 0 else 1.0)
        residual = residual_distribution(residual, proposal)
        unsampled = proposal.clone()
        unsampled[x] = 0.0
        total = unsampled.sum()
        proposal = unsampled / total if total > 0 else unsampled
    return accept, residual


def greedy_tree_verify(children: list[list[int]], node_tokens: list[int],
                       target_tokens: list[int]) -> tuple[list[int], int]:
    """Longest root path whose every node's token is the target's argmax after its
    parent, plus the target's next token after that path.

    children[i]: verify indices of node i's children; node_tokens[i-1]: node i's token;
    target_tokens[i]: the target's argmax after node i (i = 0: after the root).
    Returns (accepted path as verify indices, root excluded; next token).
    """
    path: list[int] = []
    node = 0
    while True:
        wanted = target_tokens[node]
        match = next((c for c in children[node] if node_tokens[c - 1] == wanted), None)
        if match is None:
            return path, wanted
        path.append(match)
        node = match


def tree_rejection_sample(children: list[list[int]], node_tokens: list[int],
                          p: Callable[[int], torch.Tensor],
                          generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """Walk the tree from the root with the multi-candidate rule (deterministic
    candidates) at each node; stop at the first node whose children are all rejected
    (draw from its residual) or that has none (draw from p there: the bonus token).

    p(i): [V] target probabilities after node i (i = 0: after the root), asked only for
    the nodes the walk visits (top-p sorts the vocabulary, so this saves a sort per
    node not visited). Returns (accepted path as verify indices, root excluded; next token).
    """
    path: list[int] = []
    node = 0
    while True:
        kids = children[node]
        dist = p(node)
        accept, residual = candidate_acceptance(dist, [node_tokens[c - 1] for c in kids])
        u = torch.rand(len(kids), generator=generator, device=dist.device).tolist()
        taken = next((c for c, a, r in zip(kids, accept, u) if r < a), None)
        if taken is None:
            token = int(torch.multinomial(residual, 1, generator=generator)[0])
            return path, token
        path.append(taken)
        node = taken
