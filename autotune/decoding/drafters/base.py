"""The drafter interfaces: what the decoder asks of every drafting method.

A chain drafter (`Drafter`) `propose`s up to `limit` draft tokens after the current
sequence, with the probabilities it drew them from, asking the exit policy after each
token whether to go on; then it is told how many were accepted (`observe`) so it can cut
its own cache back. A drafter that can also grow a draft tree implements `TreeHooks`,
which `tree_drafting.TreeDrafter` drives; one that builds its whole tree itself from
token statistics (SGLang's NGRAM) is a `TreeProposer`. A drafter lives for one
generation and is made by its class's `build(DraftContext)`: nothing carries over
between runs or trials but the arm's cross-request state (below).

Cache conventions (batch size 1 for now; every tensor keeps its batch dimension):
the target's cache holds every token of the sequence but the last, which is still
"pending" (its keys and values are computed by the next verify pass). Self-drafters
(`layer_skip`, `sorted_exit` on the target) write scratch keys/values past that point
and cut the cache back before verification, which then overwrites those positions in
every layer. A drafter with its own cache (`draft_model`, `sorted_exit` over `--draft`)
catches up on the tokens it has not seen at the start of each round.

A method with state across requests (suffix decoding's cache of earlier outputs) gets it
as `DraftContext.shared`: one per arm, made by the decoder, so a drafter still lives for
one generation while what the engine would remember outlives it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Union

import torch

from autotune.decoding.policies import ExitPolicy
from autotune.decoding.sampling import probabilities

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig
    from autotune.schema.methods import MethodSpec
    from autotune.decoding.tree import DraftTree
    from autotune.models.hf_forward import HFCache
    from autotune.models.llama import KVCache
    from autotune.models.loading import LoadedModel

Cache = Union["KVCache", "HFCache"]


@dataclass
class Draft:
    """tokens: [B, k] int64; q: [B, k, V] draft probabilities (sampling only, else None);
    confidences: top-1 probability of each draft distribution; exit_layers: the layer
    each token left at (early-exit drafters only)."""

    tokens: torch.Tensor
    q: torch.Tensor | None
    confidences: list[float]
    exit_layers: list[int] = field(default_factory=list)

    @classmethod
    def empty(cls, seq: torch.Tensor) -> "Draft":
        """No draft tokens after seq [B, N]: the round is one plain target step."""
        return cls(seq.new_empty((seq.shape[0], 0)), None, [])

    @classmethod
    def fixed_tokens(cls, seq: torch.Tensor, found: list[int], confidences: list[float],
                     policy: ExitPolicy, vocab_size: int, sampling: bool) -> "Draft":
        """A model-free draft after seq [1, N]: `found` tokens (each with the confidence
        its method gives it) kept while `policy.keep_going` allows; deterministic, so
        under sampling q is one-hot [1, k, vocab_size] (verified as vLLM and TensorRT-LLM
        verify n-gram drafts)."""
        kept = kept_by_policy(confidences[:len(found)], policy)
        tokens = torch.tensor(found[:kept], dtype=seq.dtype, device=seq.device).reshape(1, -1)
        q = (torch.nn.functional.one_hot(tokens, vocab_size).float() if sampling else None)
        return cls(tokens, q, list(confidences[:kept]))

    @property
    def k(self) -> int:
        return self.tokens.shape[1]


def kept_by_policy(confidences: list[float], policy: ExitPolicy) -> int:
    """How many of a proposed chain's tokens a drafter keeps: each is kept, then the
    policy asked (with its confidence) whether to draft another."""
    kept = 0
    for confidence in confidences:
        kept += 1
        if not policy.keep_going(confidence):
            break
    return kept


class TokenChooser:
    """Turns a draft distribution's logits [B, V] into a token, its probabilities, and
    its top-1 confidence, greedily or by sampling (same temperature/top-p as the target).
    With `greedy_drafts` a sampled run still drafts the most probable token, verified as
    a one-hot q (vLLM's greedy drafting): lossless, but it accepts less than sampling.
    With `drafted_confidence` a sampled token's confidence is its own probability, not
    the top-1's (transformers' ConfidenceCriteria); under greedy the two are one.
    Without `draft_top_p` a sampled draft (and its q) comes from softmax(logits / T)
    alone, the target's top-p not applied (SGLang's `sample_draft_proposal`,
    `EngineRules.sampled_drafts_skip_top_p`): rejection and block verification stay
    lossless for any q, but the acceptance is SGLang's, lower than with a top-p q."""

    def __init__(self, temperature: float, top_p: float, vocab_size: int,
                 generator: torch.Generator | None, greedy_drafts: bool = False,
                 drafted_confidence: bool = False, draft_top_p: bool = True) -> None:
        self.temperature, self.top_p = temperature, top_p
        self.vocab_size = vocab_size           # the shared vocabulary of draft and target
        self.generator = generator
        self.greedy_drafts = greedy_drafts
        self.drafted_confidence = drafted_confidence
        # The top-p a draft's q is filtered by: the target's, or none (1.0) for an
        # engine that samples drafts from the bare tempered softmax. An argmax draft is
        # the same token either way; its confidence keeps the top-p one.
        self.draft_top_p = top_p if (draft_top_p or greedy_drafts) else 1.0

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, float]:
        logits = logits[..., : self.vocab_size]
        if self.temperature == 0.0:
            confidence, token = torch.softmax(logits.float(), dim=-1).max(dim=-1)
            return token[:, None], None, float(confidence[0])
        q = probabilities(logits, self.temperature, self.draft_top_p)
        if self.greedy_drafts:
            confidence, token = q.max(dim=-1)
            one_hot = torch.nn.functional.one_hot(token, q.shape[-1]).to(q.dtype)
            return token[:, None], one_hot, float(confidence[0])
        token = torch.multinomial(q, 1, generator=self.generator)
        if self.drafted_confidence:
            return token, q, float(q[0, int(token[0, 0])])
        return token, q, float(q.max(dim=-1).values[0])


