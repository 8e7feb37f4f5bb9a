"""Replay of trained Medusa heads: anchor tables (autotune/replay/heads.py), and the cost
of their one pass per round.

Head d-1 over the feature of position P+g-2 (the last verified one) is the draft at
depth d of a round at anchor g; it reads no drafted token, so every anchor's n_heads
rows come from one pass of the heads over C features.

Fidelity (greedy): exact for chains under every exit policy (no draft depends on
another, so even the confidences after a rejection are the decoder's) and for static
and dynamic trees (every node at one depth has the same distribution). As in the
decoder, a chain drafts at most one token per head and a tree deeper than its heads is
refused.

Drafting time: one pass per round (every head's blocks + the LM head over n_heads
rows), plus picking each chain draft.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.measure.timing import time_call
from autotune.replay.costs import interpolate
from autotune.replay.parts import PART_REPEATS, head_inputs
from autotune.replay.draft_cost import HeadParts
from autotune.replay.draft_cost import HeadDraftCost
from autotune.replay.heads import AnchoredTrack, AnchorRows, AnchorTables, HeadSource
from autotune.replay.reference import Reference
from autotune.replay.simulate import ReplayRound
from autotune.replay.tables import table_from_logits

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.models.trained import HeadForward
    from autotune.replay.sources import ReplaySource

CHUNK = 64                  # anchors whose logits are made together (C x n_heads x V is big)


# ------------------------------------------------------------------ the tables

@torch.inference_mode()
def medusa_tables(head: "HeadForward", features: torch.Tensor, ref: Reference, vocab: int,
                  width: int) -> AnchorTables:
    """Every anchor's n_heads rows: head d-1 over the feature of position P+g-2."""
    chunk = CHUNK
    first, anchors = len(ref.prompt) - 1, len(ref.tokens)
    n_heads: int = head.head.n_heads            # type: ignore[union-attr]
    out = AnchorRows(anchors, n_heads, width)
    # By chunks of anchors: C x n_heads rows of logits over a large vocabulary are big.
    for a0 in range(0, anchors, chunk):
        a1 = min(a0 + chunk, anchors)
        transformed = head.head(features[None, first + a0:first + a1])[0]  # [m, n_heads, H]
        logits = head.target.head_logits(transformed)                       # [m, n_heads, V]
        for d in range(n_heads):
            out.put(a0, d, table_from_logits(logits[:, d], vocab, width))
    return out.done()


# ------------------------------------------------------------------ the source

class MedusaSource(HeadSource):
    """Medusa's anchor tables: exact for chains and trees (module docstring)."""

    kind = "medusa"

    @property
    def n_heads(self) -> int:
        return self.head.head.n_heads       # type: ignore[union-attr]

    def _depth(self, config: DecodeConfig) -> int:
        return self.n_heads

    def check(self, config: DecodeConfig) -> None:
        # The drafter's own refusal (MedusaDrafter.build), word for word.
        shape = config.shape
        if config.is_tree and shape.levels > self.n_heads:
            raise AutotuneError(f"a tree of depth {shape.levels} needs as many Medusa "
                                f"heads; this drafter has {self.n_heads}")

    def _build(self, ref: Reference, features: torch.Tensor, width: int, depth: int
               ) -> AnchorTables:
        return medusa_tables(self.head, features, ref, self.vocab, width)

    def _track(self, ref: Reference, tables: AnchorTables) -> AnchoredTrack:
        # A chain drafts at most one token per head (MedusaDrafter.propose).
        return AnchoredTrack(ref, tables, max_chain=self.n_heads)

    def fidelity(self, config: DecodeConfig) -> tuple[bool, list[str]]:
        return True, []


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    return MedusaSource(target, draft)


# ------------------------------------------------------------------ the draft cost

class MedusaCost(HeadDraftCost):
    """One pass of every head and the LM head over their rows, times the in-loop factor;
    a chain also picks each draft, a tree pays its per-node bookkeeping."""

    def round_ms(self, r: ReplayRound) -> float:
        head = self.head
        factor, choose = self.factor, self.parts.target_layers.choose
        one = head.blocks + interpolate(head.logits, head.n_heads)
        if self.config.is_tree:
            return one * factor + self.parts.tree_node * r.drafted
        return one * factor + choose * r.drafted * factor

    @staticmethod
    def calibration_config(target: "LoadedModel", draft: "LoadedModel | None"
                           ) -> DecodeConfig | None:
        # A trained head serves its own method only (the decoder refuses the others).
        if draft is None or draft.trained_kind != "medusa":
            return None
        return DecodeConfig(method="medusa", k=4)

    @staticmethod
    def measure(target: "LoadedModel", draft: "LoadedModel", clock: Callable[[], float],
                context: int) -> HeadParts:
        """Every head's residual blocks over one feature, and the target's LM head over
        n features (`parts.head_inputs`)."""
        head: HeadForward = draft.forward          # type: ignore[assignment]
        inputs = head_inputs(target, clock, context)
        with torch.inference_mode():
            blocks = time_call(lambda: head.head(inputs.features[:, :1]), clock, PART_REPEATS)
        return HeadParts("medusa", [], inputs.logits, blocks, head.head.n_heads)
