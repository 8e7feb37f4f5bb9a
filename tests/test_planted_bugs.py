"""Power tests of the low-precision lossless tier (issue 52, item 3): verify-pass bugs
planted in a tiny bfloat16 random Llama must end `lossless False`, deterministically.

Each bug leaves the emitted token the argmax of its own (wrong) row, so tier a cannot
see it, and moves the logits little enough that the first divergence often looks like a
near-tie; what catches it is tier b at every position (each recorded row against a clean
teacher-forced pass, `decoding/numerics.py`). The bugs hit verify passes only (passes of
several tokens after the prefill, or a tree's compaction): the prefill, AR's one-token
passes and the teacher pass (a prefill-shaped pass from position 0) stay right, as a
real verification bug would leave them. The control, the same configs without a bug,
is lossless; `test_lossless_bf16.py` and `bench/near_ties.py` check correct configs on
the default model's weights.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Iterator

import pytest
import torch
from tiny import llama_model, one_thread, tiny_loaded  # noqa: F401  (autouse fixture)

import autotune.decoding.decoder as decoder_module
from autotune.schema.config import DecodeConfig
from autotune.decoding.tree import compact_cache
from autotune.measure.measurement import measure
from autotune.models.llama import LlamaForward, Step
from autotune.models.loading import LoadedModel
from autotune.workloads.prompts import Prompt

SCALE = 8.0   # peaked logits and sharp attention: drafts get accepted, positions matter
MAX_NEW = 16
CHAIN = DecodeConfig(method="ngram", k=4, ngram_min=1, ngram_max=2)
TREE = DecodeConfig(method="layer_skip", attn_skip=(1,), mlp_skip=(2,), tree_width=2,
                    tree_depth=3, tree_tokens=6)


def _prompts(n: int = 6, length: int = 10, seed: int = 0) -> list[Prompt]:
    """Repetitive random prompts over the tiny vocabulary, so n-grams draft."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        motif = [f"t{rng.randrange(1, 64)}" for _ in range(3)]
        words = (motif * length)[:length]
        words[rng.randrange(length)] = f"t{rng.randrange(1, 64)}"
        out.append(Prompt(" ".join(words), "code", f"p{i}"))
    return out


PROMPTS = _prompts()


@pytest.fixture(scope="module")
def target() -> LoadedModel:
    hf = llama_model(seed=1, layers=4, scale=SCALE).to(torch.bfloat16)
    return dataclasses.replace(tiny_loaded(hf, name="tiny-bf16-planted"), dtype=torch.bfloat16)


def _verify_pass(start: int, tokens: int, tree_mask: Any = None) -> bool:
    """A chain verify pass: several tokens after the prefill, no tree mask."""
    return tokens > 1 and start > 0 and tree_mask is None


# ---------------------------------------------------------------- the planted bugs
def _rotary_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rotary positions one too far in multi-token verify passes."""
    good = LlamaForward.begin

    def begin(self: LlamaForward, input_ids: torch.Tensor, cache: Any, start: int | None = None,
              tree_mask: Any = None, position_ids: Any = None) -> Step:
        at = cache.length if start is None else start
        t = input_ids.shape[1]
        if position_ids is None and _verify_pass(at, t, tree_mask):
            position_ids = torch.arange(at + 1, at + 1 + t)
        return good(self, input_ids, cache, start, tree_mask, position_ids)

    monkeypatch.setattr(LlamaForward, "begin", begin)


def _mask_sees_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """A verify pass's causal mask one diagonal too wide: row j sees token j + 1."""
    good = LlamaForward.begin

    def begin(self: LlamaForward, input_ids: torch.Tensor, cache: Any, start: int | None = None,
              tree_mask: Any = None, position_ids: Any = None) -> Step:
        at = cache.length if start is None else start
        step = good(self, input_ids, cache, start, tree_mask, position_ids)
        if _verify_pass(at, input_ids.shape[1], tree_mask):
            step.mask = torch.ones_like(step.mask).tril(at + 1)
        return step

    monkeypatch.setattr(LlamaForward, "begin", begin)


def _kv_one_slot_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """A verify pass writes its keys/values one slot later than its tokens' positions
    (the pending token's own slot keeps whatever scratch was there)."""
    good = LlamaForward._store_kv

    def store(self: LlamaForward, index: int, step: Step, k: torch.Tensor,
              v: torch.Tensor) -> int:
        t = k.shape[2]
        if step.positions is not None or not _verify_pass(step.start, t):
            return good(self, index, step, k, v)
        end = step.start + t
        room = min(t, step.cache.max_len - step.start - 1)
        step.cache.k[index, :, :, step.start + 1:step.start + 1 + room] = k[:, :, :room]
        step.cache.v[index, :, :, step.start + 1:step.start + 1 + room] = v[:, :, :room]
        return end

    monkeypatch.setattr(LlamaForward, "_store_kv", store)


def _stale_after_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree's compaction that moves every accepted node but the last: its slot keeps
    the entry of whichever node the verify pass wrote there."""
    def compact(cache: Any, base: int, path: list[int]) -> None:
        moved = path[:-1] if path and path[-1] != len(path) else path
        compact_cache(cache, base, moved)
        cache.length = base + 1 + len(path)

    monkeypatch.setattr(decoder_module, "compact_cache", compact)


BUGS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], DecodeConfig]] = {
    "rotary_offset": (_rotary_offset, CHAIN),
    "mask_sees_later": (_mask_sees_later, CHAIN),
    "kv_one_slot_off": (_kv_one_slot_off, CHAIN),
    "stale_after_compaction": (_stale_after_compaction, TREE),
}


@pytest.fixture
def planted(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[DecodeConfig]:
    plant, config = BUGS[request.param]
    plant(monkeypatch)
    yield config


@pytest.mark.parametrize("planted", list(BUGS), indirect=True)
def test_a_planted_verify_bug_is_not_lossless(target: LoadedModel,
                                              planted: DecodeConfig) -> None:
    summary = measure(target, planted, PROMPTS, MAX_NEW).summary()
    assert summary["lossless_tier"] == "near-tie (bfloat16)"
    assert summary["drafted_tokens"] > 0 and summary["accepted_tokens"] > 0
    assert summary["lossless"] is False, summary["divergences"]
    # Seen on (almost) every prompt by tier b at every position, not by luck at a flip:
    # the first-divergence check alone called 1 to 5 of these 6 prompts real.
    assert summary["divergences"]["real"] >= len(PROMPTS) - 1, summary["divergences"]

@pytest.mark.parametrize("config", [CHAIN, TREE], ids=["chain", "tree"])
def test_the_same_configs_without_a_bug_are_lossless(target: LoadedModel,
                                                     config: DecodeConfig) -> None:
    summary = measure(target, config, PROMPTS, MAX_NEW).summary()
    assert summary["drafted_tokens"] > 0 and summary["accepted_tokens"] > 0
    assert summary["lossless"] is True, summary["divergences"]
    # AR against itself in chunks was judged beside it, and the config is not far above.
    assert sum(summary["near_tie_baseline"].values()) == len(PROMPTS)
    assert summary["near_tie_baseline"]["real"] == 0
    assert summary["near_ties_far_above"] is False
