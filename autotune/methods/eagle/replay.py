"""Replay of a trained EAGLE head: anchor tables (autotune/replay/heads.py), and the cost
of its passes.

The head's cache entry j is the pair (feature j, token j+1), and a round at g keeps
entries 0..P+g-2 (all built from the target's features), so one causal head pass over
the whole sequence's pairs is every anchor's catch-up; its output at entry P+g-2 scores
depth 1. Depth d+1 feeds the head its depth-d predicted feature with the reference
token tokens[g+d-1] (while drafts are accepted they equal the reference). All anchors
of a chunk step together in one head pass with a mask: each row sees the catch-up
entries of its own round and its own earlier steps (the decoder's chain pass sees
exactly those, at the same rotary positions). Past the reference's end (after an EOS)
an anchor is fed the head's own top-1 drafts, as the decoder's chain is once every
draft up to the end was accepted (their cost counts; none is emitted). Tables are built
at least MIN_DEPTH deep and deepened when a heuristic exit's K outgrows them.

Fidelity (greedy): the accepted tokens of a chain are exact; a confidence or adaptive
exit reads, after a rejection, the confidences of the draft along the reference where
the decoder drafts on from its rejected token (the drafted count, and the adaptive
policy's state); static trees are exact; a dynamic tree wider than 1 gives off-path
nodes' children the on-path node's distribution at the same depth (frontier and
rerank).

Drafting time: a chain's first pass catches up on the pairs since its last round (the
whole prompt in the first round), then one one-token pass per further draft, each pass
= the head's layer over the tokens fed + the LM head over the last one + picking a
token; a tree: the root's catch-up pass, then one pass per level over the nodes fed
(the LM head over all of them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import MAX_DRAFT_TOKENS
from autotune.schema.shape import DYNAMIC
from autotune.models.llama import KVCache, LlamaForward
from autotune.replay.costs import interpolate
from autotune.replay.parts import DRAFT_SIZES, head_curve, head_inputs
from autotune.replay.draft_cost import HeadDraftCost, HeadParts
from autotune.replay.heads import AnchoredTrack, AnchorRows, AnchorTables, HeadSource
from autotune.replay.reference import Reference
from autotune.replay.simulate import OwnCache, ReplayRound
from autotune.replay.sources import TAU_EXACT_POLICIES
from autotune.replay.tables import table_from_logits

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.models.trained import HeadForward
    from autotune.replay.sources import ReplaySource

MIN_DEPTH = 8               # tables are built at least this deep (later configs reuse them)
CHUNK = 64                  # anchors stepped together (bounds the scratch and its mask)


def _own_cache(prompt_len: int) -> OwnCache:
    """How the head's cache catches up (the cost of a chain's first pass): it holds no
    entry before its first round, which catches up on the whole prompt, and each round
    crops back to the pairs of target features."""
    return OwnCache(seen=1 - prompt_len, keeps_drafts=False)


# ------------------------------------------------------------------ the tables

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
    out = AnchorRows(anchors, depth, width)
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


# ------------------------------------------------------------------ the source

class EagleSource(HeadSource):
    """EAGLE's anchor tables; see the module docstring for what is exact."""

    kind = "eagle"

    def _depth(self, config: DecodeConfig) -> int:
        shape = config.shape
        # A heuristic exit starts at k; its track deepens the tables if K outgrows them.
        needed = shape.levels if shape.is_tree else config.k
        return max(MIN_DEPTH, min(needed, MAX_DRAFT_TOKENS))

    def _build(self, ref: Reference, features: torch.Tensor, width: int, depth: int
               ) -> AnchorTables:
        return eagle_tables(self.head, features, ref, self.vocab, width, depth)

    def _track(self, ref: Reference, tables: AnchorTables) -> AnchoredTrack:
        width = tables.width

        def deepen(limit: int) -> AnchorTables:
            # Doubling: a growing K rebuilds the tables a few times, not every round.
            depth = min(max(limit, 2 * self._at_least(ref, width, 1).depth), MAX_DRAFT_TOKENS)
            return self._at_least(ref, width, depth)

        return AnchoredTrack(ref, tables, own_cache=_own_cache(len(ref.prompt)),
                             deepen=deepen)

    def fidelity(self, config: DecodeConfig) -> tuple[bool, list[str]]:
        shape = config.shape
        if shape.kind == DYNAMIC and shape.width > 1:
            return False, ["dynamic tree: off-path nodes' children are given the on-path "
                           "node's probabilities at the same depth (frontier and rerank)"]
        if shape.is_tree or config.exit_policy in ("fixed", "heuristic"):
            return True, []
        return config.exit_policy in TAU_EXACT_POLICIES, [
            f"{config.exit_policy} exit: draft tokens after a rejection take the "
            "confidences of the head's draft along the reference (drafted count)"]


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    return EagleSource(target, draft)


# ------------------------------------------------------------------ the draft cost

class EagleCost(HeadDraftCost):
    """The head's passes (module docstring), times the in-loop factor, plus a tree's
    per-node bookkeeping."""

    def round_ms(self, r: ReplayRound) -> float:
        head = self.head
        choose = self.parts.target_layers.choose
        tree = self.config.is_tree
        nodes = self.parts.tree_node * r.drafted if tree else 0.0
        total = 0.0
        for i, tokens in enumerate(r.passes):
            if tree:
                # The root pass catches up and scores the pending token; a level's pass
                # scores every node it feeds.
                fed = tokens + r.catch_up if i == 0 else tokens
                total += interpolate(head.layer, fed) + interpolate(head.logits, 1 if i == 0
                                                                    else tokens)
            else:
                total += interpolate(head.layer, tokens) + interpolate(head.logits, 1) + choose
        return total * self.factor + nodes

    @staticmethod
    def calibration_config(target: "LoadedModel", draft: "LoadedModel | None"
                           ) -> DecodeConfig | None:
        # A trained head serves its own method only (the decoder refuses the others).
        if draft is None or draft.trained_kind != "eagle":
            return None
        return DecodeConfig(method="eagle", k=4)

    @staticmethod
    def chain_passes(generation: Any) -> list[list[int]]:
        """A chain's first pass catches up as the replay's does (`_own_cache`: the
        whole prompt in the first round, then 1 + the last round's accepted)."""
        cache = _own_cache(generation.prompt_len)
        out, g = [], 1
        for r in generation.rounds:
            out.append(cache.chain(g, r.drafted, r.accepted))
            g += r.emitted
        return out

    @staticmethod
    def measure(target: "LoadedModel", draft: "LoadedModel", clock: Callable[[], float],
                context: int) -> HeadParts:
        """The head's fc + decoder layer over n pairs after `context` entries, and the
        target's LM head over n features (`parts.head_inputs`)."""
        head: HeadForward = draft.forward          # type: ignore[assignment]
        inputs = head_inputs(target, clock, context)
        features, ids, context = inputs.features, inputs.ids, inputs.context
        layer_forward, fc = head.layer_forward, head.fc_weight
        assert layer_forward is not None
        with torch.inference_mode():
            cache = layer_forward.new_cache(1, context + max(DRAFT_SIZES))
            _eagle_pass(layer_forward, fc, cache, features[:, :context], ids[:, :context])

            def layer(n: int) -> None:
                _eagle_pass(layer_forward, fc, cache, features[:, context:context + n],
                            ids[:, context:context + n])

            # The crop back to the context is untimed, as a forward curve's is.
            layers = head_curve(layer, clock, target.device, reset=lambda n: cache.crop(context))
        return HeadParts("eagle", layers, inputs.logits)