def stack_model(spec: "MethodSpec", target: "LoadedModel",
                draft: "LoadedModel | None") -> "LoadedModel":
    """The model whose layers the method's layer-indexed keys (skip sets, exits) name:
    the draft model where `spec.stack_role` says so, else the target (a trained head
    has no layers to index)."""
    if draft is not None and draft.trained_kind is None and spec.stack_role(True) == "draft":
        return draft
    return target


@dataclass(frozen=True)
class DraftContext:
    """What a drafter's `build` may use for one generation.

    target / draft: the loaded models (draft None without `--draft`); config: the
    candidate; target_cache: the target's cache, which self-drafters write scratch into;
    max_len: positions any cache of this generation needs; choose: draft logits -> token;
    vocab_size: the vocabulary draft and target share; spec: the method's registry entry;
    shared: what the method keeps across the requests this arm serves
    (`MethodSpec.shared_state`), None for a method that keeps nothing.
    """

    target: "LoadedModel"
    draft: "LoadedModel | None"
    config: "DecodeConfig"
    target_cache: Cache
    max_len: int
    choose: TokenChooser
    vocab_size: int
    spec: "MethodSpec"
    shared: Any = None

    def layer_model(self) -> "LoadedModel":
        """The model whose layers the method's layer-indexed keys name (`stack_model`)."""
        return stack_model(self.spec, self.target, self.draft)


class Drafter(ABC):
    """A chain drafter: one per generation, built by `build(context)`."""

    @classmethod
    @abstractmethod
    def build(cls, context: DraftContext) -> "Drafter":
        """The drafter for one generation of `context.config`."""

    def prefill(self, prompt: torch.Tensor) -> None:
        """See the prompt [B, N] before decoding starts (timed as prefill)."""

    @abstractmethod
    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        """Up to `limit` (>= 1) draft tokens after seq [B, N]; `policy.keep_going(c)`
        after each token of top-1 probability c says whether to draft another."""

    def observe(self, n_accepted: int) -> None:
        """The verifier accepted the first `n_accepted` tokens of the last proposal."""

    def target_features(self, features: torch.Tensor) -> None:
        """The target's features [B, T, H] (final-normed hidden states) of the next T
        positions its last pass kept: the prompt after the prefill, then the pending
        token and the accepted drafts after each round. Called only for methods whose
        registry entry says `reads_target_features` (trained heads)."""

    def finish(self, seq: torch.Tensor) -> None:
        """The generation is over; seq [B, N] is the prompt and every token it generated
        (a drafter with cross-request state files the last round's tokens)."""

    def own_cache(self) -> Cache | None:
        """A cache the drafter holds besides the target's (counted in the memory a
        generation uses), or None."""
        return None


class TreeHooks(ABC):
    """The three calls through which `TreeDrafter` grows a draft tree over a drafter.

    `cache` is the cache the tree's levels are written to (the target's for a
    self-drafter, else the drafter's own); its length after `tree_root` is where the
    tree's scratch begins.
    """

    cache: Cache

    @abstractmethod
    def tree_root(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
        """Score the pending last token of seq [1, N] (catching up first where the
        drafter keeps its own cache): (draft logits after it [V], its exit layer or None)."""

    @abstractmethod
    def tree_level(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, list[int] | None]:
        """Append T nodes tokens [1, T] at rotary positions [T] to the cache at its
        current length, each seeing the scratch columns mask [T, M] allows: (logits
        [T, V], exit layer per node or None)."""

    @abstractmethod
    def tree_finish(self) -> None:
        """Drop the tree's scratch: the cache is back where `tree_root` left the prefix."""


class TreeProposer(ABC):
    """A drafter that builds its own draft tree each round (`MethodSpec.own_trees`),
    from token statistics alone: no tree knobs, no draft passes."""

    @abstractmethod
    def propose_tree(self, seq: torch.Tensor) -> "DraftTree":
        """The tree to verify after seq [1, N] (its root is seq's last token)."""


DraftStep = Callable[[torch.Tensor], tuple[torch.Tensor, "torch.Tensor | None", float]]


class _Collector:
    """Accumulates draft tokens one at a time and packs them into a Draft."""

    def __init__(self) -> None:
        self.tokens: list[torch.Tensor] = []
        self.qs: list[torch.Tensor] = []
        self.confidences: list[float] = []

    def add(self, token: torch.Tensor, q: torch.Tensor | None, confidence: float) -> None:
        self.tokens.append(token)
        if q is not None:
            self.qs.append(q)
        self.confidences.append(confidence)

    def draft(self) -> Draft:
        q = torch.stack(self.qs, dim=1) if self.qs else None
        return Draft(torch.cat(self.tokens, dim=1), q, self.confidences)


def draft_chain(first_feed: torch.Tensor, limit: int, policy: ExitPolicy, step: DraftStep) -> Draft:
    """Draft token by token: `step(feed)` scores the tokens fed [B, T] and returns the
    next draft token [B, 1], its probabilities and confidence; each token is fed back in
    turn. Stops after `limit` tokens or when the policy says so (the last token is never
    fed, so it costs no draft pass)."""
    out = _Collector()
    feed = first_feed
    for _ in range(limit):
        token, q, confidence = step(feed)
        out.add(token, q, confidence)
        if len(out.tokens) == limit or not policy.keep_going(confidence):
            break
        feed = token
    return out.draft()
