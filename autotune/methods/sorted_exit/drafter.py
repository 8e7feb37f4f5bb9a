"""`sorted_exit`: S2D's early exits over a draft stack (Kavehzadeh et al., 2024, Alg. 1).

`first_confident_exit` is THE exit rule, shared by the chain drafter, the tree hooks and
the agreement proxy: each token takes the distribution of the first exit whose top-1
probability reaches that exit's threshold; the deepest exit always emits.

`exit_logits` is THE read-out of an exit: the stack's final norm + LM head on the hidden
state after e layers, through the trained adapter of exit e when `--draft` is a trained
`exits` drafter (`autotune train-draft --kind exits`; the stack is then the target's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from autotune.decoding.drafters.base import (
    Cache,
    Draft,
    DraftContext,
    Drafter,
    TokenChooser,
    TreeHooks,
    draft_chain,
)
from autotune.decoding.policies import ExitPolicy
from autotune.models.heads import ExitAdapters
from autotune.models.llama import KVCache, LlamaForward, Step
from autotune.models.trained import exit_adapters

# Exit logits [T, V] -> each token's top-1 probability [T].
Confidence = Callable[[torch.Tensor], list[float]]


@dataclass
class ExitChoice:
    """logits: [T, V], each token's logits at the exit it took; exit_layers: that exit
    per token; layers_run: the deepest layer the pass ran (keys/values of deeper layers
    are still missing)."""

    logits: torch.Tensor
    exit_layers: list[int]
    layers_run: int


def top1_probability(vocab_size: int) -> Confidence:
    """The softmax's largest probability over the shared vocabulary, per row."""
    def confidence(logits: torch.Tensor) -> list[float]:
        probs = torch.softmax(logits[:, :vocab_size].float(), dim=-1)
        return probs.max(dim=-1).values.tolist()
    return confidence


def exit_logits(forward: LlamaForward, state: Step, layer: int,
                adapters: ExitAdapters | None = None) -> torch.Tensor:
    """Exit `layer`'s logits [B, T, V] for the hidden state [B, T, H] of `state`, which
    has run the stack's first `layer` layers: the final norm and LM head read it as it
    is, or as exit `layer`'s trained adapter makes it (the stack's state itself is left
    alone: deeper layers and the keys/values of an early exit use the plain state)."""
    if adapters is None or layer not in adapters.layers:
        return forward.logits(state)
    adapted = adapters.adapt(layer, state.hidden)
    return forward.logits(dataclasses.replace(state, hidden=adapted))


def first_confident_exit(forward: LlamaForward, state: Step, exits: tuple[int, ...],
                         thresholds: tuple[float, ...], confidence: Confidence,
                         adapters: ExitAdapters | None = None) -> ExitChoice:
    """Run the T tokens begun in `state` exit by exit (each exit continues from the
    previous one's hidden state, so no layer runs twice): a token takes the first exit
    where `confidence` of its logits reaches that exit's threshold, the deepest exit
    (exits[-1]) takes the rest. The pass stops once every token has an exit, so tokens
    that left early still get real deeper keys/values while another goes on.

    `confidence` is called at every exit the pass reaches, in order (a sampling drafter
    draws its token there). `adapters`: trained exit adapters (`exit_logits`)."""
    t = state.hidden.shape[1]
    rows: list[torch.Tensor | None] = [None] * t
    exit_layers = [0] * t
    done = 0
    for exit_layer, threshold in zip(exits, thresholds):
        forward.run_layers(state, done, exit_layer)
        done = exit_layer
        logits = exit_logits(forward, state, exit_layer, adapters)[0]
        scores = confidence(logits)
        deepest = exit_layer == exits[-1]
        for i in range(t):
            if rows[i] is None and (deepest or scores[i] >= threshold):
                rows[i], exit_layers[i] = logits[i], exit_layer
        if all(row is not None for row in rows):
            break
    return ExitChoice(torch.stack(rows), exit_layers, done)  # type: ignore[arg-type]


