"""The target's greedy continuations, decoded by the AR baseline: the reference that the
replay tier, the agreement proxy and training all read."""

from __future__ import annotations

from autotune.decoding.config import DecodeConfig
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


def _no_clock() -> float:
    # The decoder reads a clock around each phase; nothing here is timed.
    return 0.0


def reference_continuations(target: LoadedModel, prompt_ids: list[list[int]],
                            max_new_tokens: int, batch_rows: int = BATCH_ROWS
                            ) -> list[list[int]]:
    """The target's greedy continuation of each prompt (up to `max_new_tokens` ids each,
    stopping after an EOS), decoded by the AR baseline (`DecodeConfig()`).

    On the compact Llama forward, `batch_rows` prompts at a time through the batched
    decoder, whose rows each equal their single-row run (its own prefill, its own cache
    positions and causal mask); other forwards, or `batch_rows` 1, one by one."""
    if batch_rows > 1 and len(prompt_ids) > 1 and isinstance(target.forward, LlamaForward):
        from autotune.decoding.batched import BatchedDecoder

        batched = BatchedDecoder(target, DecodeConfig())
        # Rows of like lengths together: a batch's attention spans its longest row.
        order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
        out: dict[int, list[int]] = {}
        for first in range(0, len(order), batch_rows):
            chunk = order[first:first + batch_rows]
            rows = batched.generate([prompt_ids[i] for i in chunk], max_new_tokens,
                                    _no_clock).rows
            out.update((i, row.tokens) for i, row in zip(chunk, rows))
        return [out[i] for i in range(len(prompt_ids))]
    decoder = SpeculativeDecoder(target, DecodeConfig())
    return [decoder.generate(ids, max_new_tokens, _no_clock).tokens for ids in prompt_ids]
