"""What replay sources keep between configs, bounded across the whole process.

A source keeps per-prompt state between the configs it replays (layer skipping's
full-model keys/values, sorted exits' hidden states): a screen replays hundreds of
configs over the same prompts, and each kept prompt saves every later config a pass
over it. Each source used to bound its own state, so every `Replayer` alive held its
own share: the screen's (kept for the rest of the run by its context's memo) beside
the held-out pool's, whose prompts are others. On the default model the two held up to
1.3 GB together, and the pool's prediction reached 3.34 GB of peak RSS in a 20-minute
main job (issue 59, item 6).

Here each kind of state ("layer_skip.full", "sorted_exit.hidden") has one byte limit
for every source of the process: a source asks `admit` before keeping a prompt's
state, and other sources' least recently used state (an older Replayer's, the screen's
once the pool's prediction starts) is dropped to make room, through its owner's
`forget_kept(key)`; a source never drops its own to keep a newer prompt (it keeps its
first prompts for every config, as before). An owner that is garbage
collected leaves its entries with it. `suspended()` drops everything kept and keeps
nothing while it lasts: the pool's prediction replays a method with a single finalist
under it (nothing would read what is kept) and drops what is kept after each method.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from contextlib import contextmanager
from typing import Hashable, Iterator, Protocol

__all__ = ["KeptOwner", "admit", "discard", "forget_all", "kept_bytes", "suspended", "touch"]


class KeptOwner(Protocol):
    """A source that keeps per-prompt state under a kind's limit."""

    def forget_kept(self, key: Hashable) -> None:
        """Drop the state kept under `key` (the budget has already uncounted it)."""
        ...


class _Kind:
    """One kind's entries, least recently used first: (owner id, key) -> bytes."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple[int, Hashable], int] = OrderedDict()
        self.owners: dict[int, weakref.ref[KeptOwner]] = {}
        self.used = 0

    def owner_gone(self, owner_id: int) -> None:
        for entry in [e for e in self.entries if e[0] == owner_id]:
            self.used -= self.entries.pop(entry)
        self.owners.pop(owner_id, None)

    def evict(self, entry: tuple[int, Hashable]) -> None:
        owner_id, key = entry
        self.used -= self.entries.pop(entry)
        owner = self.owners[owner_id]()
        if owner is not None:
            owner.forget_kept(key)
        if not any(e[0] == owner_id for e in self.entries):
            self.owners.pop(owner_id, None)


_KINDS: dict[str, _Kind] = {}
_suspended = 0


def _kind(name: str) -> _Kind:
    return _KINDS.setdefault(name, _Kind())


def admit(kind: str, owner: KeptOwner, key: Hashable, nbytes: int, limit: int) -> bool:
    """Whether `owner` may keep `nbytes` under `key`: True after other owners' least
    recently used entries of `kind` are dropped to keep the kind within `limit`; False
    when that is not enough (the rest is `owner`'s own) or keeping is suspended."""
    state = _kind(kind)
    discard(kind, owner, key)
    owner_id = id(owner)
    if _suspended or nbytes > limit:
        return False
    # Other owners' entries make room, never the asker's own: a source that replays its
    # prompts in turn keeps its first ones for every config (dropping its least recently
    # used would drop the next prompt it reads, each config, and keep nothing useful).
    others = (e for e in list(state.entries) if e[0] != owner_id)
    while state.used + nbytes > limit:
        entry = next(others, None)
        if entry is None:
            return False
        state.evict(entry)
    if owner_id not in state.owners:
        state.owners[owner_id] = weakref.ref(
            owner, lambda _, i=owner_id: state.owner_gone(i))
    state.entries[(owner_id, key)] = nbytes
    state.used += nbytes
    return True


def touch(kind: str, owner: KeptOwner, key: Hashable) -> None:
    """`owner` read what it keeps under `key`: the last to be dropped now."""
    entries = _kind(kind).entries
    if (id(owner), key) in entries:
        entries.move_to_end((id(owner), key))


def discard(kind: str, owner: KeptOwner, key: Hashable) -> None:
    """`owner` dropped what it kept under `key` itself (uncounted, no callback)."""
    state = _kind(kind)
    nbytes = state.entries.pop((id(owner), key), None)
    if nbytes is not None:
        state.used -= nbytes


def kept_bytes(kind: str | None = None) -> int:
    """Bytes kept now, of `kind` or of every kind."""
    kinds = [_kind(kind)] if kind is not None else list(_KINDS.values())
    return sum(k.used for k in kinds)


def forget_all() -> None:
    """Every source drops everything it keeps (its owner's `forget_kept` per entry)."""
    for state in _KINDS.values():
        for entry in list(state.entries):
            state.evict(entry)


@contextmanager
def suspended() -> Iterator[None]:
    """Everything kept is dropped on entry and nothing is kept until the exit."""
    global _suspended
    forget_all()
    _suspended += 1
    try:
        yield
    finally:
        _suspended -= 1
