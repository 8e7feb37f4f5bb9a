"""Replay of S2D's early exits: the tables, and the cost of a pass to an exit.

The stack's own causal pass read at each exit (the first e layers of a full pass are
what a draft token exiting at e computes when the prefix is verified): exact for the
first draft token of a round; a later in-round token in the decoder sees CALM-propagated
keys/values of earlier drafts that exited early (approximate). With a trained `exits`
drafter the stack is the target's and each exit is read through its adapter, as the
drafter reads it.

Drafting time: per draft token, a pass through the stack to the exit it took, scored
at every exit it reached, its keys/values filled up to the deepest exit; a tree round
first runs the tokens its own cache has not seen through the whole stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from autotune.common.memory import TrimEvery, release_freed_memory
from autotune.schema.config import DecodeConfig
from autotune.models.loading import draft_model
from autotune.models.trained import exit_adapters
from autotune.replay import kept
from autotune.replay.draft_cost import PassDraftCost
from autotune.replay.reference import Reference
from autotune.replay.sources import TableSourceAdapter
from autotune.replay.tables import (
    Table,
    TableSource,
    reference_ids,
    shared_vocab,
    table_from_logits,
)

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.replay.sources import ReplaySource


# A prompt's hidden states after every layer are kept between configs while the kept
# ones fit in this (a screen replays many exit sets over the same prompts, each a pass
# over the whole prompt without them); past it they are made for the prompt's table and
# dropped, so a pool of any size holds at most this (issue 51). One limit for every
# source of the process (`replay.kept`), not one per Replayer alive (issue 59, item 6).
KEPT_HIDDEN_BYTES = 256 * 2**20
KEPT_KIND = "sorted_exit.hidden"
# The exit tables' logits (and log-probabilities) made before freed pages go back.
TRIM_EVERY_BYTES = 128 * 2**20


class SortedExitSource(TableSource):
    """The stack's causal pass read at every exit; a config's rule picks per row."""

    exact_depth = 1

    def __init__(self, target: "LoadedModel", draft: "LoadedModel | None") -> None:
        # A draft model's stack, else the target's (a trained `exits` drafter runs on the
        # target's own stack and reads each exit through its adapter, as the drafter does).
        model = draft_model(draft)
        self.stack = model if model is not None else target
        self.adapters = exit_adapters(draft)
        self.vocab = shared_vocab(target, model)
        self._sequences: dict[str, list[int]] = {}          # prompt id -> its sequence
        self._hidden: dict[str, dict[int, torch.Tensor]] = {}   # prompt id -> {layer: [1, R, H]}
        self._kept_bytes = 0
        self._layer_tables: dict[tuple[str, int, int], Table] = {}
        self._trim = TrimEvery(TRIM_EVERY_BYTES)

    def key(self, config: DecodeConfig) -> tuple[Any, ...]:
        return ("sorted_exit", tuple(config.exits), tuple(config.exit_thresholds()))

    def _forget_if_changed(self, ref: Reference) -> None:
        """Drop what is kept for `ref.prompt_id` if it was made for another sequence."""
        if self._sequences.get(ref.prompt_id, ref.sequence) != ref.sequence:
            states = self._hidden.pop(ref.prompt_id, None)
            if states is not None:
                self._kept_bytes -= sum(s.nbytes for s in states.values())
                kept.discard(KEPT_KIND, self, ref.prompt_id)
            self._layer_tables = {k: v for k, v in self._layer_tables.items()
                                  if k[0] != ref.prompt_id}
        self._sequences[ref.prompt_id] = ref.sequence

    def _hidden_states(self, ref: Reference) -> dict[int, torch.Tensor]:
        """The stack's hidden states of `ref`'s rows after each layer: kept ones, else
        one pass now (kept while they fit in KEPT_HIDDEN_BYTES)."""
        states = self._hidden.get(ref.prompt_id)
        if states is not None:
            kept.touch(KEPT_KIND, self, ref.prompt_id)
            return states
        forward = self.stack.forward
        ids = reference_ids(self.stack, ref)
        step = forward.begin(ids, forward.new_cache(1, ids.shape[1]))
        first = len(ref.prompt) - 1
        states = {}
        for layer in range(forward.n_layers):
            forward.run_layers(step, layer, layer + 1)
            states[layer + 1] = step.hidden[:, first:].clone()
        del step
        # The pass's cache and activations, over the whole prompt, are freed among the
        # small states kept: glibc keeps such pages (1.5 GB after the held-out pool's 80
        # prompts on the default model) unless handed back.
        release_freed_memory()
        size = sum(s.nbytes for s in states.values())
        if kept.admit(KEPT_KIND, self, ref.prompt_id, size, KEPT_HIDDEN_BYTES):
            self._hidden[ref.prompt_id] = states
            self._kept_bytes += size
        return states

    def forget_kept(self, key: Any) -> None:
        """The process's limit dropped prompt `key`'s hidden states (`replay.kept`); its
        exit tables, small, stay."""
        states = self._hidden.pop(key, None)
        if states is not None:
            self._kept_bytes -= sum(s.nbytes for s in states.values())

    def _exit_tables(self, ref: Reference, exits: tuple[int, ...], width: int
                     ) -> list[Table]:
        """`ref`'s table at each exit in `exits` (those not made yet from one pass)."""
        self._forget_if_changed(ref)
        missing = [e for e in exits if (ref.prompt_id, e, width) not in self._layer_tables]
        if missing:
            states = self._hidden_states(ref)
            forward = self.stack.forward
            for layer in missing:
                hidden = states[layer]
                if self.adapters is not None:
                    hidden = self.adapters.adapt(layer, hidden)
                logits = forward._linear(forward._rms(hidden, forward.final_norm),
                                         forward.lm_head, forward.lm_head_bias)[0]
                self._layer_tables[(ref.prompt_id, layer, width)] = table_from_logits(
                    logits, self.vocab, width)
                self._trim.made(2 * logits.nbytes)      # the logits and their log-softmax
        return [self._layer_tables[(ref.prompt_id, e, width)] for e in exits]

    @torch.inference_mode()
    def table(self, config: DecodeConfig, ref: Reference, width: int) -> Table:
        exits, thresholds = config.exits, config.exit_thresholds()
        tables = self._exit_tables(ref, tuple(exits), width)
        rows = tables[0].rows
        pick = []
        for row in range(rows):
            chosen = len(exits) - 1
            for i, threshold in enumerate(thresholds[:-1]):
                if tables[i].conf[row] >= threshold:
                    chosen = i
                    break
            pick.append(chosen)
        index = torch.tensor(pick)
        ids = torch.stack([t.ids for t in tables])[index, torch.arange(rows)]
        logp = torch.stack([t.logp for t in tables])[index, torch.arange(rows)]
        return Table(ids, logp, [tables[c].conf[r] for r, c in enumerate(pick)],
                     [exits[c] for c in pick])


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    return TableSourceAdapter(SortedExitSource(target, draft))


