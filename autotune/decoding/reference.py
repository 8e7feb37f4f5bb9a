"""The target's greedy continuations, decoded by the AR baseline: the reference that the
replay tier, the agreement proxy and training all read."""

from __future__ import annotations

from autotune.decoding.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.models.loading import LoadedModel

Sequence = tuple[int, list[int]]      # (prompt length P, prompt + continuation ids)


def _no_clock() -> float:
    # The decoder reads a clock around each phase; nothing here is timed.
    return 0.0


def reference_continuations(target: LoadedModel, prompt_ids: list[list[int]],
                            max_new_tokens: int) -> list[list[int]]:
    """The target's greedy continuation of each prompt (up to `max_new_tokens` ids each,
    stopping after an EOS), decoded by the AR baseline (`DecodeConfig()`)."""
    decoder = SpeculativeDecoder(target, DecodeConfig())
    return [decoder.generate(ids, max_new_tokens, _no_clock).tokens for ids in prompt_ids]
