"""Rounds of a config along a reference, without decoding: what the decoder would draft,
verify and accept in every round, under greedy verification.

The loop mirrors `SpeculativeDecoder.generate`: the first token comes from the prefill;
each round drafts at most min(policy limit, budget - 1, MAX_DRAFT_TOKENS) chain tokens
(or a tree of at most budget - 1 levels), accepts the leading drafts that equal the
reference, appends them and the target's own next token (cut after an EOS), and
updates the exit policy with (drafted, accepted) exactly as the decoder does: the
policy objects are the decoder's own (`make_policy`).

A `Track` is one prompt's draft along its reference, made by the method's replay
source (its package's replay.py):
- a method may run its drafter's own rule over the sequence the decoder would hold
  (prompt + reference so far): the n-gram lookup does, exact for every policy.
- `TableTrack` reads a teacher-forced `Table` (tables.py): the k-th draft of a round is
  row g+k-1 while the earlier drafts were accepted. After the first rejected draft the
  decoder's draft runs off the reference; its further tokens' confidences (which a
  confidence or adaptive exit reads to decide how many more to draft) are taken from
  the following rows, an approximation that changes the drafted count (cost, and the
  adaptive policy's state), never the accepted one of that round.
- `heads.AnchoredTrack` (trained heads: eagle, medusa) reads one small table per round
  start instead: its draft along the reference from that start, as a `TableTrack`
  over the reference shifted there.
A track whose method's spec says `own_trees` answers `own_tree(g) -> (nodes, accepted
depth, deepest level)`: its drafter builds its whole tree itself every round (SGLang's
NGRAM trie), model-free, so it is exact.
Every track inherits `TrackBase`, which gives the parts a drafter may lack (its own
cache, trees, cross-request state) their defaults.
Trees (TableTrack, AnchoredTrack): a static tree (`tree_choices`)
accepts along the reference as far as the path of the reference tokens' ranks is
listed: exact where the table is. A dynamic tree (EAGLE-2) keeps a level's `width` best
nodes by cumulative probability and reranks at the end; nodes off the reference path
have no teacher-forced distribution, so their children's probabilities are taken to be
the on-path node's at the same depth (exact for width 1, and for Medusa, whose nodes at
one depth all share one distribution).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import MAX_DRAFT_TOKENS, chain_limit
from autotune.decoding.drafters.base import kept_by_policy
from autotune.schema.engines import engine_rules
from autotune.schema.methods import get_method
from autotune.decoding.policies import ExitPolicy, make_policy
from autotune.schema.shape import DYNAMIC, STATIC
from autotune.replay.reference import Reference
from autotune.replay.tables import Table


@dataclass
class ReplayRound:
    """One predicted round. passes: tokens fed per draft forward pass (a chain: one pass
    per draft token, the first catching up where the drafter keeps its own cache; a
    tree: the root pass, then one pass per level); exits: the exit layer per chain draft
    (early-exit drafters) or empty; catch_up: tokens a tree's root pass catches up on."""

    drafted: int
    accepted: int
    emitted: int
    verified: int
    depth: int
    confidences: list[float]
    passes: list[int] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)
    catch_up: int = 0


@dataclass
class ChainDraft:
    drafted: int
    accepted: int
    confidences: list[float]
    exits: list[int]

    @classmethod
    def along(cls, found: list[int], confidences: list[float], policy: ExitPolicy,
              reference: list[int]) -> "ChainDraft":
        """A model-free chain (`found`, each token with its confidence) as the drafter
        keeps it under `policy`, accepted while it equals `reference` (the tokens the
        decoder will emit from here)."""
        kept = kept_by_policy(confidences[:len(found)], policy)
        accepted = 0
        for token, truth in zip(found[:kept], reference):
            if token != truth:
                break
            accepted += 1
        return cls(kept, accepted, list(confidences[:kept]), [])


class OwnCache:
    """Tokens fed per draft pass for a drafter with its own cache: the first pass of a
    round catches up on every token the draft has not seen.

    `seen`: generated tokens whose entries the draft holds to start with (+1 = pending);
    a draft model's prefill holds the prompt (0); EAGLE's head holds nothing before its
    first round (1 - prompt length: its first catch-up covers the whole prompt).
    `keeps_drafts`: the draft's cache keeps its accepted drafts' entries after a round
    (a draft model); EAGLE crops back to the verified pairs (its drafts' entries were
    built from predicted features), so its next round catches up on them again.
    """

    def __init__(self, seen: int = 0, keeps_drafts: bool = True) -> None:
        self.seen = seen
        self.keeps_drafts = keeps_drafts

    def chain(self, g: int, drafted: int, accepted: int) -> list[int]:
        if drafted == 0:
            return []
        first = max(1, g - self.seen)
        # The cache holds the sequence and drafts 1..k-1; the verifier keeps the first
        # min(accepted, k-1) of them.
        self.seen = g + (min(accepted, drafted - 1) if self.keeps_drafts else 0)
        return [first] + [1] * (drafted - 1)

    def tree(self, g: int, drafts: bool) -> int:
        if not drafts:
            return 0
        first = max(1, g - self.seen)
        self.seen = g
        return first - 1


