"""Draft trees: the structure one verify pass checks, and what the pass needs from it.

A round's tree hangs off the *root*, the pending last token of the sequence (its keys
and values are not in the target's cache yet). Nodes are numbered in verify order:
index 0 is the root, nodes 1..N follow level by level, so a parent always comes before
its children and the verify pass can feed `[root, node 1, ..., node N]` as one block.
Each node's children are kept in rank order (the draft's most likely first), which is
the order the sampling rule tries them in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from autotune.models.llama import KVCache


@dataclass
class DraftTree:
    """tokens: [1, N] int64, the node tokens (node i at column i-1); parents[i-1]: the
    verify index of node i's parent (0 = the root); depths[i-1] >= 1; probs[i-1]: the
    draft probability of node i's token given its parent (for traces); exit_layers: per
    node, the layer its distribution's parent left at (early-exit drafters only)."""

    tokens: torch.Tensor
    parents: list[int]
    depths: list[int]
    probs: list[float]
    exit_layers: list[int] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.parents)

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    def children(self) -> list[list[int]]:
        """children()[i]: verify indices of node i's children, in rank order
        (the nodes are stored in rank order within each parent)."""
        out: list[list[int]] = [[] for _ in range(self.size + 1)]
        for node, parent in enumerate(self.parents, start=1):
            out[parent].append(node)
        return out

    def attention_mask(self, device: torch.device | None = None) -> torch.Tensor:
        """[N+1, N+1] bool: row i may see column j iff j is i or one of its ancestors
        (the root is everyone's ancestor)."""
        n = self.size + 1
        ancestors: list[list[int]] = [[0]]
        rows: list[int] = [0]
        cols: list[int] = [0]
        for node, parent in enumerate(self.parents, start=1):
            line = ancestors[parent] + [node]
            ancestors.append(line)
            rows.extend([node] * len(line))
            cols.extend(line)
        mask = torch.zeros((n, n), dtype=torch.bool, device=device)
        mask[torch.tensor(rows, device=device), torch.tensor(cols, device=device)] = True
        return mask

    def position_ids(self, root_position: int, device: torch.device | None = None) -> torch.Tensor:
        """[N+1] rotary positions: the root's, then root + depth for each node, which is
        where plain decoding would put the node's token if its path were accepted."""
        return torch.tensor([root_position] + [root_position + d for d in self.depths],
                            dtype=torch.long, device=device)

    def path_tokens(self, path: list[int]) -> list[int]:
        """The tokens of the nodes on `path` (verify indices, root excluded)."""
        row = self.tokens[0].tolist()
        return [row[i - 1] for i in path]


def empty_tree(device: torch.device) -> DraftTree:
    return DraftTree(torch.empty((1, 0), dtype=torch.long, device=device), [], [], [])


def compact_cache(cache: KVCache, base: int, path: list[int]) -> None:
    """After a verify pass that wrote node i's keys/values at `base + i` (root at
    `base`), move the accepted path's entries to `base + 1 ...` (where plain decoding
    would have written them: their rotary positions already match) and crop the rest.

    path: verify indices of the accepted nodes, root excluded, increasing (a child
    comes after its parent), so every source is at or after its destination.
    """
    n = len(path)
    if any(node != j for j, node in enumerate(path, start=1)):
        source = torch.tensor([base + node for node in path], device=cache.k.device)
        # Advanced indexing copies first, so overlapping moves are safe.
        cache.k[:, :, :, base + 1:base + 1 + n] = cache.k[:, :, :, source]
        cache.v[:, :, :, base + 1:base + 1 + n] = cache.v[:, :, :, source]
    cache.crop(base + 1 + n)
