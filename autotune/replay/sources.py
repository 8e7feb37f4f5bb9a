"""Replay sources: per method (named by `MethodSpec.replay`), one prompt's `Track` for a
config, and what about its replay is exact.

`source(target, draft) -> ReplaySource`; the source keeps what is shared between
configs (a draft's table, the target's full keys/values, a stack's hidden states, a
trained head's anchor tables), so a search replays many configs of one method for the
price of one pass per distinct table key. Trained heads (`eagle`, `medusa`) draft from
the round's start, not the position, so their sources live in heads.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from autotune.decoding.shape import DYNAMIC
from autotune.replay.reference import Reference
from autotune.replay.simulate import ChainDraft, NgramTrack, TableTrack, Track
from autotune.replay.tables import (
    DraftModelSource,
    LayerSkipSource,
    SortedExitSource,
    TableSource,
    table_width,
)

if TYPE_CHECKING:
    from autotune.decoding.config import DecodeConfig
    from autotune.decoding.policies import ExitPolicy
    from autotune.models.loading import LoadedModel

TAU_EXACT_POLICIES = ("fixed", "heuristic", "confidence")


class ReplaySource(Protocol):
    def track(self, config: "DecodeConfig", ref: Reference) -> Track: ...

    def fidelity(self, config: "DecodeConfig") -> tuple[bool, list[str]]:
        """(whether replay's accepted tokens per round, hence τ, are exact, notes on what
        is approximate)."""
        ...


class _NoDraftTrack:
    def chain(self, g: int, limit: int, policy: "ExitPolicy") -> ChainDraft:
        return ChainDraft(0, 0, [], [])


class NoDraftSource:
    """The AR baseline: one target step per round."""

    def track(self, config: "DecodeConfig", ref: Reference) -> Track:
        return _NoDraftTrack()

    def fidelity(self, config: "DecodeConfig") -> tuple[bool, list[str]]:
        return True, []


class NgramSource:
    """The drafter's own lookup over the reference so far, under the config's engine
    rules: exact."""

    def __init__(self, eos: frozenset[int]) -> None:
        self.eos = eos

    def track(self, config: "DecodeConfig", ref: Reference) -> Track:
        return NgramTrack(ref, config, self.eos)

    def fidelity(self, config: "DecodeConfig") -> tuple[bool, list[str]]:
        return True, []


class TableSourceAdapter:
    """Tracks over a method's teacher-forced tables, memoised per table key."""

    def __init__(self, tables: TableSource) -> None:
        self.tables = tables
        self._memo: dict[tuple[Any, ...], TableTrack] = {}

    def _width(self, config: "DecodeConfig") -> int:
        return table_width(config)

    def prepare(self, config: "DecodeConfig", refs: list[Reference]) -> None:
        """Make the tables of every prompt not yet seen for this key, in one batch."""
        width = self._width(config)
        missing = [r for r in refs if self._key(config, r, width) not in self._memo]
        if missing:
            if len(self._memo) + len(missing) > 4096:   # a long screen: bound memory
                self._memo.clear()
            for ref, table in zip(missing, self.tables.tables(config, missing, width)):
                self._memo[self._key(config, ref, width)] = TableTrack(ref, table)

    def _key(self, config: "DecodeConfig", ref: Reference, width: int) -> tuple[Any, ...]:
        return (self.tables.key(config), width, ref.prompt_id, len(ref.tokens))

    def track(self, config: "DecodeConfig", ref: Reference) -> Track:
        width = self._width(config)
        key = (self.tables.key(config), width, ref.prompt_id, len(ref.tokens))
        if key not in self._memo:
            if len(self._memo) > 4096:       # a long screen: keep memory bounded
                self._memo.clear()
            self._memo[key] = TableTrack(ref, self.tables.table(config, ref, width))
        return self._memo[key]

    def fidelity(self, config: "DecodeConfig") -> tuple[bool, list[str]]:
        notes: list[str] = []
        exact_depth = self.tables.exact_depth
        shape = config.shape
        if exact_depth is not None:
            notes.append(f"{config.method}: draft tokens after the first of a round are "
                         "teacher-forced on the full model's keys/values (the decoder's "
                         "attend to the round's own draft keys/values)")
        if shape.kind == DYNAMIC and shape.width > 1:
            notes.append("dynamic tree: off-path nodes' children are given the on-path "
                         "node's probabilities at the same depth (frontier and rerank)")
        if not shape.is_tree and config.exit_policy not in ("fixed", "heuristic"):
            notes.append(f"{config.exit_policy} exit: draft tokens after a rejection take "
                         "the next positions' teacher-forced confidences (drafted count)")
        # A chain that never drafts past the exact depth (k within it, K never grown) is
        # exact whatever its exit rule.
        within = (not shape.is_tree and exact_depth is not None and config.k <= exact_depth
                  and config.exit_policy != "heuristic")
        if within:
            return True, []
        exact = (exact_depth is None
                 and not (shape.kind == DYNAMIC and shape.width > 1)
                 and (shape.is_tree or config.exit_policy in TAU_EXACT_POLICIES))
        return exact, notes


def no_draft_source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    return NoDraftSource()


def ngram_source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    return NgramSource(target.eos_token_ids)


def draft_model_source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    assert draft is not None                # the decoder's checks refuse it earlier
    return TableSourceAdapter(DraftModelSource(target, draft))


def layer_skip_source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    return TableSourceAdapter(LayerSkipSource(target, draft))


def sorted_exit_source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    return TableSourceAdapter(SortedExitSource(target, draft))


def eagle_source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    from autotune.replay.heads import EagleSource
    return EagleSource(target, draft)


def medusa_source(target: "LoadedModel", draft: "LoadedModel | None") -> ReplaySource:
    from autotune.replay.heads import MedusaSource
    return MedusaSource(target, draft)
