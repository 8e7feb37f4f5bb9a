"""The token ids transformers' sampled prompt lookup refuses to draft.

PromptLookupCandidateGenerator (transformers at PROVENANCE["hf"]'s first release,
candidate_generator.py L1111-1129; docs/engines/hf.md) runs the generation's logits
processors on stand-in logits, `torch.ones((bsz, vocab_size))`, and cuts a draft before
the first token they set to -inf. Under sampling those processors include
TopPLogitsWarper for top_p < 1 (utils.py L1626-1629), which on equal logits masks the
(1 - top_p) share of the vocabulary that
`torch.sort` happens to put first among the ties: which ids is the sort's business (it
is not stable), so they are found here by running transformers' own warpers, as
autotune's HF backend configures them (temperature, top_p, top_k=0), on the device the
engine would run them on.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)


@lru_cache(maxsize=16)
def stand_in_masked(vocab_size: int, temperature: float, top_p: float,
                    device: str = "cpu") -> frozenset[int]:
    """The ids transformers' sampling warpers mask on uniform stand-in logits of
    `vocab_size` entries (empty for top_p >= 1, where no top-p filter is added)."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if top_p >= 1.0:
        return frozenset()
    # _get_logits_processor's order for do_sample: temperature (when not 1), then top-p.
    warpers = LogitsProcessorList(
        ([TemperatureLogitsWarper(temperature)] if temperature != 1.0 else [])
        + [TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1)])
    stand_in = torch.ones((1, vocab_size), dtype=torch.float32, device=device)
    ids = torch.zeros((1, 1), dtype=torch.long, device=device)
    out = warpers(ids, stand_in)[0]
    # The generator's test: `in (-inf, torch.finfo(dtype).min)`.
    masked = (out == -float("inf")) | (out == torch.finfo(out.dtype).min)
    return frozenset(masked.nonzero().flatten().tolist())
