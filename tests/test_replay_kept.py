"""What replay sources keep between configs is bounded for the whole process, and the
held-out pool's prediction holds no more than one method's (issue 59, item 6).

Structural, not RSS: the screen's Replayer (kept in the search's memo) and the pool's
each used to keep up to the limit of every kind, and the pool's prediction kept every
method's state beside the screen's. On a tiny random Llama with the limits made small.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

import autotune.methods.layer_skip.replay as layer_skip_replay
import autotune.methods.sorted_exit.replay as sorted_exit_replay
from autotune.replay.costs import FORMAT, CostParts, LayerParts
from autotune.replay.reference import Reference, reference_set
from autotune.replay.run import Replayer
from autotune.schema.config import DecodeConfig
from autotune.search.pool_prediction import predict_pool
from autotune.workloads.prompts import Prompt

MAX_NEW = 8
SCREEN = [Prompt(" ".join(f"s{(5 * i + j) % 40}" for j in range(4 + i % 7)), "c", f"s{i}")
          for i in range(12)]
POOL = [Prompt(" ".join(f"t{(7 * i + j) % 50}" for j in range(3 + i % 11)), "c", f"p{i}")
        for i in range(12)]
LAYER_SKIP = DecodeConfig(method="layer_skip", k=2, attn_skip=(1,), mlp_skip=(2,))
LAYER_SKIP_2 = DecodeConfig(method="layer_skip", k=3, attn_skip=(0, 3))
SORTED_EXIT = DecodeConfig(method="sorted_exit", k=2, exits=(1, 2, 4), thresholds=(0.6, 0.3),
                           exit_policy="heuristic")
NGRAM = DecodeConfig(method="ngram", k=4, ngram_max=3)


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(seed=5, layers=4, scale=4.0)


@pytest.fixture(scope="module")
def refs(tiny, tmp_path_factory) -> tuple[list[Reference], list[Reference]]:
    folder = tmp_path_factory.mktemp("refs")
    return (reference_set(tiny, SCREEN, MAX_NEW, directory=folder),
            reference_set(tiny, POOL, MAX_NEW, directory=folder))


def _full_bytes(source) -> int:
    return sum(cache.nbytes() for _, cache in source._full.values())


def _hidden_bytes(source) -> int:
    return sum(s.nbytes for states in source._hidden.values() for s in states.values())


def test_two_replayers_layer_skip_sources_keep_one_limit_together(tiny, refs, monkeypatch):
    screen_refs, pool_refs = refs
    one = tiny.forward.cache_bytes(1, max(len(r.sequence) for r in screen_refs + pool_refs))
    limit = 5 * one
    monkeypatch.setattr(layer_skip_replay, "KEPT_CACHE_BYTES", limit)
    screen = layer_skip_replay.LayerSkipSource(tiny, None)
    screen.tables(LAYER_SKIP, screen_refs, 10)
    assert 0 < _full_bytes(screen) <= limit
    first = set(screen._full)
    screen.tables(LAYER_SKIP_2, screen_refs, 10)        # its first prompts stay kept
    assert set(screen._full) == first
    pool = layer_skip_replay.LayerSkipSource(tiny, None)
    pool.tables(LAYER_SKIP, pool_refs, 10)
    # The newer source took the room from the older one: together within one limit.
    assert 0 < _full_bytes(pool)
    assert _full_bytes(screen) + _full_bytes(pool) <= limit


def test_two_replayers_sorted_exit_sources_keep_one_limit_together(tiny, refs, monkeypatch):
    screen_refs, pool_refs = refs
    monkeypatch.setattr(sorted_exit_replay, "KEPT_HIDDEN_BYTES", 2**62)
    probe = sorted_exit_replay.SortedExitSource(tiny, None)
    probe.table(SORTED_EXIT, screen_refs[0], 10)
    limit = 5 * _hidden_bytes(probe)
    del probe
    monkeypatch.setattr(sorted_exit_replay, "KEPT_HIDDEN_BYTES", limit)
    screen = sorted_exit_replay.SortedExitSource(tiny, None)
    for ref in screen_refs:
        screen.table(SORTED_EXIT, ref, 10)
    pool = sorted_exit_replay.SortedExitSource(tiny, None)
    for ref in pool_refs:
        pool.table(SORTED_EXIT, ref, 10)
    assert 0 < _hidden_bytes(pool)
    assert _hidden_bytes(screen) + _hidden_bytes(pool) <= limit


class _Owner:
    def __init__(self) -> None:
        self.forgotten: list[str] = []

    def forget_kept(self, key) -> None:
        self.forgotten.append(key)


def test_kept_drops_other_owners_oldest_never_the_askers_own():
    from autotune.replay import kept

    a, b = _Owner(), _Owner()
    assert kept.admit("test.kind", a, "x", 40, 100) and kept.admit("test.kind", a, "y", 40, 100)
    kept.touch("test.kind", a, "x")                       # y is now a's least recently used
    assert not kept.admit("test.kind", a, "z", 40, 100)   # a's own stay; no room
    assert kept.admit("test.kind", b, "z", 40, 100)       # b takes a's oldest
    assert a.forgotten == ["y"] and kept.kept_bytes("test.kind") == 80
    del b
    gc.collect()
    assert kept.kept_bytes("test.kind") == 40             # a dead owner's entries go
    with kept.suspended():
        assert a.forgotten == ["y", "x"] and kept.kept_bytes("test.kind") == 0
        assert not kept.admit("test.kind", a, "w", 1, 100)
    assert kept.admit("test.kind", a, "w", 1, 100)
    kept.forget_all()


def test_predict_pool_holds_no_screen_state_and_one_methods_at_a_time(tiny, refs, cache,
                                                                       monkeypatch):
    """The screen's kept state goes before the pool's references are decoded; a method
    with one finalist keeps nothing; a method with two keeps for its second (read, not
    remade) and drops it before the next method."""
    sources: list[weakref.ref] = []             # every source made, the screen's too
    for kind in (layer_skip_replay.LayerSkipSource, sorted_exit_replay.SortedExitSource):
        def tracked(self, *args, _init=kind.__init__, **kwargs):
            _init(self, *args, **kwargs)
            sources.append(weakref.ref(self))
        monkeypatch.setattr(kind, "__init__", tracked)

    def kept_bytes() -> int:        # every live source's, as the sources count them
        alive = [s for s in (ref() for ref in sources) if s is not None]
        return sum(_full_bytes(s) if hasattr(s, "_full") else _hidden_bytes(s)
                   for s in alive)

    n = tiny.n_layers
    parts = CostParts(FORMAT, {}, [[1, 10.0], [8, 14.0]], 0.5, 0.5, 0.05, 0.0, 0.0, 1.0,
                      LayerParts(n, 1.0, 0.2, 0.3, 0.1, 0.5, 0.1), None, None, {})
    screen = Replayer(tiny, None, SCREEN, MAX_NEW, Path("unused"), cache, parts=parts)
    for config in (LAYER_SKIP, SORTED_EXIT):
        screen.replay(config)
    screen_sources = list(screen._sources.values())
    assert kept_bytes() > 0                 # the screen keeps what it read twice
    seen: list[tuple[str, int]] = []            # (method replayed, bytes kept at its start)
    replay = Replayer.replay

    def recorded(self, config):
        if self is not screen:
            seen.append((config.method, kept_bytes()))
        out = replay(self, config)
        if self is not screen:
            seen.append((config.method, kept_bytes()))
        return out

    made: list[str] = []
    full_cache = layer_skip_replay.LayerSkipSource._full_cache

    def counted(self, ref):
        if ref.prompt_id not in self._full:
            made.append(ref.prompt_id)
        return full_cache(self, ref)

    monkeypatch.setattr(Replayer, "replay", recorded)
    monkeypatch.setattr(layer_skip_replay.LayerSkipSource, "_full_cache", counted)
    finalists = [SimpleNamespace(arm=arm, params=config.to_dict()) for arm, config in
                 (("a", LAYER_SKIP), ("b", SORTED_EXIT), ("c", NGRAM), ("d", LAYER_SKIP_2))]
    ctx = SimpleNamespace(replay_parts=None, memo={"replayer": screen}, target=tiny,
                          draft=None, max_new_tokens=MAX_NEW)
    predicted = predict_pool(ctx, finalists, POOL)
    assert list(predicted) == ["a", "b", "c", "d"]
    assert all(len(pairs) == len(POOL) for pairs in predicted.values())
    # Nothing of the screen's is kept any more.
    assert all(not getattr(s.tables, "_full", None) and not getattr(s.tables, "_hidden", None)
               for s in screen_sources)
    # The two layer-skip finalists ran together, the second reading the first's caches;
    # the sorted-exit one (alone) kept nothing, and nothing was kept between methods.
    assert [m for m, _ in seen[::2]] == ["layer_skip", "layer_skip", "sorted_exit", "ngram"]
    starts = [b for _, b in seen[::2]]
    ends = [b for _, b in seen[1::2]]
    assert starts[0] == 0 and starts[1] > 0 and starts[2] == 0 and starts[3] == 0
    assert ends[2] == 0 and kept_bytes() == 0
    assert len(made) == len(POOL)                # each pool prompt's caches made once
