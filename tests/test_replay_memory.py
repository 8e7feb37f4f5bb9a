"""What the replay tier holds does not grow with the prompts (issue 51, item 2).

Not timed and not RSS: each test bounds what a step keeps or makes at once (the batch
cache of the reference decode, layer skipping's kept keys/values and the rows of one
skipping pass, sorted exits' kept hidden states) with the bound made small, on a tiny
random Llama and more prompts than fit, and checks that the results are the same as
without the bound.
"""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest
import torch
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

import autotune.methods.layer_skip.replay as layer_skip_replay
import autotune.methods.sorted_exit.replay as sorted_exit_replay
import autotune.replay.run as replay_run
from autotune.decoding.batched import BatchedDecoder, cache_span
from autotune.schema.config import DecodeConfig
from autotune.decoding.reference import reference_continuations
from autotune.replay.costs import FORMAT, CostParts, LayerParts
from autotune.replay.reference import Reference, reference_set
from autotune.replay.tables import Table
from autotune.search.pool_prediction import predict_pool
from autotune.workloads.prompts import Prompt, encode_prompt

MAX_NEW = 8
# Prompts of 3 to 13 words, so that batches and groups have rows of many lengths.
PROMPTS = [Prompt(" ".join(f"t{(7 * i + j) % 50}" for j in range(3 + i % 11)), "c", f"p{i}")
           for i in range(24)]
LAYER_SKIP = DecodeConfig(method="layer_skip", k=2, attn_skip=(1,), mlp_skip=(2,))
SORTED_EXIT = DecodeConfig(method="sorted_exit", k=2, exits=(1, 2, 4), thresholds=(0.6, 0.3),
                           exit_policy="heuristic")


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(seed=5, layers=4, scale=4.0)


@pytest.fixture(scope="module")
def refs(tiny, tmp_path_factory) -> list[Reference]:
    return reference_set(tiny, PROMPTS, MAX_NEW, directory=tmp_path_factory.mktemp("refs"))


def _same_tables(a: list[Table], b: list[Table]) -> bool:
    return all(torch.equal(x.ids, y.ids) and torch.equal(x.logp, y.logp) and x.conf == y.conf
               and x.exit_layer == y.exit_layer for x, y in zip(a, b, strict=True))


def test_reference_batches_keep_their_cache_within_the_budget(tiny, monkeypatch):
    ids = [encode_prompt(tiny.tokenizer, p) for p in PROMPTS]
    one_by_one = reference_continuations(tiny, ids, MAX_NEW, batch_rows=1)
    budget = tiny.forward.cache_bytes(4, cache_span(max(map(len, ids)), MAX_NEW))
    batches: list[tuple[int, int]] = []        # (rows, bytes of the batch cache)
    generate = BatchedDecoder.generate

    def recorded(self, prompts, max_new_tokens, clock, **kwargs):
        span = cache_span(max(map(len, prompts)), max_new_tokens)
        batches.append((len(prompts), self.forward.cache_bytes(len(prompts), span)))
        return generate(self, prompts, max_new_tokens, clock, **kwargs)

    monkeypatch.setattr(BatchedDecoder, "generate", recorded)
    assert reference_continuations(tiny, ids, MAX_NEW, cache_bytes=budget) == one_by_one
    assert sum(rows for rows, _ in batches) == len(ids)
    assert all(size <= budget for rows, size in batches if rows > 1)
    assert max(rows for rows, _ in batches) >= 4         # short rows still share a batch


def _layer_skip_tables(tiny, refs, passes: list[int]) -> tuple[list[Table], int]:
    """The tables of every prompt, twice (a second config reads the kept caches), and
    the bytes of caches the source keeps; `passes` gets the rows of each pass."""
    source = layer_skip_replay.LayerSkipSource(tiny, None)
    group_tables = source._group_tables

    def recorded(config, group, width):
        passes.append(sum(len(r.tokens) + 1 for r in group))
        return group_tables(config, group, width)

    source._group_tables = recorded
    tables = source.tables(LAYER_SKIP, refs, 10)
    again = DecodeConfig(method="layer_skip", k=2, attn_skip=(0, 3))
    tables += source.tables(again, refs, 10)
    kept = sum(cache.nbytes() for _, cache in source._full.values())
    assert kept == source._kept_bytes
    return tables, kept