class Track(Protocol):
    """A prompt's draft along its reference, as `simulate` reads it every round.
    `TrackBase` gives every part but `chain` a default, so `simulate` calls them all."""

    def chain(self, g: int, limit: int, policy: ExitPolicy) -> ChainDraft:
        """The round's chain after g generated tokens, at most `limit` drafts."""
        ...

    def own_cache(self) -> OwnCache:
        """How the drafter's own cache catches up (the cost model's passes), fresh for
        one simulation."""
        ...

    def static_tree(self, g: int, choices: tuple[tuple[int, ...], ...], depth_limit: int
                    ) -> tuple[int, int, int, list[int]]:
        """(nodes, accepted depth, deepest level, tokens fed per level pass) of the
        static tree `choices` (see the module docstring)."""
        ...

    def dynamic_tree(self, g: int, width: int, depth: int, keep: int, depth_limit: int
                     ) -> tuple[int, int, int, list[int]]:
        """The same of an EAGLE-2 tree (see the module docstring)."""
        ...

    def own_tree(self, g: int) -> tuple[int, int, int]:
        """(nodes, accepted depth, deepest node) of the whole tree the drafter builds
        itself (a method whose spec says `own_trees`: SGLang's NGRAM)."""
        ...

    def finish(self) -> None:
        """The request ends: file it into the cross-request state (`ServedInOrder`)."""
        ...


class TrackBase:
    """Defaults for a `Track`'s optional parts: a draft model's cache, no trees, no
    cross-request state. A track inherits it and overrides what its drafter does; the
    defaults for trees refuse, as the decoder refuses a tree its drafter cannot draft."""

    def own_cache(self) -> OwnCache:
        return OwnCache()

    def static_tree(self, g: int, choices: tuple[tuple[int, ...], ...], depth_limit: int
                    ) -> tuple[int, int, int, list[int]]:
        raise TypeError(f"{type(self).__name__} cannot replay a draft tree")

    def dynamic_tree(self, g: int, width: int, depth: int, keep: int, depth_limit: int
                     ) -> tuple[int, int, int, list[int]]:
        raise TypeError(f"{type(self).__name__} cannot replay a draft tree")

    def own_tree(self, g: int) -> tuple[int, int, int]:
        raise TypeError(f"{type(self).__name__} builds no tree of its own")

    def finish(self) -> None:
        """Nothing kept across requests."""


class TableTrack(TrackBase):
    """A teacher-forced table along one reference."""

    def __init__(self, ref: Reference, table: Table) -> None:
        self.tokens, self.table = ref.tokens, table
        self.ids0 = table.ids[:, 0].tolist()

    def chain(self, g: int, limit: int, policy: ExitPolicy) -> ChainDraft:
        drafted = accepted = 0
        matching = True
        confidences: list[float] = []
        exits: list[int] = []
        for i in range(1, limit + 1):
            row = g + i - 1
            drafted += 1
            # Past the reference's end (after its EOS) the draft's tokens are unknown:
            # drafted (their cost) but never emitted; the last row stands in for them.
            known = min(row, self.table.rows - 1)
            confidence = self.table.conf[known]
            confidences.append(confidence)
            if self.table.exit_layer is not None:
                exits.append(self.table.exit_layer[known])
            if matching and row < len(self.tokens) and self.ids0[row] == self.tokens[row]:
                accepted += 1
            else:
                matching = False
            if drafted == limit or not policy.keep_going(confidence):
                break
        return ChainDraft(drafted, accepted, confidences, exits)

    def rank(self, row: int) -> int:
        """The reference token's rank in row's distribution (W when not in its top W)."""
        if row >= len(self.tokens) or row >= self.table.rows:
            return self.table.width
        ids = self.table.ids[row].tolist()
        token = self.tokens[row]
        return ids.index(token) if token in ids else self.table.width

    def static_tree(self, g: int, choices: tuple[tuple[int, ...], ...], depth_limit: int
                    ) -> tuple[int, int, int, list[int]]:
        """(nodes, accepted depth, deepest level, tokens fed per level pass)."""
        paths = [p for p in choices if len(p) <= depth_limit]
        listed = set(paths)
        accepted, path = 0, ()
        while True:
            step = path + (self.rank(g + len(path)),)
            if step not in listed:
                break
            path, accepted = step, accepted + 1
        depth = max((len(p) for p in paths), default=0)
        # Level d's pass feeds the listed nodes at depth d that have listed children.
        parents = {p[:-1] for p in paths}
        feeds = [sum(1 for p in paths if len(p) == d and p in parents) for d in range(1, depth)]
        return len(paths), accepted, depth, [f for f in feeds if f]

    def dynamic_tree(self, g: int, width: int, depth: int, keep: int, depth_limit: int
                     ) -> tuple[int, int, int, list[int]]:
        """(nodes kept, accepted depth, deepest kept level, tokens fed per level pass) of
        an EAGLE-2 tree (see the module docstring for what is approximate). The rerank
        may keep no node of the last levels: the tree's depth is its deepest kept node's,
        as the decoder's `DraftTree.depth`."""
        levels = min(depth, depth_limit)
        if levels < 1:
            return 0, 0, 0, []
        # Nodes: (score, depth, index, on_path). Level 1: the root's top `width`.
        pool: list[tuple[float, int, int, bool]] = []

        def children(parent_score: float, on_path: bool, level: int) -> None:
            row = g + level - 1
            if row >= self.table.rows:
                return
            values = self.table.logp[row, :width].tolist()
            ids = self.table.ids[row, :width].tolist()
            target = self.tokens[row] if row < len(self.tokens) else None
            for value, token in zip(values, ids):
                pool.append((parent_score + value, level, len(pool),
                             on_path and token == target))

        children(0.0, True, 1)
        frontier = list(range(len(pool)))
        feeds: list[int] = []
        for level in range(2, levels + 1):
            if not frontier:
                break
            feeds.append(len(frontier))
            start = len(pool)
            for index in frontier:
                score, _, _, on_path = pool[index]
                children(score, on_path, level)
            new = range(start, len(pool))
            frontier = sorted(new, key=lambda i: -pool[i][0])[:width]
        order = sorted(range(len(pool)), key=lambda i: (-pool[i][0], pool[i][1], i))
        kept = set(order[:keep] if keep else order)
        accepted = 0
        for level in range(1, levels + 1):
            if any(pool[i][3] and pool[i][1] == level for i in kept):
                accepted = level
            else:
                break
        return len(kept), accepted, max((pool[i][1] for i in kept), default=0), feeds


