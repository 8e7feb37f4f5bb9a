"""The target's prefill of a prompt, run once and copied by every decoder that serves
the same prompt next (`PrefillMemo`): the arms of one measurement, or the trials of one
search over the same prompts."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import torch

from autotune.models.llama import KVCache

__all__ = ["PrefillMemo"]


@dataclass(frozen=True)
class _Prefilled:
    """One prompt's prefill as the first decoder to serve it left it."""

    k: torch.Tensor            # [n_layers, 1, Hkv, P, D]
    v: torch.Tensor
    logits: torch.Tensor       # [1, 1, V]
    seconds: float             # the pass's own measured time


class PrefillMemo:
    """The target's prefills of the prompts being served, shared by every decoder that
    serves them next (the arms of one measurement, `share_prefills`; with `capacity` > 1
    the measurements of one search over the same prompts): the same pass over the same
    ids gives the same keys, values and logits, so a later arm copies them into its
    cache instead of running the pass again. The latest `capacity` prompts are kept.

    A copied prefill's time is the pass's own, as the first arm measured it: `prefill_s`
    stays the prompt's prefill time, and the decode phase, which is what is compared,
    starts from the same cache contents either way."""

    def __init__(self, capacity: int = 1) -> None:
        self.capacity = max(1, capacity)
        self._kept: OrderedDict[tuple[Any, ...], _Prefilled] = OrderedDict()
        self.hits = 0

    def prefill(self, forward: Any, prompt_ids: torch.Tensor, cache: KVCache,
                clock: Callable[[], float]) -> tuple[torch.Tensor, float]:
        """The last position's logits [1, 1, V] of the target's pass over `prompt_ids`
        [1, P] into the empty `cache`, and the seconds to add to the measured prefill
        window so that it reads the pass's own time (less the copies made here)."""
        key = (id(forward), cache.k.dtype, cache.k.device, tuple(prompt_ids[0].tolist()))
        n = prompt_ids.shape[1]
        kept = self._kept.get(key)
        if kept is not None:
            began = clock()
            cache.k[:, :, :, :n].copy_(kept.k)
            cache.v[:, :, :, :n].copy_(kept.v)
            cache.length = n
            logits = kept.logits.clone()
            self.hits += 1
            self._kept.move_to_end(key)
            return logits, kept.seconds - (clock() - began)
        began = clock()
        logits = forward.forward(prompt_ids, cache, last_only=True)
        seconds = clock() - began
        self._kept[key] = _Prefilled(cache.k[:, :, :, :n].clone(),
                                     cache.v[:, :, :, :n].clone(), logits.clone(), seconds)
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)
        # The keeping copies are not the prefill: their time leaves the window too.
        return logits, seconds - (clock() - began)
