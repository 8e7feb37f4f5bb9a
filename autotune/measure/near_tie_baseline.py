"""How often rounding alone flips greedy AR: the baseline a config's near-tie rate is read
against (issue 52, item 2).

A speculative config in bfloat16 leaves AR's output at near-ties because its verify
passes have other shapes than AR's one-token passes. AR itself does the same under
another pass shape: `chunked_ar` decodes the target's own greedy tokens in chunks of
`chunk` tokens per pass (each pass verifies the next chunk - 1 tokens of AR's output, as
a drafter that always guessed AR's tokens would have them verified, and keeps the
target's argmax), so its only difference from AR is the pass shape. Its flips against
AR are the near-tie rate no bug is needed for; a config far above it (`far_above`) is
flagged: a verify pass that is slightly wrong turns exact prompts into "near-ties".

The loop is written apart from the decoder's on purpose (a bug in the decoder's
verification must not shape its own baseline); it records numerics as the decoder does
and is teacher-checked the same way (`decoding/numerics.py`).
"""

from __future__ import annotations

import math

import torch

from autotune.decoding.decoder import Generation
from autotune.decoding.numerics import NumericsRecorder, teacher_force
from autotune.models.loading import LoadedModel

# Tokens per pass: a typical verify width (k = 4 drafts + the pending token).
CHUNK = 5
# A config's near-tie count is flagged when, at the baseline's rate, a count as high or
# higher would be seen less often than this (one-sided binomial tail).
FLAG_P = 0.01


@torch.inference_mode()
def chunked_ar(model: LoadedModel, prompt: list[int], reference: list[int],
               chunk: int = CHUNK) -> Generation:
    """Greedy AR of `model` after `prompt`, as many tokens as `reference` (AR's own
    output), each pass over the pending token and the next `chunk` - 1 tokens of
    `reference` (none once the output has left it). Untimed: prefill_s = decode_s = 0."""
    forward, eos = model.forward, model.eos_token_ids
    budget = len(reference)
    cache = forward.new_cache(1, len(prompt) + budget + chunk)
    recorder = NumericsRecorder(model.dtype)
    logits = forward.forward(torch.tensor([prompt], device=forward.device), cache,
                             last_only=True)[0]
    out = [int(logits[-1].argmax())]
    recorder.add(logits[-1:], out)
    while len(out) < budget and out[-1] not in eos:
        on_track = out == reference[:len(out)]
        guesses = reference[len(out):len(out) + chunk - 1] if on_track else []
        start = len(prompt) + len(out) - 1
        ids = torch.tensor([[out[-1], *guesses]], device=forward.device)
        rows = forward.forward(ids, cache, start=start)[0]                  # [1 + g, V]
        best = rows.argmax(dim=-1).tolist()
        n = 0
        while n < len(guesses) and guesses[n] == best[n]:
            n += 1
        new = (guesses[:n] + [best[n]])[:budget - len(out)]
        new = new[:next((i + 1 for i, t in enumerate(new) if t in eos), len(new))]
        recorder.add(rows[:len(new)], new)
        out.extend(new)
        cache.crop(start + 1 + n)
    numerics = recorder.finish()
    teacher_force(forward, prompt, out, numerics)
    return Generation(prompt_len=len(prompt), tokens=out, prefill_s=0.0, decode_s=0.0,
                      rounds=[], cache_bytes=0, numerics=numerics)


def far_above(count: int, base_count: int, prompts: int, p: float = FLAG_P) -> bool:
    """Whether `count` near-ties of `prompts` is far above the baseline's `base_count`:
    the chance of `count` or more at the baseline's rate (Laplace's (n + 1) / (N + 2),
    so a baseline of 0 is no certainty) is below `p`."""
    if prompts <= 0 or count <= base_count:
        return False
    rate = (base_count + 1) / (prompts + 2)
    tail = sum(math.comb(prompts, i) * rate ** i * (1 - rate) ** (prompts - i)
               for i in range(count, prompts + 1))
    return tail < p
