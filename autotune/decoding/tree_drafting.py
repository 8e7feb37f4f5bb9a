"""Growing a draft tree from a drafter that yields distributions.

Dynamic trees follow EAGLE-2 (Li et al., 2024): the root's `width` most likely tokens
form level 1; at each later level the `width` nodes with the highest cumulative draft
probability (the product along their path) are fed through the draft in one pass and
each contributes its `width` most likely children; after `depth` levels the
`tree_tokens` best nodes of everything drafted are kept (the rerank). Since a child's
cumulative probability never exceeds its parent's, the kept set is a tree.

Static trees are a list of paths of child ranks (EAGLE / Medusa / TensorRT-LLM
`choices`): `[0]` is the root's most likely token, `[0, 1]` that token's second most
likely child, and so on. Every listed node whose path is extended is fed through the
draft, level by level.

A drafter takes part through the three calls of `drafters.base.TreeHooks` (every
method whose registry entry says `can_tree` implements them): `tree_root(seq)` scores the
pending token (catching up first where it keeps its own cache) and returns the draft
logits after it, [V]; `tree_level(tokens [1, T], positions [T], mask [T, M])` appends T
nodes to the draft's cache at its current length and returns their logits [T, V];
`tree_finish()` drops the tree's scratch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from autotune.schema.config import DecodeConfig
from autotune.decoding.drafters.base import TreeHooks
from autotune.decoding.tree import DraftTree, empty_tree


@dataclass
class _Node:
    token: int
    parent: int            # index into the pool; -1 = the root
    depth: int
    score: float           # cumulative log-probability of the path
    prob: float            # probability given the parent
    exit_layer: int = 0
    slot: int | None = None       # draft-cache slot once fed
    children: list[int] = field(default_factory=list)


class TreeDrafter:
    """Builds one DraftTree per round over a drafter with tree hooks."""

    def __init__(self, drafter: TreeHooks, config: DecodeConfig, vocab_size: int,
                 device: torch.device) -> None:
        self.drafter, self.vocab_size, self.device = drafter, vocab_size, device
        shape = config.shape
        self.width, self.depth, self.keep = shape.width, shape.depth, shape.tokens
        self.choices = sorted(shape.choices, key=lambda p: (len(p), p))

    # ------------------------------------------------------------------ helpers
    def _log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits[..., : self.vocab_size].float(), dim=-1)

    def _add_children(self, pool: list[_Node], parent: int, log_probs: torch.Tensor,
                      count: int, exit_layer: int) -> None:
        """The `count` most likely tokens of log_probs [V] become parent's children."""
        values, indices = log_probs.topk(min(count, log_probs.shape[-1]))
        base = pool[parent].score if parent >= 0 else 0.0
        depth = pool[parent].depth + 1 if parent >= 0 else 1
        for value, token in zip(values.tolist(), indices.tolist()):
            pool.append(_Node(token, parent, depth, base + value, math.exp(value),
                              exit_layer))
            if parent >= 0:
                pool[parent].children.append(len(pool) - 1)

    def _feed(self, pool: list[_Node], frontier: list[int], root_position: int,
              scratch_start: int) -> tuple[torch.Tensor, list[int]]:
        """Feed the frontier nodes through the draft in one pass; each sees the verified
        prefix, the root, its fed ancestors and itself. Returns (logits [T, V], exits)."""
        cache_len = self.drafter.cache.length
        t = len(frontier)
        span = cache_len + t - scratch_start          # scratch slots, the new ones included
        mask = torch.zeros((t, span), dtype=torch.bool, device=self.device)
        for row, index in enumerate(frontier):
            pool[index].slot = cache_len + row
            node = index
            while node >= 0:
                mask[row, pool[node].slot - scratch_start] = True
                node = pool[node].parent
        tokens = torch.tensor([[pool[i].token for i in frontier]], device=self.device)
        positions = torch.tensor([root_position + pool[i].depth for i in frontier],
                                 device=self.device)
        logits, exits = self.drafter.tree_level(tokens, positions, mask)
        return logits, exits or [0] * t

    # ------------------------------------------------------------------- build
    def propose(self, seq: torch.Tensor, depth_limit: int) -> DraftTree:
        """A tree of at most `depth_limit` levels after seq [1, L] (whose last token is
        the root). The draft's caches are back where they were afterwards."""
        if depth_limit < 1:
            return empty_tree(self.device)
        root_position = seq.shape[1] - 1
        root_logits, root_exits = self.drafter.tree_root(seq)
        scratch_start = self.drafter.cache.length
        root_exit = (root_exits or [0])[0]
        pool: list[_Node] = []
        try:
            if self.choices:
                kept = self._grow_static(pool, root_logits, root_exit, root_position,
                                         scratch_start, depth_limit)
            else:
                kept = self._grow_dynamic(pool, root_logits, root_exit, root_position,
                                          scratch_start, depth_limit)
        finally:
            self.drafter.tree_finish()
        return self._assemble(pool, kept)

    def _grow_dynamic(self, pool: list[_Node], root_logits: torch.Tensor, root_exit: int,
                      root_position: int, scratch_start: int, depth_limit: int) -> list[int]:
        self._add_children(pool, -1, self._log_probs(root_logits), self.width, root_exit)
        frontier = list(range(len(pool)))
        for _ in range(1, min(self.depth, depth_limit)):
            logits, exits = self._feed(pool, frontier, root_position, scratch_start)
            log_probs = self._log_probs(logits)
            start = len(pool)
            for row, parent in enumerate(frontier):
                self._add_children(pool, parent, log_probs[row], self.width, exits[row])
            level = range(start, len(pool))
            frontier = sorted(level, key=lambda i: -pool[i].score)[: self.width]
        # The rerank: best cumulative score first; a parent ties before its child.
        order = sorted(range(len(pool)), key=lambda i: (-pool[i].score, pool[i].depth, i))
        return order[: self.keep] if self.keep else order

    def _grow_static(self, pool: list[_Node], root_logits: torch.Tensor, root_exit: int,
                     root_position: int, scratch_start: int, depth_limit: int) -> list[int]:
        paths = [p for p in self.choices if len(p) <= depth_limit]
        wanted: dict[tuple[int, ...], int] = {}        # children needed per parent path
        for path in paths:
            wanted[path[:-1]] = max(wanted.get(path[:-1], 0), path[-1] + 1)
        index_of: dict[tuple[int, ...], int] = {}

        def attach(parent_path: tuple[int, ...], log_probs: torch.Tensor, exit_layer: int) -> None:
            parent = index_of.get(parent_path, -1)
            start = len(pool)
            self._add_children(pool, parent, log_probs, wanted[parent_path], exit_layer)
            for rank, index in enumerate(range(start, len(pool))):
                index_of[parent_path + (rank,)] = index

        attach((), self._log_probs(root_logits), root_exit)
        depth = 1
        while True:
            parents = [p for p in wanted if len(p) == depth and p in index_of]
            if not parents:
                break
            logits, exits = self._feed(pool, [index_of[p] for p in parents], root_position,
                                       scratch_start)
            log_probs = self._log_probs(logits)
            for row, path in enumerate(parents):
                attach(path, log_probs[row], exits[row])
            depth += 1
        return [index_of[p] for p in paths]

    def _assemble(self, pool: list[_Node], kept: list[int]) -> DraftTree:
        """Number the kept nodes in verify order: level by level, children in rank
        order under their parent's order."""
        keep = set(kept)
        roots = [i for i, n in enumerate(pool) if n.parent < 0 and i in keep]
        verify_index: dict[int, int] = {}
        order: list[int] = []
        queue = roots
        while queue:
            nxt: list[int] = []
            for i in queue:
                order.append(i)
                verify_index[i] = len(order)
                nxt.extend(c for c in pool[i].children if c in keep)
            queue = nxt
        nodes = [pool[i] for i in order]
        return DraftTree(
            tokens=torch.tensor([[n.token for n in nodes]], dtype=torch.long, device=self.device),
            parents=[verify_index[n.parent] if n.parent >= 0 else 0 for n in nodes],
            depths=[n.depth for n in nodes], probs=[n.prob for n in nodes],
            exit_layers=[n.exit_layer for n in nodes])