class SortedExitCost(PassDraftCost):
    """A pass to each draft's exit over the draft's stack (the target's without one)."""

    def _exits_reached(self, exit_layer: int | None) -> int:
        exits = list(self.config.exits)
        if exit_layer is None:
            return len(exits)
        return exits.index(exit_layer) + 1 if exit_layer in exits else len(exits)

    def pass_ms(self, tokens: int, exit_layer: int | None) -> float:
        parts = self.parts
        layers = parts.draft_layers if parts.draft_layers is not None else parts.target_layers
        depth = self.config.exits[-1]
        one = layers.exit_pass(exit_layer if exit_layer is not None else depth,
                               self._exits_reached(exit_layer), depth)
        return one * self.model.ratio(tokens)

    def run_share(self, exit_layer: int | None) -> float | None:
        """A pass to `exit_layer` of the target's own stack runs that many of its layers
        (an exit at the last layer: all of them, a full target pass); None over a
        separate draft model's stack."""
        if self.parts.draft_layers is not None:
            return None
        layer = exit_layer if exit_layer is not None else self.config.exits[-1]
        return self.parts.target_layers.run_share(layer, layer)

    def tree_catch_up_ms(self, tokens: int) -> float:
        """Tokens run through the whole draft stack without a head (S2D's own cache)."""
        layers = self.parts.draft_layers or self.parts.target_layers
        one = max(layers.base - layers.head, 0.0) + layers.layers * (layers.attn + layers.mlp)
        return one * self.model.ratio(tokens)

    @staticmethod
    def calibration_config(target: "LoadedModel", draft: "LoadedModel | None"
                           ) -> DecodeConfig | None:
        # Exits index the draft model's stack when there is one, else the target's (a
        # trained `exits` drafter's adapters run on the target's).
        model = draft_model(draft)
        stack = model if model is not None else target
        if not stack.forward.supports_layers:
            return None
        n = stack.n_layers
        exits = tuple(sorted({max(1, n // 3), max(2, 2 * n // 3), n}))
        return DecodeConfig(method="sorted_exit", k=4, exits=exits,
                            thresholds=(0.8, 0.5)[: len(exits) - 1])
