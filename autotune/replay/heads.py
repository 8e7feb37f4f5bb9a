"""Replay of trained heads (`eagle`, `medusa`): draft tables per round start.

A trained head's draft at depth d of a round that starts after g generated tokens
depends only on the verified sequence (prompt + reference tokens[:g]), the target's
features of it and, for EAGLE, the head's own predicted features along the round,
which the drafter drops when the round ends (decoding/drafters/eagle.py, medusa.py).
A position-indexed `Table` cannot say that (the same position is drafted at different
depths from different starts), so these sources make one small table per ANCHOR g:
row d-1 is the draft distribution at depth d of a round starting at g, along the
reference path. An `AnchoredTrack` reads anchor g's table with a `TableTrack` over the
reference shifted to g (tokens[g:]), at g = 0: chains, static and dynamic trees alike.

Both start from one target pass over prompt + reference (`forward_features`): the
feature of position j is the final-normed hidden state that chose token j+1. With P
prompt tokens, the pending token of a round at anchor g sits at position P+g-1.
- medusa: head d-1 over the feature of position P+g-2 (the last verified one) is the
  draft at depth d; it reads no drafted token, so every anchor's n_heads rows come from
  one pass of the heads over C features.
- eagle: the head's cache entry j is the pair (feature j, token j+1), and a round at g
  keeps entries 0..P+g-2 (all built from the target's features), so one causal head
  pass over the whole sequence's pairs is every anchor's catch-up; its output at entry
  P+g-2 scores depth 1. Depth d+1 feeds the head its depth-d predicted feature with the
  reference token tokens[g+d-1] (while drafts are accepted they equal the reference).
  All anchors of a chunk step together in one head pass with a mask: each row sees the
  catch-up entries of its own round and its own earlier steps (the decoder's chain
  pass sees exactly those, at the same rotary positions). Past the reference's end
  (after an EOS) an anchor is fed the head's own top-1 drafts, as the decoder's chain
  is once every draft up to the end was accepted (their cost counts; none is emitted).
  Tables are built at least MIN_DEPTH deep and deepened when a heuristic exit's K
  outgrows them.

Fidelity (greedy): medusa is exact for chains under every exit policy (no draft
depends on another, so even the confidences after a rejection are the decoder's) and
for static and dynamic trees (every node at one depth has the same distribution). For
eagle the accepted tokens of a chain are exact; a confidence or adaptive exit reads,
after a rejection, the confidences of the draft along the reference where the decoder
drafts on from its rejected token (the drafted count, and the adaptive policy's state);
static trees are exact; a dynamic tree wider than 1 gives off-path nodes' children the
on-path node's distribution at the same depth (frontier and rerank). As in the
decoder, a Medusa chain drafts at most one token per head and a tree deeper than its
heads is refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

from autotune.common.errors import AutotuneError
from autotune.decoding.decoder import MAX_DRAFT_TOKENS
from autotune.decoding.shape import DYNAMIC
from autotune.models.llama import KVCache, LlamaForward
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, OwnCache, TableTrack
from autotune.replay.tables import Table, table_from_logits, table_width

if TYPE_CHECKING:
    from autotune.decoding.config import DecodeConfig
    from autotune.decoding.policies import ExitPolicy
    from autotune.models.loading import LoadedModel
    from autotune.models.trained import HeadForward

TAU_EXACT_POLICIES = ("fixed", "heuristic", "confidence")
MIN_DEPTH = 8               # eagle tables are built at least this deep (later configs reuse them)
CHUNK = 64                  # eagle anchors stepped together (bounds the scratch and its mask)
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


class _Rows:
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


@torch.inference_mode()
def medusa_tables(head: "HeadForward", features: torch.Tensor, ref: Reference, vocab: int,
                  width: int) -> AnchorTables:
    """Every anchor's n_heads rows: head d-1 over the feature of position P+g-2."""
    chunk = CHUNK
    first, anchors = len(ref.prompt) - 1, len(ref.tokens)
    n_heads: int = head.head.n_heads            # type: ignore[union-attr]
    out = _Rows(anchors, n_heads, width)
    # By chunks of anchors: C x n_heads rows of logits over a large vocabulary are big.
    for a0 in range(0, anchors, chunk):
        a1 = min(a0 + chunk, anchors)
        transformed = head.head(features[None, first + a0:first + a1])[0]  # [m, n_heads, H]
        logits = head.target.head_logits(transformed)                       # [m, n_heads, V]
        for d in range(n_heads):
            out.put(a0, d, table_from_logits(logits[:, d], vocab, width))
    return out.done()


