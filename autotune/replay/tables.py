"""Teacher-forced draft tables: what a method's draft predicts at every position of a
reference continuation, from one pass over prompt + continuation.

A `Table` row r is the draft's distribution for the token `tokens[r]` of the reference,
i.e. at sequence position P-1+r: rows 0..C (C = continuation length; row C predicts
past the end). Each row keeps its W most likely ids with their log-probabilities, the
top-1 probability (the confidence an exit policy reads) and, for early-exit drafters,
the exit the row took. Under greedy verification the k-th draft token of a round that
starts after g generated tokens is row g+k-1 as long as the round's earlier drafts were
accepted (they equal the reference), which is what makes replay possible.

Each method that drafts from tables makes them with its own `TableSource` (in its
package's replay.py, named by `MethodSpec.replay`), whose docstring says how its pass
relates to its drafter in the decoder and what is exact (`exact_depth`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from autotune.replay.reference import Reference

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig
    from autotune.models.loading import LoadedModel

DEFAULT_WIDTH = 10


@dataclass
class Table:
    """ids: [R, W] int64, most likely first; logp: [R, W] float32; conf: [R] top-1
    probabilities; exit_layer: [R] the exit each row took (early-exit drafters), else None.
    R = len(reference tokens) + 1."""

    ids: torch.Tensor
    logp: torch.Tensor
    conf: list[float]
    exit_layer: list[int] | None = None

    @property
    def rows(self) -> int:
        return self.ids.shape[0]

    @property
    def width(self) -> int:
        return self.ids.shape[1]


def table_width(config: "DecodeConfig") -> int:
    """Ids a table row keeps for `config`: DEFAULT_WIDTH, or more for a static tree that
    lists deeper ranks (one past its deepest, so the reference token's rank is known
    to be unlisted) or a wider dynamic tree."""
    from autotune.schema.shape import STATIC

    shape = config.shape
    if shape.kind == STATIC:
        return max(DEFAULT_WIDTH, max(r for p in shape.choices for r in p) + 2)
    return max(DEFAULT_WIDTH, shape.width)


def table_from_logits(logits: torch.Tensor, vocab: int, width: int) -> Table:
    """A Table from draft logits [R, V] over the shared vocabulary."""
    logp = torch.log_softmax(logits[:, :vocab].float(), dim=-1)
    values, indices = logp.topk(min(width, logp.shape[-1]), dim=-1)
    return Table(indices, values, values[:, 0].exp().tolist())


class TableSource:
    """Makes one method's Table per reference; `key` says which config knobs decide it
    (tables are shared by every config with the same key)."""

    exact_depth: int | None = None      # in-round draft tokens that are exact (None: all)

    def key(self, config: "DecodeConfig") -> tuple[Any, ...]:
        raise NotImplementedError

    def table(self, config: "DecodeConfig", ref: Reference, width: int) -> Table:
        raise NotImplementedError

    def tables(self, config: "DecodeConfig", refs: list[Reference], width: int
               ) -> list[Table]:
        """Several prompts' tables (a source may batch them)."""
        return [self.table(config, ref, width) for ref in refs]


def reference_ids(model: "LoadedModel", ref: Reference) -> torch.Tensor:
    """Prompt + reference continuation as ids [1, N] on `model`'s device."""
    return torch.tensor([ref.sequence], dtype=torch.long, device=model.device)


def shared_vocab(target: "LoadedModel", draft: "LoadedModel | None") -> int:
    """The ids a draft may propose: the target's vocabulary, cut to the draft's."""
    return target.forward.vocab_size if draft is None else min(
        target.forward.vocab_size, draft.forward.vocab_size)
