"""The frozen target as teacher: the pieces every kind's loss reads, and the shared
arithmetic (soft cross-entropy, row sampling, logit chunks, padded batches).

The target is the teacher, never a label: every loss compares the head's distribution
with the target's own (its softmax), or the head's features with the target's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autotune.models.llama import LlamaForward
from autotune.training.data import Sequence_

# Logits made at once: positions per chunk x vocabulary (64 MiB of float32).
LOGIT_CHUNK = 1 << 24
# Positions per step whose full-vocabulary cross-entropy is computed: an LM head of
# 49152 x 576 over 1000+ rows, forward and backward, is seconds per step on 2 cores.
CE_POSITIONS = 256


class Teacher:
    """The frozen target's pieces a loss reads: embedding, LM head, rotary tables."""

    def __init__(self, forward: LlamaForward) -> None:
        self.forward = forward
        self.device = forward.device
        self.embed = forward.embed.float()
        self.lm_head = forward.lm_head.float()
        self.lm_bias = forward.lm_head_bias
        self.final_norm = forward.final_norm.float()
        self.eps = forward.eps
        self.cos, self.sin = forward.cos.float(), forward.sin.float()
        self.scaling = forward.scaling

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """The LM head on final features [..., H]: [..., V]."""
        return F.linear(features, self.lm_head, self.lm_bias)

    def exit_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final norm + LM head on pre-norm hidden states [..., H] (float32):
        [..., V], the arithmetic of `LlamaForward.logits`."""
        normed = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.logits(self.final_norm * normed)

    def batch(self, seqs: list[Sequence_]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ids [B, L], features [B, L, H] and valid [B, L] on the target's device (rows
        padded at the end)."""
        ids = _pad([s.ids[:, None] for s in seqs])[..., 0].long()           # [B, L]
        features = _pad([s.features for s in seqs])                         # [B, L, H]
        lengths = torch.tensor([s.ids.shape[0] for s in seqs])
        valid = torch.arange(ids.shape[1])[None, :] < lengths[:, None]     # [B, L]
        return ids.to(self.device), features.to(self.device), valid.to(self.device)


def soft_ce(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the student's log-softmax under the teacher's softmax
    (both [N, V]): a scalar."""
    p = torch.softmax(teacher_logits, dim=-1)
    return -(p * torch.log_softmax(student_logits, dim=-1)).sum(-1).mean()


def logit_chunk(vocab: int) -> int:
    """Positions whose logits make one chunk (`LOGIT_CHUNK`)."""
    return max(1, LOGIT_CHUNK // max(vocab, 1))


def sample_ce_rows(n: int) -> torch.Tensor:
    """`CE_POSITIONS` of n row indices drawn without replacement (all of them when n is
    no more), from torch's global generator (seeded; saved in checkpoints)."""
    return torch.arange(n) if n <= CE_POSITIONS else torch.randperm(n)[:CE_POSITIONS]


def _pad(rows: list[torch.Tensor], value: float = 0.0) -> torch.Tensor:
    """Rows [L_i, ...] stacked into [B, max L_i, ...], padded at the end."""
    length = max(r.shape[0] for r in rows)
    return torch.stack([F.pad(r, (0, 0) * (r.dim() - 1) + (0, length - r.shape[0]), value=value)
                        for r in rows])