def _eagle_pass(forward: LlamaForward, fc: torch.Tensor, cache: KVCache, features: torch.Tensor,
                tokens: torch.Tensor, mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
    """Append the pairs (features [1, T, H], tokens [1, T]) to the head's cache:
    its predicted features [1, T, H]. The arithmetic of `EagleDrafter._pass`."""
    step = forward.begin(tokens, cache, None, mask, positions)
    step.hidden = forward._linear(torch.cat((step.hidden, features), dim=-1), fc, None)
    forward.run_layers(step, 0, 1)
    return step.hidden


@torch.inference_mode()
def eagle_tables(head: "HeadForward", features: torch.Tensor, ref: Reference, vocab: int,
                 width: int, depth: int) -> AnchorTables:
    """Every anchor's rows down to `depth` (module docstring): one catch-up pass over
    the sequence's N-1 pairs, then per chunk of CHUNK anchors depth-1 steps of one
    token each."""
    chunk = CHUNK
    forward, fc = head.layer_forward, head.fc_weight
    assert forward is not None
    device = features.device
    seq = torch.tensor([ref.sequence], dtype=torch.long, device=device)
    n, p, anchors = seq.shape[1], len(ref.prompt), len(ref.tokens)
    # Built directly, not by `new_cache`: the scratch columns hold no rotary positions
    # of their own (each step names its rows' positions), so only their count matters.
    cache = KVCache(1, 1, forward.n_kv_heads, n - 1 + min(chunk, anchors) * (depth - 1),
                    forward.head_dim, forward.dtype, device)
    caught_up = _eagle_pass(forward, fc, cache, features[None, :n - 1], seq[:, 1:])
    # Anchor g's predicted feature of its pending position (entry P+g-2): [C, H].
    predicted = caught_up[0, p - 1:]
    out = _Rows(anchors, depth, width)
    for a0 in range(0, anchors, chunk):
        _eagle_chunk(forward, fc, cache, seq, p, predicted[a0:a0 + chunk], a0, depth,
                     vocab, lambda d, logits: out.put(a0, d, table_from_logits(
                         logits, vocab, width)))
        cache.crop(n - 1)
    return out.done()


def _eagle_chunk(forward: LlamaForward, fc: torch.Tensor, cache: KVCache, seq: torch.Tensor,
                 p: int, predicted: torch.Tensor, a0: int, depth: int, vocab: int,
                 put: Callable[[int, torch.Tensor], None]) -> None:
    """Depths 1..depth of anchors a0.. (predicted: their depth-1 features [m, H]):
    `put(d - 1, logits [t, V])` per depth for the chunk's first t anchors.

    Step i feeds each anchor's depth-i draft: the reference token tokens[g+i-1] while
    the reference has one, past its end (after an EOS) the head's own top-1 draft, which
    is what the decoder feeds once every draft up to the end was accepted. Rows stop
    where the model's rotary positions end (the decoder could not draft there either).
    """
    anchors = seq.shape[1] - p
    positions_limit = forward.cos.shape[0]
    device = seq.device
    rows = torch.arange(predicted.shape[0], device=device)
    g = a0 + 1 + rows                                   # each row's anchor
    prefix = p + g - 1                                  # its verified entries 0..P+g-2
    bases: list[int] = []                               # scratch column of row 0, per step
    feature = predicted
    logits = forward.head_logits(feature[None])[0]      # depth 1
    put(0, logits)
    for i in range(1, depth):
        position = p + g - 2 + i                        # entry P+g-2+i's rotary position
        t = int((position < positions_limit).sum())     # a prefix: g grows along the rows
        if t == 0:
            break
        start = cache.length
        mask = torch.arange(start + t, device=device)[None, :] < prefix[:t, None]
        for base in bases + [start]:
            mask[rows[:t], base + rows[:t]] = True      # its own earlier steps and itself
        wanted = g[:t] + i - 1                          # tokens[g+i-1]
        on_reference = wanted < anchors
        tokens = torch.where(on_reference, seq[0, p + wanted.clamp(max=anchors - 1)],
                             logits[:t, :vocab].argmax(dim=-1))[None]          # [1, t]
        feature = _eagle_pass(forward, fc, cache, feature[None, :t], tokens, mask,
                              position[:t])[0]
        logits = forward.head_logits(feature[None])[0]
        put(i, logits)
        bases.append(start)


# ------------------------------------------------------------------ the track

class AnchoredTrack:
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

class _HeadSource:
    """Anchor tables of a trained head, memoised per prompt at the widest and deepest
    asked for so far (a deeper or wider config rebuilds them once)."""

    kind = ""

    def __init__(self, target: "LoadedModel", draft: "LoadedModel | None") -> None:
        self.target = target
        self.head: HeadForward = _head(draft, self.kind)
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


def _head(draft: "LoadedModel | None", kind: str) -> "HeadForward":
    """The `kind` head of --draft (the decoder's checks refuse anything else first)."""
    from autotune.models.trained import TrainedDraft

    if not isinstance(draft, TrainedDraft) or draft.kind != kind:
        given = draft.name if draft is not None else "none"
        raise AutotuneError(f"method={kind} needs a trained {kind} drafter as --draft "
                            f"(autotune train-draft --kind {kind}), not {given}")
    return draft.forward      # type: ignore[return-value]


class EagleSource(_HeadSource):
    """EAGLE's anchor tables; see the module docstring for what is exact."""

    kind = "eagle"

    def _depth(self, config: "DecodeConfig") -> int:
        shape = config.shape
        # A heuristic exit starts at k; its track deepens the tables if K outgrows them.
        needed = shape.levels if shape.is_tree else config.k
        return max(MIN_DEPTH, min(needed, MAX_DRAFT_TOKENS))

    def _build(self, ref: Reference, features: torch.Tensor, width: int, depth: int
               ) -> AnchorTables:
        return eagle_tables(self.head, features, ref, self.vocab, width, depth)

    def _track(self, ref: Reference, tables: AnchorTables) -> AnchoredTrack:
        # The head holds no entry before its first round, which catches up on the
        # whole prompt; each round crops back to the pairs of target features.
        width = tables.width

        def deepen(limit: int) -> AnchorTables:
            # Doubling: a growing K rebuilds the tables a few times, not every round.
            depth = min(max(limit, 2 * self._at_least(ref, width, 1).depth), MAX_DRAFT_TOKENS)
            return self._at_least(ref, width, depth)

        return AnchoredTrack(ref, tables,
                             own_cache=OwnCache(seen=1 - len(ref.prompt), keeps_drafts=False),
                             deepen=deepen)

    def fidelity(self, config: "DecodeConfig") -> tuple[bool, list[str]]:
        shape = config.shape
        if shape.kind == DYNAMIC and shape.width > 1:
            return False, ["dynamic tree: off-path nodes' children are given the on-path "
                           "node's probabilities at the same depth (frontier and rerank)"]
        if shape.is_tree or config.exit_policy in ("fixed", "heuristic"):
            return True, []
        return config.exit_policy in TAU_EXACT_POLICIES, [
            f"{config.exit_policy} exit: draft tokens after a rejection take the "
            "confidences of the head's draft along the reference (drafted count)"]


class MedusaSource(_HeadSource):
    """Medusa's anchor tables: exact for chains and trees (module docstring)."""

    kind = "medusa"

    @property
    def n_heads(self) -> int:
        return self.head.head.n_heads       # type: ignore[union-attr]

    def _depth(self, config: "DecodeConfig") -> int:
        return self.n_heads

    def check(self, config: "DecodeConfig") -> None:
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

    def fidelity(self, config: "DecodeConfig") -> tuple[bool, list[str]]:
        return True, []

