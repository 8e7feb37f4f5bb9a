"""The shared verifier: greedy matching and Leviathan rejection sampling.

Pure tensor functions, written once and named as in Leviathan et al. (2023): the target
distribution is `p`, the draft's `q`, the draft tokens `x`. Every drafter's proposal goes
through these and nothing else decides acceptance.
"""

from __future__ import annotations

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