def test_layer_skip_keeps_bounded_caches_and_runs_bounded_passes(tiny, refs, monkeypatch):
    monkeypatch.setattr(layer_skip_replay, "KEPT_CACHE_BYTES", 2**62)
    monkeypatch.setattr(layer_skip_replay, "GROUP_ROWS", 2**62)
    monkeypatch.setattr(layer_skip_replay, "GROUP_CACHE_BYTES", 2**62)
    whole: list[int] = []
    unbounded, _ = _layer_skip_tables(tiny, refs, whole)
    assert len(whole) == 2                    # every prompt in one pass, as before
    one_prompt = tiny.forward.cache_bytes(1, max(len(r.sequence) for r in refs))
    monkeypatch.setattr(layer_skip_replay, "KEPT_CACHE_BYTES", 3 * one_prompt)
    monkeypatch.setattr(layer_skip_replay, "GROUP_ROWS", 3 * (MAX_NEW + 1))
    monkeypatch.setattr(layer_skip_replay, "GROUP_CACHE_BYTES", 4 * one_prompt)
    passes: list[int] = []
    bounded, kept = _layer_skip_tables(tiny, refs, passes)
    assert _same_tables(bounded, unbounded)
    assert 0 < kept <= 3 * one_prompt
    minimum = layer_skip_replay.MIN_GROUP_ROWS
    assert len(passes) > 4
    assert all(minimum <= rows <= 3 * (MAX_NEW + 1) + minimum for rows in passes)


def test_sorted_exit_keeps_bounded_hidden_states(tiny, refs, monkeypatch):
    def tables() -> tuple[list[Table], int]:
        source = sorted_exit_replay.SortedExitSource(tiny, None)
        made = [source.table(SORTED_EXIT, ref, 10) for ref in refs]
        other = DecodeConfig(method="sorted_exit", k=2, exits=(2, 3), thresholds=(0.5,),
                             exit_policy="heuristic")
        made += [source.table(other, ref, 10) for ref in refs]
        kept = sum(s.nbytes for states in source._hidden.values() for s in states.values())
        assert kept == source._kept_bytes
        return made, kept

    monkeypatch.setattr(sorted_exit_replay, "KEPT_HIDDEN_BYTES", 2**62)
    unbounded, everything = tables()
    monkeypatch.setattr(sorted_exit_replay, "KEPT_HIDDEN_BYTES", everything // 4)
    bounded, kept = tables()
    assert _same_tables(bounded, unbounded)
    assert 0 < kept <= everything // 4


def test_the_pool_replayer_is_freed_when_the_predictions_return(tiny, cache, monkeypatch):
    """Freed when `predict_pool` returns, by reference counting (no collector run), so
    that the pages it hands back include the pool's references, tables and caches."""
    alive: list[weakref.ref] = []
    init = replay_run.Replayer.__init__

    def tracked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        alive.append(weakref.ref(self))

    monkeypatch.setattr(replay_run.Replayer, "__init__", tracked)
    n = tiny.n_layers
    parts = CostParts(FORMAT, {}, [[1, 10.0], [8, 14.0]], 0.5, 0.5, 0.05, 0.0, 0.0, 1.0,
                      LayerParts(n, 1.0, 0.2, 0.3, 0.1, 0.5, 0.1), None, None, {})
    ctx = SimpleNamespace(replay_parts=None, memo={"replayer": SimpleNamespace(parts=parts)},
                          target=tiny, draft=None, max_new_tokens=MAX_NEW)
    finalists = [SimpleNamespace(arm="a", params=LAYER_SKIP.to_dict()),
                 SimpleNamespace(arm="b", params=SORTED_EXIT.to_dict())]
    gc.disable()
    try:
        predicted = predict_pool(ctx, finalists, PROMPTS)
        assert len(alive) == 1 and alive[0]() is None
    finally:
        gc.enable()
    assert sorted(predicted) == ["a", "b"]
    assert all(len(pairs) == len(PROMPTS) for pairs in predicted.values())


def test_trim_every_hands_pages_back_once_per_budget(monkeypatch):
    import autotune.common.memory as memory
    trims: list[int] = []
    monkeypatch.setattr(memory, "release_freed_memory", lambda: trims.append(1) or True)
    trim = memory.TrimEvery(100)
    for _ in range(9):
        trim.made(30)           # 270 bytes made: a trim at 120 and at 240, none after
    assert len(trims) == 2
