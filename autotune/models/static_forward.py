"""The compact Llama forward at an engine's speed: fixed shapes, replayed as CUDA graphs.

Why: eager PyTorch launches every kernel of a forward from Python; a decode step of a
small model is then bound by those launches (~13 ms per pass on an H200 for the 135M
default model, 19 ms for an 8B shape, 5.6x above the memory floor), and a tuner that
times it measures its own overhead instead of the engine's costs. Engines (gpt-fast,
vLLM, SGLang) decode from a static KV cache with captured graphs; so does this forward.

How: every pass over T <= 128 new tokens of a decode cache (`decode_cache`) runs one
fixed-shape function of static buffers, padded to the next bucket of `BUCKETS`:

- token ids [1, Tb]; rotary positions [Tb]; cache slots [Tb] (start + 0..Tb-1);
- an attention mask [1, 1, Tb, C] over the whole cache of C positions (causal for a
  chain, the tree's visibility for a tree), built on the device before each replay;
- keys and values written with `index_put` at the slots, attention read over all C
  columns (masked columns weigh exactly 0), logits and features into the graph's own
  output buffers, cloned for the caller (the next replay overwrites them).

Padding rows write keys/values past `start + T`, beyond what the cache vouches for:
scratch that the next pass overwrites before any mask lets it be read; they attend
causally so that nothing they write is ever non-finite (a NaN in a masked column would
still poison `0 * NaN`). One graph per (cache role, skipped sublayers, exit layer,
features, bucket); all buckets of a new key are captured at its first use, so a
measurement's warm-up pays for the captures and its timed runs do not.

On CUDA (`capture=True`) the function is captured and replayed (`models/graphs.py`:
the capture sits behind a small interface, so a CPU fake that binds its inputs at
capture stands in for it in the tests); on the CPU (`capture=False`) the same function
runs eagerly, which is what the tests check token for token against `LlamaForward`.

No capture in a timed run: a measurement sizes the caches for its longest prompt plus
budget before its warm-up (`reserve`), since a regrown cache drops every graph of its
role; `captures` counts captures so that the measurement can record those after its
warm-up (0 when all is well). Graphs are evicted by least recent use of their key once
their outputs pass `graph_bytes_cap` (each key keeps its own logits buffers, ~65 MB at
a 128k vocabulary). A failed capture before any graph has replayed a pass makes this
forward eager for good (`graph_error`, `graph_mode`); a failure after that ends the run
in one line, so that no study mixes graphed and eager timings.

Unused cache slots stay finite: attention reads every column, and a masked column
weighs 0, but `0 * NaN` is NaN, so each generation gets its cache zeroed (outside the
clock: `decode_cache` runs before the prefill is timed). Prefill (T > 128), ragged batches and the piecewise
methods (`begin` / `run_layers`: sorted-exit drafting, state propagation) run eagerly
on the same cache storage.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Collection

import torch
from torch import nn

from autotune.common.errors import AutotuneError
from autotune.models.graphs import CapturedPass, CudaGraphCapture, GraphCapture
from autotune.models.llama import KVCache, LlamaForward, Step

# Token-count buckets a pass is padded to (verify passes reach MAX_DRAFT_TOKENS + 1).
BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
# Decode caches are allocated in steps of this many positions, so that a slightly
# longer prompt does not re-allocate the cache (and drop its graphs).
CAPACITY_STEP = 256
# Graph output bytes kept before the least recently used key's graphs are evicted.
GRAPH_BYTES_CAP = 4 * 2**30


@dataclass
class _Inputs:
    """Static input buffers of one (role, bucket): what a replay reads."""

    ids: torch.Tensor        # [1, Tb] token ids
    rotary: torch.Tensor     # [Tb] rotary positions
    slots: torch.Tensor      # [1, Tb] cache positions written
    mask: torch.Tensor       # [1, 1, Tb, C] bool, True = may attend
    steps: torch.Tensor      # [Tb] 0..Tb-1 and
    columns: torch.Tensor    # [C] 0..C-1, made once: what each pass's slots and mask read


@dataclass(frozen=True)
class _Key:
    """What makes two passes the same captured function."""

    role: str
    attn_skip: frozenset[int]
    mlp_skip: frozenset[int]
    exit_layer: int | None
    features: bool


def bucket_for(tokens: int) -> int | None:
    """The smallest bucket holding `tokens` new tokens, or None (run eagerly)."""
    for size in BUCKETS:
        if tokens <= size:
            return size
    return None


class StaticLlamaForward(LlamaForward):
    """`LlamaForward` whose decode-cache passes run as fixed-shape (graphed) functions."""

    def __init__(self, hf_model: nn.Module, capture: bool | None = None,
                 graphs: GraphCapture | None = None,
                 graph_bytes_cap: int = GRAPH_BYTES_CAP) -> None:
        """`capture`: replay captured graphs (default: on CUDA); `graphs`: what captures
        them (default `CudaGraphCapture`; the tests pass a CPU fake); `graph_bytes_cap`:
        graph output bytes kept before the least recently used key is evicted."""
        super().__init__(hf_model)
        if graph_bytes_cap < 0:
            raise ValueError(f"graph_bytes_cap must be >= 0, not {graph_bytes_cap}")
        self.capture = self.device.type == "cuda" if capture is None else capture
        self.graphs: GraphCapture = graphs if graphs is not None else CudaGraphCapture()
        self.graph_bytes_cap = graph_bytes_cap
        self._caches: dict[str, KVCache] = {}
        self._reserved = 0            # positions every cache is made with (`reserve`)
        self._inputs: dict[tuple[str, int], _Inputs] = {}
        self._graphs: dict[tuple[_Key, int], CapturedPass] = {}
        # Output bytes of each key's graphs, least recently used first.
        self._key_bytes: OrderedDict[_Key, int] = OrderedDict()
        # Why capture was given up, if it was (this forward then runs every pass
        # eagerly, and says so once): a measurement must know what it timed.
        self.graph_error: str | None = None
        self.captures = 0             # graphs captured (one per key and bucket), ever
        self.replays = 0              # passes run by replaying a graph, ever
        self.evictions = 0            # keys whose graphs were evicted under the cap

    def graph_mode(self) -> str:
        """How this forward's decode passes run: "cuda graphs", "eager", or "eager
        (capture failed: ...)" (the whole run, never a mix)."""
        if self.graph_error is not None:
            return f"eager (capture failed: {self.graph_error})"
        return "cuda graphs" if self.capture else "eager"

    @classmethod
    def over_layers(cls, base: LlamaForward, layers: list) -> LlamaForward:
        # A trained head's layer runs eagerly over its own caches: a plain forward.
        return LlamaForward.over_layers(base, layers)

    # ----------------------------------------------------------------- caches
    def decode_cache(self, max_len: int, role: str = "target") -> KVCache:
        """The static cache of `role` (one per role, reused by every generation),
        emptied and zeroed, holding at least `max_len` positions plus room for padded
        passes."""
        cache = self._cache(max_len, role)[0]
        # Attention reads every column: a non-finite value left in scratch by an
        # earlier generation would turn this one's passes into NaN (0 * NaN).
        with torch.inference_mode():      # the cache is an inference tensor
            cache.k.zero_()
            cache.v.zero_()
        cache.length = 0
        return cache

    def reserve(self, max_len: int) -> bool:
        """Size every role's cache, now and when first made, for `max_len` positions:
        what `decode_cache` would otherwise grow later, dropping the role's graphs,
        inside whichever timed run first needs it. Returns whether a cache grew (its
        graphs are then gone, to be captured again by a warm-up)."""
        if max_len > self.cos.shape[0]:
            raise AutotuneError(f"prompt + max_new_tokens = {max_len} tokens exceeds the "
                                f"model's {self.cos.shape[0]} positions")
        self._reserved = max(self._reserved, max_len)
        grew = False
        for role in list(self._caches):
            grew = self._cache(max_len, role)[1] or grew
        return grew

    def _cache(self, max_len: int, role: str) -> tuple[KVCache, bool]:
        """`role`'s cache with room for `max_len` positions (and what `reserve` asked
        for), and whether it was (re)made."""
        max_len = max(max_len, self._reserved)
        need = max_len + BUCKETS[-1]
        capacity = min(-(-need // CAPACITY_STEP) * CAPACITY_STEP, self.cos.shape[0])
        cache = self._caches.get(role)
        if cache is not None and cache.max_len >= min(need, self.cos.shape[0]) \
                and cache.max_len >= max_len:
            return cache, False
        self._drop(role)
        with torch.inference_mode():
            cache = self.new_cache(1, max(capacity, max_len))
        self._caches[role] = cache
        return cache, True

    def _drop(self, role: str) -> None:
        """Forget a role's cache, buffers and graphs (its cache is being replaced)."""
        self._caches.pop(role, None)
        self._inputs = {k: v for k, v in self._inputs.items() if k[0] != role}
        for key in [key for key in self._key_bytes if key.role == role]:
            self._forget(key)

    def _forget(self, key: _Key) -> None:
        """Free every graph of `key` (their outputs go back to the shared pool)."""
        self._key_bytes.pop(key, None)
        for size in BUCKETS:
            self._graphs.pop((key, size), None)

    def _role(self, cache: KVCache) -> str | None:
        for role, static in self._caches.items():
            if static is cache:
                return role
        return None

    # ------------------------------------------------------------- the passes
    def forward(self, input_ids: torch.Tensor, cache: KVCache, *, start: int | None = None,
                attn_skip: Collection[int] = (), mlp_skip: Collection[int] = (),
                exit_layer: int | None = None, last_only: bool = False,
                tree_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        key = self._key(input_ids, cache, start, attn_skip, mlp_skip, exit_layer, False)
        if key is None:
            return super().forward(input_ids, cache, start=start, attn_skip=attn_skip,
                                   mlp_skip=mlp_skip, exit_layer=exit_layer,
                                   last_only=last_only, tree_mask=tree_mask,
                                   position_ids=position_ids)
        logits = self._pass(key, input_ids, cache, start, tree_mask, position_ids)[0]
        return logits[:, -1:] if last_only else logits

    def forward_features(self, input_ids: torch.Tensor, cache: KVCache, *,
                         start: int | None = None, last_only: bool = False,
                         tree_mask: torch.Tensor | None = None,
                         position_ids: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        key = self._key(input_ids, cache, start, (), (), None, True)
        if key is None:
            return super().forward_features(input_ids, cache, start=start,
                                            last_only=last_only, tree_mask=tree_mask,
                                            position_ids=position_ids)
        logits, normed = self._pass(key, input_ids, cache, start, tree_mask, position_ids)
        return (logits[:, -1:] if last_only else logits), normed

    def _key(self, input_ids: torch.Tensor, cache: KVCache, start: int | None,
             attn_skip: Collection[int], mlp_skip: Collection[int],
             exit_layer: int | None, features: bool) -> _Key | None:
        """The pass's graph key, or None when it runs eagerly (not a decode cache, a
        batch, too many tokens, or too little room after `start` for the bucket)."""
        role = self._role(cache)
        size = bucket_for(input_ids.shape[1])
        if role is None or size is None or input_ids.shape[0] != 1:
            return None
        begin = cache.length if start is None else start
        if begin + size > cache.max_len:
            return None
        return _Key(role, frozenset(attn_skip), frozenset(mlp_skip), exit_layer, features)

    def _pass(self, key: _Key, input_ids: torch.Tensor, cache: KVCache, start: int | None,
              tree_mask: torch.Tensor | None, position_ids: torch.Tensor | None
              ) -> tuple[torch.Tensor, ...]:
        """Run the pass of `key` over `input_ids` [1, T]: logits [1, T, V] (and the
        features [1, T, hidden] when the key asks for them)."""
        tokens = input_ids.shape[1]
        begin = cache.length if start is None else start
        size = bucket_for(tokens)
        assert size is not None
        with torch.inference_mode():
            if self.capture and (key, size) not in self._graphs:
                try:
                    self._capture_all(key, cache, begin)
                except RuntimeError as exc:
                    self._give_up_capture(exc)
            inputs = self._fill(key.role, size, cache, input_ids, begin, tree_mask,
                                position_ids)
            cache.length = begin + tokens
            if self.capture:
                graph = self._graphs[(key, size)]
                self._key_bytes.move_to_end(key)          # most recently used
                graph.replay()
                self.replays += 1
                # The next replay overwrites the graph's outputs: the caller gets copies.
                return tuple(out[:, :tokens].clone() for out in graph.outputs)
            return tuple(out[:, :tokens] for out in self._body(key, cache, inputs))

    def _give_up_capture(self, exc: RuntimeError) -> None:
        """Run eagerly from now on (same passes, same numerics, launch-bound speed) when
        no graph has run a pass yet; otherwise end the run: passes timed graphed and
        passes timed eagerly must never meet in one study."""
        text = str(exc).strip().splitlines()
        error = text[0] if text else type(exc).__name__
        if self.replays:
            raise AutotuneError(f"CUDA graph capture failed after {self.replays} graphed "
                                f"passes ({error}); running on eagerly would mix graphed "
                                "and eager timings in one run, so it stops") from exc
        self.capture = False
        self._graphs.clear()
        self._key_bytes.clear()
        self.graph_error = error
        print(f"autotune: CUDA graph capture failed ({self.graph_error}); this model's "
              "passes run eagerly for the whole run, so its timings include "
              "kernel-launch overhead", file=sys.stderr)

    def _buffers(self, role: str, size: int, cache: KVCache) -> _Inputs:
        found = self._inputs.get((role, size))
        if found is None:
            device = self.device
            found = _Inputs(
                ids=torch.zeros((1, size), dtype=torch.long, device=device),
                rotary=torch.zeros(size, dtype=torch.long, device=device),
                slots=torch.zeros((1, size), dtype=torch.long, device=device),
                mask=torch.zeros((1, 1, size, cache.max_len), dtype=torch.bool,
                                 device=device),
                steps=torch.arange(size, device=device),
                columns=torch.arange(cache.max_len, device=device))
            self._inputs[(role, size)] = found
        return found

    def _fill(self, role: str, size: int, cache: KVCache, input_ids: torch.Tensor,
              begin: int, tree_mask: torch.Tensor | None,
              position_ids: torch.Tensor | None) -> _Inputs:
        """Write one pass's inputs into the static buffers of (role, size)."""
        inputs = self._buffers(role, size, cache)
        tokens = input_ids.shape[1]
        device = self.device
        inputs.ids.zero_()
        inputs.ids[:, :tokens] = input_ids
        slots = begin + inputs.steps
        inputs.slots[0] = slots
        last_position = self.cos.shape[0] - 1
        inputs.rotary.copy_(slots.clamp(max=last_position))
        if position_ids is not None:
            inputs.rotary[:tokens] = position_ids.to(device)
        # Causal for every row (padding rows too: they must attend to something).
        torch.le(inputs.columns[None, :], slots[:, None], out=inputs.mask[0, 0])
        if tree_mask is not None:
            visible = begin + tokens - tree_mask.shape[1]
            if tree_mask.shape[0] != tokens or visible < 0:
                raise ValueError(f"tree_mask {tuple(tree_mask.shape)} does not fit {tokens} "
                                 f"new tokens after {begin} cache positions")
            inputs.mask[0, 0, :tokens, visible:begin + tokens] = tree_mask.to(
                device=device, dtype=torch.bool)
        return inputs

    def _body(self, key: _Key, cache: KVCache, inputs: _Inputs) -> tuple[torch.Tensor, ...]:
        """The fixed-shape pass itself (what a graph captures): logits [1, Tb, V] and,
        for a features key, the final-normed hidden states [1, Tb, hidden]."""
        cos = self.cos[inputs.rotary][None, None]                  # [1, 1, Tb, D]
        sin = self.sin[inputs.rotary][None, None]
        step = Step(torch.nn.functional.embedding(inputs.ids, self.embed), cache, 0, cos,
                    sin, inputs.mask, False, positions=inputs.slots, end=cache.max_len)
        last = self.n_layers if key.exit_layer is None else key.exit_layer
        self.run_layers(step, 0, last, key.attn_skip, key.mlp_skip)
        normed = self._rms(step.hidden, self.final_norm)
        logits = self.head_logits(normed)
        return (logits, normed) if key.features else (logits,)

    def _capture_all(self, key: _Key, cache: KVCache, begin: int) -> None:
        """Capture `key`'s pass for every bucket that fits after `begin`, after evicting
        the least recently used keys that the cap has no room left for.

        The warm-up runs before each capture write keys/values at positions from
        `begin` on: the positions this call writes anyway, or scratch past them.
        """
        sizes = [size for size in BUCKETS
                 if (key, size) not in self._graphs and begin + size <= cache.max_len]
        self._evict(key, self._output_bytes(key, sizes))
        for size in sizes:
            inputs = self._fill(key.role, size, cache, torch.zeros(
                (1, size), dtype=torch.long, device=self.device), begin, None, None)

            def body(inputs: _Inputs = inputs) -> tuple[torch.Tensor, ...]:
                return self._body(key, cache, inputs)

            graph = self.graphs.capture(body, new_pool=not self._graphs)
            self._graphs[(key, size)] = graph
            self._key_bytes[key] = self._key_bytes.get(key, 0) + sum(
                out.element_size() * out.nelement() for out in graph.outputs)
            self.captures += 1
        self._evict(key, 0)

    def _output_bytes(self, key: _Key, sizes: list[int]) -> int:
        """The output bytes `key`'s graphs of `sizes` will hold: logits [1, Tb, V] (and
        features [1, Tb, hidden])."""
        width = self.vocab_size + (self.embed.shape[1] if key.features else 0)
        return sum(sizes) * width * self.embed.element_size()

    def _evict(self, keep: _Key, incoming: int) -> None:
        """Free the least recently used keys (never `keep`) until the graphs' outputs
        plus `incoming` bytes fit under `graph_bytes_cap`."""
        while sum(self._key_bytes.values()) + incoming > self.graph_bytes_cap:
            victim = next((k for k in self._key_bytes if k != keep), None)
            if victim is None:
                return
            self._forget(victim)
            self.evictions += 1