class SortedExitDrafter(Drafter, TreeHooks):
    """Each draft token runs the stack's layers up to the first exit n1, scores the exit
    (final norm + LM head) and is taken there if `first_confident_exit` says so;
    otherwise the same hidden state continues to the next exit. A token that left early
    gets keys/values for the deeper layers of the stack from its exit hidden state
    (CALM's state propagation), so later draft tokens that go deeper attend to it.

    With the target as the stack it shares the target's cache (scratch past the verified
    prefix, cut back before verification). With a separate draft model it keeps its own
    cache and only ever keeps the full-stack keys/values of verified tokens. With a
    trained `exits` drafter the stack is the target and each exit reads through its
    adapter (`adapters`).
    """

    def __init__(self, forward: LlamaForward, cache: KVCache, exits: tuple[int, ...],
                 thresholds: tuple[float, ...], choose: TokenChooser,
                 owns_cache: bool = False, adapters: ExitAdapters | None = None) -> None:
        self.forward, self.cache, self.choose = forward, cache, choose
        self.exits, self.thresholds = exits, thresholds
        self.adapters = adapters
        self.depth = exits[-1]
        self.owns_cache = owns_cache
        self.verified = 0

    @classmethod
    def build(cls, context: DraftContext) -> "SortedExitDrafter":
        stack = context.layer_model()
        own = stack is not context.target
        cache = stack.forward.new_cache(1, context.max_len) if own else context.target_cache
        config = context.config
        return cls(stack.forward, cache, config.exits, config.exit_thresholds(), context.choose,
                   owns_cache=own, adapters=exit_adapters(context.draft))

    def own_cache(self) -> Cache | None:
        return self.cache if self.owns_cache else None

    def _run_stack(self, tokens: torch.Tensor) -> None:
        """Full draft stack, no head: for tokens the own cache has not seen yet."""
        step = self.forward.begin(tokens, self.cache)
        self.forward.run_layers(step, 0, self.depth)

    def _catch_up(self, seq: torch.Tensor) -> None:
        if self.cache.length < seq.shape[1] - 1:          # own cache only
            self._run_stack(seq[:, self.cache.length:-1])

    def _exit(self, state: Step, confidence: Confidence) -> ExitChoice:
        """The exit rule over the tokens begun in `state`, then keys/values for the
        layers below the deepest exit run."""
        choice = first_confident_exit(self.forward, state, self.exits, self.thresholds,
                                      confidence, self.adapters)
        if choice.layers_run < self.depth:
            self.forward.fill_kv(state, choice.layers_run, self.depth)
        return choice

    def prefill(self, prompt: torch.Tensor) -> None:
        if self.cache.length < prompt.shape[1] - 1:          # own cache only
            self._run_stack(prompt[:, self.cache.length:])

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        self._catch_up(seq)
        verified = self.cache.length
        exit_layers: list[int] = []

        def step(feed: torch.Tensor):
            # The chooser draws at every exit reached (its top-1 probability is the
            # confidence); the exit taken is the last one reached.
            picks: list[tuple[torch.Tensor, torch.Tensor | None, float]] = []

            def confidence(logits: torch.Tensor) -> list[float]:
                picks.append(self.choose(logits))
                return [picks[-1][2]]

            choice = self._exit(self.forward.begin(feed, self.cache), confidence)
            exit_layers.append(choice.exit_layers[0])
            return picks[-1]

        draft = draft_chain(seq[:, -1:], limit, policy, step)
        draft.exit_layers = exit_layers
        self.cache.crop(verified)
        return draft

    # Draft trees: a level's tokens go through the exits in one pass; a node's children
    # come from the distribution at its own exit.
    def tree_root(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
        self._catch_up(seq)
        self.verified = self.cache.length
        choice = self._exit(self.forward.begin(seq[:, -1:], self.cache),
                            top1_probability(self.choose.vocab_size))
        return choice.logits[0], choice.exit_layers

    def tree_level(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, list[int] | None]:
        state = self.forward.begin(tokens, self.cache, None, mask, positions)
        choice = self._exit(state, top1_probability(self.choose.vocab_size))
        return choice.logits, choice.exit_layers

    def tree_finish(self) -> None:
        self.cache.crop(self.verified)
