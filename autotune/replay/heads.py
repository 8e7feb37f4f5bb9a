"""Replay of trained heads (`eagle`, `medusa`): draft tables per round start.

A trained head's draft at depth d of a round that starts after g generated tokens
depends only on the verified sequence (prompt + reference tokens[:g]), the target's
features of it and, for EAGLE, the head's own predicted features along the round,
which the drafter drops when the round ends (autotune/methods/eagle/drafter.py,
medusa/drafter.py). A position-indexed `Table` cannot say that (the same position is
drafted at different depths from different starts), so these sources make one small
table per ANCHOR g: row d-1 is the draft distribution at depth d of a round starting
at g, along the reference path. An `AnchoredTrack` reads anchor g's table with a
`TableTrack` over the reference shifted to g (tokens[g:]), at g = 0: chains, static
and dynamic trees alike.

Every head's tables start from one target pass over prompt + reference
(`target_features`): the feature of position j is the final-normed hidden state that
chose token j+1. With P prompt tokens, the pending token of a round at anchor g sits at
position P+g-1. How a head turns those features into its anchors' rows, and what of its
replay is exact, is its own (`HeadSource._build`, `fidelity`: each head's source lives
in its method's replay.py); this module holds what they share: the tables, the track,
the memo of tables per prompt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

from autotune.common.errors import AutotuneError
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, OwnCache, TableTrack, TrackBase
from autotune.replay.sources import ReplaySourceBase
from autotune.replay.tables import Table, table_width

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig
    from autotune.decoding.policies import ExitPolicy
    from autotune.models.loading import LoadedModel
    from autotune.models.trained import HeadForward

MEMO_LIMIT = 4096           # prompts' tables kept before the memo is cleared


@dataclass
class AnchorTables:
    """One prompt's anchor tables. ids: [C, D, W] int64 (most likely first), logp:
    [C, D, W] float32, conf: [C, D] top-1 probabilities, rows: per anchor, its rows
    (anchor g = index g-1; row d-1 = depth d). C = len(reference tokens)."""

    ids: torch.Tensor
    logp: torch.Tensor
    conf: torch.Tensor
    rows: list[int]

    @property
    def depth(self) -> int:
        return self.ids.shape[1]

    @property
    def width(self) -> int:
        return self.ids.shape[2]

    def table(self, g: int) -> Table:
        """Anchor g's Table (row d-1: depth d)."""
        n = self.rows[g - 1]
        return Table(self.ids[g - 1, :n], self.logp[g - 1, :n],
                     self.conf[g - 1, :n].tolist())


class AnchorRows:
    """Collects top-W rows by (anchor index, depth index) into AnchorTables."""

    def __init__(self, anchors: int, depth: int, width: int) -> None:
        self.ids = torch.zeros((anchors, depth, width), dtype=torch.long)
        self.logp = torch.full((anchors, depth, width), float("-inf"))
        self.conf = torch.zeros((anchors, depth))
        self.rows = [0] * anchors

    def put(self, a0: int, d: int, table: Table) -> None:
        """Rows a0.. of depth index d from a Table over [t, W]."""
        a1 = a0 + table.rows
        self.ids[a0:a1, d] = table.ids.cpu()
        self.logp[a0:a1, d] = table.logp.cpu()
        self.conf[a0:a1, d] = torch.tensor(table.conf)
        for a in range(a0, a1):
            self.rows[a] = max(self.rows[a], d + 1)

    def done(self) -> AnchorTables:
        return AnchorTables(self.ids, self.logp, self.conf, self.rows)


# ------------------------------------------------------------------ the tables

@torch.inference_mode()
def target_features(target: "LoadedModel", ref: Reference) -> torch.Tensor:
    """The target's features of prompt + reference: [N, H]."""
    forward = target.forward
    ids = torch.tensor([ref.sequence], dtype=torch.long, device=target.device)
    _, features = forward.forward_features(ids, forward.new_cache(1, ids.shape[1]))
    return features[0]


# ------------------------------------------------------------------ the track

