"""SGLang's NGRAM corpus, rule for rule: one trie of token suffixes shared by every
request, per-request match anchors, and the BFS (recency) or PROB (frequency) draft tree.

Read in the sglang wheel of PROVENANCE["sglang"] (PyPI, built 2026-10-30; one consistent snapshot of
`sglang/kernels/jit/csrc/ngram_corpus/` and `sglang/srt/speculative/ngram_worker.py`):

- `trie.cpp` `Trie::insert`: every suffix of the inserted tail, each cut to
  `max_trie_depth` tokens, is walked from the root; a new node goes to the front of its
  parent's recency list with frequency 1, an existing one gains 1 and moves to the front;
  then the walked path moves to the front of the global LRU, deepest node first (so the
  shallowest ends in front). Before a suffix is walked, if it is longer than the free
  node count, `squeeze` evicts that many least recently used nodes (leaves).
- `Trie::match`: a request's anchors (`MatchState`: the trie node of each suffix of
  length d = 1..min(len, max_trie_depth) ending at its last token) are advanced token by
  token from the last step's anchors when the request only grew, else rebuilt from the
  tail; an advanced anchor is looked up as a child of the previous one in the trie as it
  is now, so a suffix that entered the trie after the last step is found only by a
  rebuild (the cached state can differ from a fresh match, as in SGLang). Anchors with
  children seed the draft, longest first.
- `Trie::buildRecency` (BFS): per anchor a breadth-first walk that takes at most
  `breadth` most recent children per node, the breadth starting at
  (D - 1 - depth) * scale + min_bfs_breadth and shrinking by scale per level, scale =
  (max_bfs_breadth - min_bfs_breadth) / (D - 1); nodes merge by token into one draft
  tree until it holds draft_token_num - 1 nodes.
- `Trie::buildFrequency` (PROB): a max-heap (std::priority_queue, ties as libstdc++'s
  heap leaves them) of children weighted by their share of the top `max_bfs_breadth`
  children's frequencies times the parent's weight.
- `result.cpp` `fillResult`: the root (the last token), the tree's nodes breadth first,
  then token-0 nodes under the root up to draft_token_num nodes: SGLang verifies that
  many every step. SGLang orders siblings by a hash map; here they keep their insertion
  order (the ranks above). Verification does not depend on sibling order: siblings hold
  distinct tokens, except the token-0 padding.
- `ngram_worker.py`: each decode step matches the last `max_trie_depth` tokens of
  prompt + output (total length = the whole sequence's), verifies, then inserts that
  same tail; the prefill inserts nothing; a request's anchors are erased when it leaves
  the batch. The insert runs on a worker thread, joined (`synchronize`) before the next
  match, so every match sees every earlier insert.

External corpora (suffix automata, `speculative_ngram_external_corpus_path`) are not
reproduced: autotune never loads one.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable, Sequence


class TrieNode:
    """children: token -> node; recent: children's tokens, least recent first (SGLang's
    `lru` list reversed); version: bumped when the node is evicted, so cached anchors
    pointing at it go stale."""

    __slots__ = ("token", "parent", "children", "recent", "freq", "version")

    def __init__(self, token: int, parent: "TrieNode | None") -> None:
        self.token = token
        self.parent = parent
        self.children: dict[int, TrieNode] = {}
        self.recent: OrderedDict[int, None] = OrderedDict()
        self.freq = 0
        self.version = 1

    def by_recency(self) -> list["TrieNode"]:
        """Children, most recently inserted or touched first."""
        return [self.children[t] for t in reversed(self.recent)]

    def by_frequency(self) -> list["TrieNode"]:
        """Children, most frequent first, then by token (SGLang's `sorted_children`)."""
        return sorted(self.children.values(), key=lambda n: (-n.freq, n.token))


NodeRef = tuple[TrieNode, int]     # a node and the version it had when cached


@dataclass
class MatchState:
    """One request's cached anchors: anchors[d - 1] is the node of the length-d suffix
    ending at the request's last token (None: not in the trie)."""

    epoch: int = 0
    processed: int = 0
    anchors: list[NodeRef | None] = field(default_factory=list)


@dataclass(frozen=True)
class NgramParams:
    """SGLang's NGRAM fields (`speculative_ngram_*`, `speculative_num_draft_tokens`)."""

    max_trie_depth: int = 18
    min_bfs_breadth: int = 1
    max_bfs_breadth: int = 10
    draft_token_num: int = 12
    match_type: str = "BFS"
    capacity: int = 10_000_000

    def __post_init__(self) -> None:
        if self.max_trie_depth <= 1:
            raise ValueError(f"max_trie_depth must be greater than 1, got {self.max_trie_depth}")
        if not 0 < self.min_bfs_breadth <= self.max_bfs_breadth:
            raise ValueError(f"need 0 < min_bfs_breadth <= max_bfs_breadth, got "
                             f"{self.min_bfs_breadth}, {self.max_bfs_breadth}")
        if self.draft_token_num < 1:
            raise ValueError(f"draft_token_num must be at least 1, got {self.draft_token_num}")
        if self.match_type not in ("BFS", "PROB"):
            raise ValueError(f"match_type must be BFS or PROB, got {self.match_type!r}")
        if self.capacity < 2:
            raise ValueError(f"capacity must be at least 2, got {self.capacity}")


@dataclass
class NgramTree:
    """A verify block's draft: tokens[0] the root (the last token), nodes 1..N-1 with
    parents[i - 1] their parent's index (0 = the root), breadth first; N =
    draft_token_num. Padding nodes are token 0 under the root, after the `drafted`
    nodes the trie gave."""

    tokens: list[int]
    parents: list[int]
    drafted: int

    def depths(self) -> list[int]:
        """Each node's depth below the root (nodes 1..N-1; a parent comes first)."""
        out: list[int] = []
        for parent in self.parents:
            out.append(1 if parent == 0 else out[parent - 1] + 1)
        return out


class NgramCorpus:
    """The trie and every request's anchors (SGLang's `Ngram` with one trie and no
    external corpus)."""

    def __init__(self, params: NgramParams) -> None:
        self.params = params
        self.epoch = 1
        self.states: dict[int, MatchState] = {}
        self._clear()

    def _clear(self) -> None:
        self.root = TrieNode(-1, None)
        # Global LRU: least recently used first (SGLang's list back), so eviction pops
        # from the front here.
        self.lru: OrderedDict[TrieNode, None] = OrderedDict()
        self.free = self.params.capacity - 1          # the root holds one node
        self.evicted = 0

    def reset(self) -> None:
        """A flushed cache (`clear_cache_pool`): empty trie, every anchor stale."""
        self.epoch += 1
        self.states.clear()
        self._clear()

    # -- inserting -----------------------------------------------------------------

    def insert(self, tokens: Sequence[int]) -> None:
        depth = self.params.max_trie_depth
        for i in range(len(tokens)):
            suffix = tokens[i:i + min(len(tokens) - i, depth)]
            if len(suffix) > self.free:
                self._squeeze(len(suffix) - self.free)
            cursor, path = self.root, []
            for token in suffix:
                node = cursor.children.get(token)
                if node is None:
                    node = TrieNode(token, cursor)
                    node.freq = 1
                    cursor.children[token] = node
                    self.free -= 1
                else:
                    node.freq += 1
                cursor.recent[token] = None
                cursor.recent.move_to_end(token)
                self.lru[node] = None
                cursor = node
                path.append(node)
            for node in reversed(path):
                self.lru.move_to_end(node)

    def _squeeze(self, count: int) -> None:
        live = self.params.capacity - 1 - self.free
        if count > live:
            raise RuntimeError(f"the trie cannot free {count} nodes: it holds {live}")
        for _ in range(count):
            node, _ = self.lru.popitem(last=False)
            if node.children:
                raise RuntimeError("the least recently used trie node still has children")
            parent = node.parent
            assert parent is not None
            del parent.children[node.token]
            del parent.recent[node.token]
            node.version += 1
            self.free += 1
            self.evicted += 1

    # -- matching ------------------------------------------------------------------

    def _resolve(self, state: MatchState, ref: NodeRef | None) -> TrieNode | None:
        if ref is None or state.epoch != self.epoch or ref[0].version != ref[1]:
            return None
        return ref[0]

    def _rebuild(self, tail: Sequence[int], state: MatchState, total: int) -> None:
        depth = min(len(tail), self.params.max_trie_depth)
        state.epoch, state.processed = self.epoch, total
        state.anchors = [None] * depth
        for d in range(1, depth + 1):
            cursor: TrieNode | None = self.root
            for token in tail[len(tail) - d:]:
                cursor = cursor.children.get(token)
                if cursor is None:
                    break
            if cursor is not None:
                state.anchors[d - 1] = (cursor, cursor.version)

    def _advance(self, state: MatchState, appended: Sequence[int], total: int) -> bool:
        if state.epoch != self.epoch or any(
                ref is not None and self._resolve(state, ref) is None for ref in state.anchors):
            return False
        for token in appended:
            width = min(len(state.anchors) + 1, self.params.max_trie_depth)
            nxt: list[NodeRef | None] = [None] * width
            first = self.root.children.get(token)
            if first is not None:
                nxt[0] = (first, first.version)
            for d in range(1, width):
                ref = state.anchors[d - 1]
                if ref is None:
                    continue
                node = self._resolve(state, ref)
                if node is None:
                    return False
                child = node.children.get(token)
                if child is not None:
                    nxt[d] = (child, child.version)
            state.anchors = nxt
        state.processed = total
        return True

    def _match(self, tail: Sequence[int], state: MatchState, total: int
               ) -> list[tuple[TrieNode, int]]:
        forward = total >= state.processed
        appended = total - state.processed if forward else 0
        expected = min(state.processed, self.params.max_trie_depth)
        if not (state.epoch == self.epoch and forward and appended <= len(tail)
                and len(state.anchors) == expected
                and self._advance(state, tail[len(tail) - appended:], total)):
            self._rebuild(tail, state, total)
        out = []
        for d in range(len(state.anchors), 0, -1):
            node = self._resolve(state, state.anchors[d - 1])
            if node is not None and node.children:
                out.append((node, d))
        return out

    # -- drafting ------------------------------------------------------------------

    def draft(self, request: int, tail: Sequence[int], total: int) -> NgramTree:
        """The draft tree for `request` whose sequence is `total` tokens long and ends
        in `tail` (its last max_trie_depth tokens, at least one)."""
        if not tail:
            raise ValueError("an empty tail has no last token to draft from")
        state = self.states.setdefault(request, MatchState())
        anchors = self._match(tail, state, total)
        budget = self.params.draft_token_num - 1
        build = self._by_recency if self.params.match_type == "BFS" else self._by_frequency
        return _lay_out(tail[-1], self.params.draft_token_num, build(anchors, budget))

    def forget(self, request: int) -> None:
        """The request left the batch: its anchors are erased."""
        self.states.pop(request, None)

    def _by_recency(self, anchors: list[tuple[TrieNode, int]], budget: int
                    ) -> list[dict[int, int]]:
        p = self.params
        top = max(1, p.max_trie_depth - 1)
        scale = float(p.max_bfs_breadth - p.min_bfs_breadth) / top
        tree: list[dict[int, int]] = [{} for _ in range(budget + 1)]
        cursor = 1
        for anchor, depth in anchors:
            queue: deque[tuple[int, float, TrieNode]] = deque(
                [(0, (top - depth) * scale + p.min_bfs_breadth, anchor)])
            while queue and cursor <= budget:
                parent, breadth_now, node = queue.popleft()
                breadth = max(1, int(breadth_now))
                for child in node.by_recency()[:breadth]:
                    if cursor > budget:
                        break
                    pos = tree[parent].get(child.token)
                    if pos is None:
                        pos = tree[parent][child.token] = cursor
                        cursor += 1
                    queue.append((pos, breadth_now - scale, child))
        return tree

    def _by_frequency(self, anchors: list[tuple[TrieNode, int]], budget: int
                      ) -> list[dict[int, int]]:
        top_k = self.params.max_bfs_breadth
        tree: list[dict[int, int]] = [{} for _ in range(budget + 1)]
        heap = _MaxHeap(lambda entry: entry[2])
        cursor = 1

        def add_children(parent: int, node: TrieNode, weight: float) -> None:
            chosen = node.by_frequency()[:top_k]
            total = float(sum(child.freq for child in chosen))
            if total <= 0:
                total = 1.0
            for child in chosen:
                heap.push((parent, child, child.freq / total * weight))

        for anchor, _ in anchors:
            add_children(0, anchor, 1.0)
            while heap and cursor <= budget:
                parent, node, weight = heap.pop()
                pos = tree[parent].get(node.token)
                if pos is None:
                    pos = tree[parent][node.token] = cursor
                    cursor += 1
                add_children(pos, node, weight)
        return tree


class _MaxHeap:
    """std::priority_queue over a vector with libstdc++'s push_heap / pop_heap, so equal
    keys leave in the order SGLang's heap gives them (Python's heapq differs)."""

    def __init__(self, key: Callable[[tuple], float]) -> None:
        self.items: list[tuple] = []
        self.key = key

    def __bool__(self) -> bool:
        return bool(self.items)

    def _less(self, a: tuple, b: tuple) -> bool:
        return self.key(a) < self.key(b)

    def _sift_up(self, hole: int, top: int, value: tuple) -> None:
        items = self.items
        parent = (hole - 1) // 2
        while hole > top and self._less(items[parent], value):
            items[hole] = items[parent]
            hole = parent
            parent = (hole - 1) // 2
        items[hole] = value

    def push(self, value: tuple) -> None:
        self.items.append(value)
        self._sift_up(len(self.items) - 1, 0, value)

    def pop(self) -> tuple:
        items = self.items
        top = items[0]
        n = len(items) - 1
        if n > 0:
            value = items[n]
            items[n] = items[0]
            # __adjust_heap over the first n items, the hole at the root.
            hole = child = 0
            while child < (n - 1) // 2:
                child = 2 * (child + 1)
                if self._less(items[child], items[child - 1]):
                    child -= 1
                items[hole] = items[child]
                hole = child
            if n % 2 == 0 and child == (n - 2) // 2:
                child = 2 * (child + 1)
                items[hole] = items[child - 1]
                hole = child - 1
            self._sift_up(hole, 0, value)
        items.pop()
        return top


def _lay_out(last_token: int, size: int, tree: list[dict[int, int]]) -> NgramTree:
    """fillResult: the root, the tree's nodes breadth first (children in the order they
    were added), then token-0 padding under the root up to `size` nodes."""
    tokens, parents = [last_token], []
    queue: deque[tuple[int, int, int]] = deque((t, n, 0) for t, n in tree[0].items())
    while queue:
        token, node, parent = queue.popleft()
        tokens.append(token)
        parents.append(parent)
        here = len(tokens) - 1
        queue.extend((t, n, here) for t, n in tree[node].items())
    drafted = len(parents)
    while len(tokens) < size:
        tokens.append(0)
        parents.append(0)
    return NgramTree(tokens, parents, drafted)
