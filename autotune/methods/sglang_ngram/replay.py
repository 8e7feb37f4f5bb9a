"""Replay of SGLang's NGRAM: the same corpus fed the reference continuations in the
order the decoder serves the prompts (exact under greedy decoding, where the decoder's
outputs are the references); each round verifies the whole tree (k nodes + the root)
and drafting costs one trie match and insert (the parts' `ngram_lookup`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.decoding.config import DecodeConfig
from autotune.decoding.policies import ExitPolicy
from autotune.methods.sglang_ngram.drafter import NgramProposer, NgramState, accepted_along
from autotune.replay.draft_cost import DraftCost
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, ReplayRound, Track

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.replay.sources import ReplaySource


class NgramTrack:
    """One prompt's trees along its reference, through the pass's shared corpus."""

    def __init__(self, ref: Reference, state: NgramState) -> None:
        self.ref, self.sequence = ref, ref.sequence
        self.proposer = NgramProposer(state, ref.prompt)

    def chain(self, g: int, limit: int, policy: ExitPolicy) -> ChainDraft:
        raise TypeError("sglang_ngram drafts trees: replay it with own_tree")

    def own_tree(self, g: int) -> tuple[int, int, int]:
        """(tree nodes, accepted depth, deepest node) of the round after g tokens."""
        tree = self.proposer(self.sequence[:len(self.ref.prompt) + g])
        accepted = accepted_along(tree, self.ref.tokens[g:])
        depths: list[int] = []
        for parent in tree.parents:
            depths.append(1 if parent == 0 else depths[parent - 1] + 1)
        return len(tree.parents), accepted, max(depths, default=0)

    def finish(self) -> None:
        self.proposer.finish()


class NgramSource:
    """One corpus per config and replay pass (`prepare` starts a pass); tracks are asked
    for in the decoder's prompt order, each request finished before the next starts."""

    def __init__(self) -> None:
        self._states: dict[DecodeConfig, NgramState] = {}
        self._open: dict[DecodeConfig, NgramTrack] = {}

    def prepare(self, config: DecodeConfig, refs: list[Reference]) -> None:
        self._states[config] = NgramState(config)
        self._open.pop(config, None)

    def track(self, config: DecodeConfig, ref: Reference) -> Track:
        if config not in self._states:
            self.prepare(config, [ref])
        last = self._open.pop(config, None)
        if last is not None:
            last.finish()
        track = NgramTrack(ref, self._states[config])
        self._open[config] = track
        return track

    def fidelity(self, config: DecodeConfig) -> tuple[bool, list[str]]:
        if config.greedy:
            return True, []
        return False, ["sglang_ngram: the trie holds the greedy references, not the "
                       "sampled outputs the decoder inserts"]


def source(target: "LoadedModel", draft: "LoadedModel | None") -> "ReplaySource":
    return NgramSource()


class NgramCost(DraftCost):
    """One trie match and insert per round (priced as an n-gram lookup)."""

    def round_ms(self, r: ReplayRound) -> float:
        return self.parts.ngram_lookup