def simulate(track: Track, config: DecodeConfig, ref: Reference, max_new_tokens: int
             ) -> list[ReplayRound]:
    """The rounds the decoder would run for `config` on `ref` (greedy)."""
    simulation = _Simulation(track, config)
    n = len(ref.tokens)
    g = 1
    rounds: list[ReplayRound] = []
    while g < n:
        done = simulation.round(g, max_new_tokens - g, n - g)
        rounds.append(done)
        g += done.emitted
    return rounds


class _Simulation:
    """One `simulate` call's state, which evolves round by round as the decoder's does:
    the exit policy and the drafter's own cache. A round takes the decoder's branch:
    the drafter's own whole tree (its method's spec says `own_trees`), a draft tree, or
    a chain."""

    def __init__(self, track: Track, config: DecodeConfig) -> None:
        self.track, self.config = track, config
        self.policy = make_policy(config)
        self.rules = engine_rules(config.engine)
        self.own_cache = track.own_cache()
        self.own_trees = get_method(config.method).own_trees

    def round(self, g: int, budget: int, left: int) -> ReplayRound:
        """The round after g generated tokens, `budget` tokens allowed and `left`
        reference tokens still to emit."""
        if self.own_trees:
            return self._own_tree(g, left)
        if self.config.shape.is_tree:
            return self._tree(g, budget, left)
        return self._chain(g, budget, left)

    def _own_tree(self, g: int, left: int) -> ReplayRound:
        """The drafter's own whole tree (SGLang's NGRAM), whatever the budget."""
        nodes, accepted, depth = self.track.own_tree(g)
        return ReplayRound(nodes, accepted, min(accepted + 1, left), nodes + 1, depth, [])

    def _tree(self, g: int, budget: int, left: int) -> ReplayRound:
        shape = self.config.shape
        depth_limit = min(budget - 1, MAX_DRAFT_TOKENS)
        if shape.kind == STATIC:
            nodes, accepted, depth, feeds = self.track.static_tree(g, shape.choices,
                                                                   depth_limit)
        else:
            assert shape.kind == DYNAMIC
            nodes, accepted, depth, feeds = self.track.dynamic_tree(
                g, shape.width, shape.depth, shape.tokens, depth_limit)
        return ReplayRound(nodes, accepted, min(accepted + 1, left), nodes + 1, depth, [],
                           passes=[1] * (depth > 0) + feeds,
                           catch_up=self.own_cache.tree(g, depth > 0))

    def _chain(self, g: int, budget: int, left: int) -> ReplayRound:
        """A chain as long as the policy, the budget and the engine allow; the policy
        learns from it as the decoder's does."""
        limit = chain_limit(self.policy.limit(), budget, self.config, self.rules)
        draft = (self.track.chain(g, limit, self.policy) if limit > 0
                 else ChainDraft(0, 0, [], []))
        passes = self.own_cache.chain(g, draft.drafted, draft.accepted)
        self.policy.update(draft.drafted, draft.accepted, draft.confidences)
        return ReplayRound(draft.drafted, draft.accepted, min(draft.accepted + 1, left),
                           draft.drafted + 1, draft.drafted, draft.confidences,
                           passes=passes, exits=draft.exits)
