"""DraftShape: what one round drafts — a chain, a dynamic (EAGLE-2) tree or a static tree —
and every number and rule that follows from the shape alone.

One value owns the arithmetic that the decoder (cache room), the config checks (node
budget), the space (trials a shape would waste), the exporters (a tree's best path as a
chain) and the report (labels, width x depth cells) all need, so none of them restates it.
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

CHAIN, DYNAMIC, STATIC = "chain", "tree", "static"


class ShapeKeys(Protocol):
    """The knobs a shape is read from (a DecodeConfig has them)."""

    k: int
    tree_width: int
    tree_depth: int
    tree_tokens: int
    tree_choices: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class DraftShape:
    """kind: CHAIN (up to k tokens under the exit policy), DYNAMIC (EAGLE-2: `width`
    children of the `width` best nodes per level, `depth` levels, the `tokens` best kept,
    0 = all) or STATIC (`choices`: paths of child ranks)."""

    kind: str
    k: int = 0
    width: int = 0
    depth: int = 0
    tokens: int = 0
    choices: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, config: "ShapeKeys") -> "DraftShape":
        if config.tree_choices:
            return cls(STATIC, k=config.k, choices=tuple(config.tree_choices))
        if config.tree_width > 0:
            return cls(DYNAMIC, k=config.k, width=config.tree_width, depth=config.tree_depth,
                       tokens=config.tree_tokens)
        return cls(CHAIN, k=config.k)

    @property
    def is_tree(self) -> bool:
        return self.kind != CHAIN

    @property
    def pool_size(self) -> int:
        """Nodes a dynamic tree drafts before the rerank: `width` at level 1, then `width`
        children of each of the `width` best nodes at every later level (else 0)."""
        w, d = self.width, self.depth
        return w + (d - 1) * w * w if self.kind == DYNAMIC and w and d else 0

    @property
    def tree_nodes(self) -> int:
        """Tree nodes one verify pass checks at most (root excluded); 0 for a chain."""
        if self.kind == STATIC:
            return len(self.choices)
        if self.kind == DYNAMIC:
            pool = self.pool_size
            return min(self.tokens, pool) if self.tokens else pool
        return 0

    @property
    def nodes(self) -> int:
        """Draft tokens one verify pass checks at most: a chain's k, a tree's nodes."""
        return self.k if self.kind == CHAIN else self.tree_nodes

    @property
    def levels(self) -> int:
        """Levels drafted: a chain's k, a dynamic tree's depth, a static tree's deepest path."""
        if self.kind == STATIC:
            return max(len(path) for path in self.choices)
        return self.depth if self.kind == DYNAMIC else self.k

    @property
    def verified_depth(self) -> int:
        """Levels a verified tree can have: its longest kept path (0 for a chain). A
        dynamic tree keeps `tree_nodes` nodes, so it is no deeper than that either."""
        if self.kind == STATIC:
            return self.levels
        if self.kind == DYNAMIC:
            return min(self.depth, self.tree_nodes)
        return 0

    @property
    def one_path(self) -> bool:
        """A tree of one path (width 1, or static paths that all take the top-ranked
        child): it drafts what a chain does."""
        if self.kind == STATIC:
            return all(rank == 0 for path in self.choices for rank in path)
        return self.kind == DYNAMIC and self.width == 1

    @property
    def chain_length(self) -> int:
        """Tokens a chain-only engine drafts for this shape: k for a chain; a tree's depth
        (its best path; exact for a one-path tree, the lossy fallback otherwise)."""
        return self.verified_depth if self.is_tree else self.k

    def scratch_room(self) -> int:
        """Cache positions a round needs past the sequence: a tree's verify pass writes
        every node, and a tree drafter writes every node it feeds (0 for a chain, whose
        drafts never run past the token budget)."""
        if not self.is_tree:
            return 0
        return max(self.tree_nodes, self.width * (self.depth - 1)) + 1

    def waste(self) -> str | None:
        """Why a valid dynamic tree would waste a trial, or None: a budget that keeps
        every drafted node is the same tree as no budget; one below the depth drafts
        levels the rerank never keeps."""
        if self.kind != DYNAMIC or not self.tokens:
            return None
        pool, width, depth, tokens = self.pool_size, self.width, self.depth, self.tokens
        if tokens >= pool:
            return (f"tree_tokens={tokens} keeps all {pool} nodes a width-{width} depth-{depth} "
                    "tree drafts: the same tree as tree_tokens=0")
        if tokens < depth:
            return (f"tree_tokens={tokens} < tree_depth={depth}: the rerank keeps no node below "
                    f"level {tokens}, so levels {tokens + 1}..{depth} are drafted for nothing")
        return None

    def label(self) -> str:
        """`k=4`, `tree w4 d5 t30` (no `t` when every node is kept), `tree choices(15)`."""
        if self.kind == STATIC:
            return f"tree choices({len(self.choices)})"
        if self.kind == DYNAMIC:
            return f"tree w{self.width} d{self.depth}" + (f" t{self.tokens}" if self.tokens else "")
        return f"k={self.k}"

    def loss_label(self) -> tuple[str, tuple[str, ...]]:
        """`knob=value` and its related knobs, for an exporter's loss line."""
        if self.kind == STATIC:
            paths = [list(path) for path in self.choices]
            shown = (str(paths) if len(paths) <= 8
                     else f"[{len(paths)} paths, depth {self.levels}]")
            return f"tree_choices={shown}", ()
        return f"tree_width={self.width}", ("tree_depth",) + (("tree_tokens",) if self.tokens else ())
