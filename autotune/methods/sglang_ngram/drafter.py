"""SGLang's NGRAM drafter: the shared corpus (corpus.py) driven as `ngram_worker.py`
drives it in the release of PROVENANCE["sglang"], one request at a time.

Per decode step of a request: match the last `max_trie_depth` tokens of prompt + output
(with the whole length, so cached anchors advance), verify the draft tree, then insert
that same tail into the trie. The prefill step neither matches nor inserts, and a
finished request's anchors are erased; the trie outlives every request (the arm's
cross-request state).
"""

from __future__ import annotations

from typing import Sequence

import torch

from autotune.schema.config import DecodeConfig
from autotune.decoding.drafters.base import Draft, DraftContext, Drafter, TreeProposer
from autotune.decoding.policies import ExitPolicy
from autotune.decoding.tree import DraftTree
from autotune.methods.sglang_ngram.corpus import NgramCorpus, NgramParams, NgramTree


def params_of(config: DecodeConfig) -> NgramParams:
    """The corpus fields of `config` (k tree nodes + the root = num_draft_tokens)."""
    return NgramParams(max_trie_depth=config.sglang_ngram_max_trie_depth,
                       min_bfs_breadth=config.sglang_ngram_min_bfs_breadth,
                       max_bfs_breadth=config.sglang_ngram_max_bfs_breadth,
                       draft_token_num=config.k + 1,
                       match_type=config.sglang_ngram_match_type,
                       capacity=config.sglang_ngram_capacity)


class NgramState:
    """What one arm's SGLang server keeps across requests: the trie (and the anchors of
    the requests in flight), plus the next request id."""

    def __init__(self, config: DecodeConfig) -> None:
        self.corpus = NgramCorpus(params_of(config))
        self._next_id = 0

    def new_request(self) -> int:
        request = self._next_id
        self._next_id += 1
        return request

    def absorb(self, prompt: Sequence[int], response: Sequence[int],
               max_new_tokens: int) -> None:
        """A request served untimed: its steps replayed along `response` (greedy: each
        step accepts the tree's path of the response's next tokens), so the trie gains
        exactly the tails serving it inserted."""
        proposer = NgramProposer(self, prompt)
        sequence = list(prompt) + list(response)
        g = 1
        while g < len(response):
            tree = proposer(sequence[:len(prompt) + g])
            g += accepted_along(tree, response[g:]) + 1
        proposer.finish()


class NgramProposer:
    """One request's draft trees, asked once per decode step in order."""

    def __init__(self, state: NgramState, prompt: Sequence[int]) -> None:
        self.corpus = state.corpus
        self.request = state.new_request()
        self.depth = self.corpus.params.max_trie_depth

    def __call__(self, tokens: Sequence[int]) -> NgramTree:
        """The tree after `tokens` (prompt + output so far); the step's tail is then
        inserted, as SGLang does after verifying it."""
        tail = list(tokens[-self.depth:])
        tree = self.corpus.draft(self.request, tail, len(tokens))
        self.corpus.insert(tail)
        return tree

    def finish(self) -> None:
        self.corpus.forget(self.request)


def accepted_along(tree: NgramTree, reference: Sequence[int]) -> int:
    """Greedy tree verification: the depth of the path of `reference`'s tokens."""
    children: dict[tuple[int, int], int] = {}
    for node, (token, parent) in enumerate(zip(tree.tokens[1:], tree.parents), start=1):
        children.setdefault((parent, token), node)
    node = depth = 0
    for token in reference:
        child = children.get((node, token))
        if child is None:
            break
        node, depth = child, depth + 1
    return depth


def draft_tree(tree: NgramTree, device: torch.device) -> DraftTree:
    """The decoder's DraftTree of an NGRAM tree (padding included: SGLang verifies it)."""
    depths = tree.depths()
    tokens = torch.tensor([tree.tokens[1:]], dtype=torch.long, device=device)
    return DraftTree(tokens, list(tree.parents), depths, [1.0] * len(depths))


class SglangNgramDrafter(Drafter, TreeProposer):
    """The tree SGLang's corpus drafts each step; deterministic, so under sampling the
    tree is verified with one-hot drafts (the multi-candidate rule)."""

    def __init__(self, state: NgramState) -> None:
        self.state = state
        self.proposer: NgramProposer | None = None

    @classmethod
    def build(cls, context: DraftContext) -> "SglangNgramDrafter":
        state = context.shared if context.shared is not None else NgramState(context.config)
        return cls(state)

    def prefill(self, prompt: torch.Tensor) -> None:
        self.proposer = NgramProposer(self.state, prompt[0].tolist())

    def propose_tree(self, seq: torch.Tensor) -> DraftTree:
        assert self.proposer is not None, "prefill comes first"
        return draft_tree(self.proposer(seq[0].tolist()), seq.device)

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        raise NotImplementedError("sglang_ngram drafts trees (propose_tree)")

    def finish(self, seq: torch.Tensor) -> None:
        if self.proposer is not None:
            self.proposer.finish()
            self.proposer = None