class AnchoredTrack(TrackBase):
    """A prompt's draft from its anchor tables: anchor g's table read by a TableTrack
    over the reference shifted to g. `max_chain` caps a chain's drafts (Medusa: one per
    head); `own_cache` says how the drafter's cache catches up (the cost model's passes);
    `deepen(depth)` gives deeper tables when a chain's limit outgrows these (a
    heuristic exit's K grows with its acceptance)."""

    def __init__(self, ref: Reference, tables: AnchorTables, max_chain: int | None = None,
                 own_cache: OwnCache | None = None,
                 deepen: Callable[[int], AnchorTables] | None = None) -> None:
        self.ref, self.tables, self.max_chain = ref, tables, max_chain
        self._own_cache = own_cache
        self._deepen = deepen
        self._tracks: dict[int, TableTrack] = {}

    def own_cache(self) -> OwnCache:
        """A fresh copy for one simulation."""
        if self._own_cache is None:
            return OwnCache()
        return OwnCache(self._own_cache.seen, self._own_cache.keeps_drafts)

    def _at(self, g: int) -> TableTrack:
        track = self._tracks.get(g)
        if track is None:
            shifted = dataclasses.replace(self.ref, tokens=self.ref.tokens[g:])
            track = self._tracks[g] = TableTrack(shifted, self.tables.table(g))
        return track

    def chain(self, g: int, limit: int, policy: "ExitPolicy") -> ChainDraft:
        if self.max_chain is not None:
            limit = min(limit, self.max_chain)
        if limit > self.tables.depth and self._deepen is not None:
            self.tables = self._deepen(limit)
            self._tracks.clear()
        return self._at(g).chain(0, limit, policy)

    def static_tree(self, g: int, choices: tuple[tuple[int, ...], ...], depth_limit: int
                    ) -> tuple[int, int, int, list[int]]:
        return self._at(g).static_tree(0, choices, depth_limit)

    def dynamic_tree(self, g: int, width: int, depth: int, keep: int, depth_limit: int
                     ) -> tuple[int, int, int, list[int]]:
        return self._at(g).dynamic_tree(0, width, depth, keep, depth_limit)


# ------------------------------------------------------------------ the sources

class HeadSource(ReplaySourceBase):
    """Anchor tables of a trained head, memoised per prompt at the widest and deepest
    asked for so far (a deeper or wider config rebuilds them once). A head's source
    (its method's replay.py) names its `kind` and fills in the per-kind methods."""

    kind = ""

    def __init__(self, target: "LoadedModel", draft: "LoadedModel | None") -> None:
        self.target = target
        self.head: HeadForward = trained_head_forward(draft, self.kind)
        self.vocab = min(target.forward.vocab_size, self.head.vocab_size)
        self._memo: dict[tuple[str, int], AnchorTables] = {}

    # per kind
    def _depth(self, config: "DecodeConfig") -> int:
        raise NotImplementedError

    def _build(self, ref: Reference, features: torch.Tensor, width: int, depth: int
               ) -> AnchorTables:
        """ref's tables from the target's features [N, H] of its sequence."""
        raise NotImplementedError

    def _track(self, ref: Reference, tables: AnchorTables) -> AnchoredTrack:
        raise NotImplementedError

    def check(self, config: "DecodeConfig") -> None:
        """Refuse what the decoder refuses (one line)."""

    def fidelity(self, config: "DecodeConfig") -> tuple[bool, list[str]]:
        raise NotImplementedError

    # shared
    @staticmethod
    def _key(ref: Reference) -> tuple[str, int]:
        return ref.prompt_id, hash(tuple(ref.sequence))

    def _tables(self, config: "DecodeConfig", ref: Reference) -> AnchorTables:
        return self._at_least(ref, table_width(config), self._depth(config))

    def _at_least(self, ref: Reference, width: int, depth: int) -> AnchorTables:
        """ref's tables at least `width` wide and `depth` deep (memoised; rebuilt at the
        widest and deepest asked for so far)."""
        key = self._key(ref)
        tables = self._memo.get(key)
        if tables is None or tables.width < width or tables.depth < depth:
            if len(self._memo) >= MEMO_LIMIT:       # a long screen: bound memory
                self._memo.clear()
            if tables is not None:
                width, depth = max(width, tables.width), max(depth, tables.depth)
            # The features are not kept ([N, H] per prompt is large for a real model):
            # a rebuild, rare (a wider or deeper config), costs another target pass.
            features = target_features(self.target, ref)
            tables = self._memo[key] = self._build(ref, features, width, depth)
        return tables

    def prepare(self, config: "DecodeConfig", refs: list[Reference]) -> None:
        self.check(config)
        for ref in refs:
            self._tables(config, ref)

    def track(self, config: "DecodeConfig", ref: Reference) -> AnchoredTrack:
        self.check(config)
        return self._track(ref, self._tables(config, ref))


def trained_head_forward(draft: "LoadedModel | None", kind: str) -> "HeadForward":
    """The `kind` head of --draft (the decoder's checks refuse anything else first)."""
    from autotune.models.trained import TrainedDraft

    if not isinstance(draft, TrainedDraft) or draft.kind != kind:
        given = draft.name if draft is not None else "none"
        raise AutotuneError(f"method={kind} needs a trained {kind} drafter as --draft "
                            f"(autotune train-draft --kind {kind}), not {given}")
    return draft.forward      # type: ignore[return-value]
