"""Replay sources: what every method's source gives the replay tier, one prompt's `Track`
for a config and what about its replay is exact, and the adapter that serves tracks
from a method's teacher-forced tables.

Each method's source lives in its package's replay.py, named by `MethodSpec.replay`:
`source(target, draft) -> ReplaySource`. The source keeps what is shared between
configs (a draft's table, the target's full keys/values, a stack's hidden states, a
trained head's anchor tables), so a search replays many configs of one method for the
price of one pass per distinct table key. Methods that draft by position read
`TableSource` tables through `TableSourceAdapter`; trained heads draft from the round's
start, not the position, and build on heads.py instead. Methods whose engine keeps state
across requests (suffix decoding, SGLang's trie, TensorRT-LLM's SA buffer) serve the
references in order through `ServedInOrder`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from autotune.schema.shape import DYNAMIC
from autotune.replay.reference import Reference
from autotune.replay.simulate import TableTrack, Track
from autotune.replay.tables import TableSource, table_width

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig

TAU_EXACT_POLICIES = ("fixed", "heuristic", "confidence")


class ReplaySource(Protocol):
    """What the replay tier asks of a method's source. `ReplaySourceBase` gives
    `prepare` its default, so `ReplayRun` calls it on every source."""

    def prepare(self, config: "DecodeConfig", refs: list[Reference]) -> None:
        """Ready `config`'s replay pass over `refs`, in serving order: make their tables
        in one batch, or start the cross-request state afresh."""
        ...

    def track(self, config: "DecodeConfig", ref: Reference) -> Track: ...

    def fidelity(self, config: "DecodeConfig") -> tuple[bool, list[str]]:
        """(whether replay's accepted tokens per round, hence τ, are exact, notes on what
        is approximate)."""
        ...


class ReplaySourceBase:
    """Defaults for a `ReplaySource`'s optional parts: nothing to make ahead, no state
    across requests. A source inherits it and overrides what its method needs."""

    def prepare(self, config: "DecodeConfig", refs: list[Reference]) -> None:
        """Nothing made ahead: each track is built when asked for."""


class ServedInOrder(ReplaySourceBase):
    """The replay source of a method whose engine keeps state across requests (a cache
    of earlier outputs, a shared trie, a draft buffer): one state per config and replay
    pass (`prepare` starts a pass), tracks asked for in the decoder's prompt order, each
    request finished (`track.finish()`) before the next starts.

    new_state(config) -> the method's cross-request state; new_track(ref, state, config)
    -> a track that overrides `finish()`; sampled_note: why replay is not exact under sampling
    (the state holds the greedy references, not the sampled outputs the decoder files).
    """

    def __init__(self, new_state: Callable[["DecodeConfig"], Any],
                 new_track: Callable[[Reference, Any, "DecodeConfig"], Track],
                 sampled_note: str) -> None:
        self.new_state, self.new_track, self.sampled_note = new_state, new_track, sampled_note
        self._states: dict["DecodeConfig", Any] = {}
        self._open: dict["DecodeConfig", Track] = {}

    def prepare(self, config: "DecodeConfig", refs: list[Reference]) -> None:
        self._states[config] = self.new_state(config)
        self._open.pop(config, None)

    def track(self, config: "DecodeConfig", ref: Reference) -> Track:
        if config not in self._states:
            self.prepare(config, [ref])
        last = self._open.pop(config, None)
        if last is not None:
            last.finish()
        track = self.new_track(ref, self._states[config], config)
        self._open[config] = track
        return track

    def fidelity(self, config: "DecodeConfig") -> tuple[bool, list[str]]:
        return (True, []) if config.greedy else (False, [self.sampled_note])


class TableSourceAdapter(ReplaySourceBase):
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
