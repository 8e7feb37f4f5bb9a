"""The target's greedy continuations, decoded by the AR baseline: the reference that the
replay tier, the agreement proxy and training all read."""

from __future__ import annotations

from autotune.common.memory import release_freed_memory
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.models.llama import LlamaForward
from autotune.models.loading import LoadedModel

Sequence = tuple[int, list[int]]      # (prompt length P, prompt + continuation ids)

# Prompts decoded together. A decode step reads every weight once whatever the rows, so
# on the 2-core machine 16 rows made the references 2.1x faster than one by one (48
# Spec-Bench prompts x 32 tokens, SmolLM2-135M: 67 s -> 31 s, every token the same;
# bench/reference_decoding.py prints both); 32 a little more, and the prefills, one
# prompt at a time, are then most of what is left.
BATCH_ROWS = 32
# A batch's KV cache spans its longest row (positions for the prompt, the new tokens
# and a draft's scratch), so 32 rows of the longest Spec-Bench prompts held 1.1 GB on
# the default model and the held-out pool's decode peaked ~1.9 GB above the model
# (issue 51). Rows are taken while the cache stays under this; a row that alone needs
# more decodes alone. Each row equals its single-row run, so the tokens do not depend
# on how rows are grouped.
BATCH_CACHE_BYTES = 384 * 2**20


def _no_clock() -> float:
    # The decoder reads a clock around each phase; nothing here is timed.
    return 0.0


def reference_continuations(target: LoadedModel, prompt_ids: list[list[int]],
                            max_new_tokens: int, batch_rows: int = BATCH_ROWS,
                            cache_bytes: int = BATCH_CACHE_BYTES) -> list[list[int]]:
    """The target's greedy continuation of each prompt (up to `max_new_tokens` ids each,
    stopping after an EOS), decoded by the AR baseline (`DecodeConfig()`).

    On the compact Llama forward, up to `batch_rows` prompts at a time through the
    batched decoder, whose rows each equal their single-row run (its own prefill, its
    own cache positions and causal mask), as many as keep the batch's KV cache within
    `cache_bytes`; other forwards, or `batch_rows` 1, one by one."""
    if batch_rows > 1 and len(prompt_ids) > 1 and isinstance(target.forward, LlamaForward):
        from autotune.decoding.batched import BatchedDecoder

        batched = BatchedDecoder(target, DecodeConfig())
        out: dict[int, list[int]] = {}
        for chunk in _batches(target.forward, prompt_ids, max_new_tokens, batch_rows,
                              cache_bytes):
            rows = batched.generate([prompt_ids[i] for i in chunk], max_new_tokens,
                                    _no_clock).rows
            out.update((i, row.tokens) for i, row in zip(chunk, rows))
            # The batch's cache and passes are freed here: hand the pages back before
            # the next batch, so the decode's peak is one batch's, not a sum of them.
            release_freed_memory()
        return [out[i] for i in range(len(prompt_ids))]
    decoder = SpeculativeDecoder(target, DecodeConfig())
    return [decoder.generate(ids, max_new_tokens, _no_clock).tokens for ids in prompt_ids]


def _batches(forward: LlamaForward, prompt_ids: list[list[int]], max_new_tokens: int,
             batch_rows: int, cache_bytes: int) -> list[list[int]]:
    """The prompts' indices in batches: rows of like lengths together (a batch's
    attention and cache span its longest row), at most `batch_rows` of them and as many
    as keep the batch cache (`BatchedDecoder.generate`'s) within `cache_bytes`."""
    from autotune.decoding.batched import cache_span

    order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
    batches: list[list[int]] = []
    for i in order:
        # Sorted by length: the row joining a batch is its longest.
        span = cache_span(len(prompt_ids[i]), max_new_tokens)
        last = batches[-1] if batches else None
        if (last is None or len(last) >= batch_rows
                or forward.cache_bytes(len(last) + 1, span) > cache_bytes):
            batches.append([i])
        else:
            last.append(i)
    return batches
