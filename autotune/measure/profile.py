"""The target's forward cost against the number of tokens it verifies in one pass.

A speculative round verifies 1 + (drafted tokens) positions in one target forward. On a
GPU that forward costs about as much for 1 token as for dozens (it is bound by reading
the weights), which is why trees of 60 tokens pay off there (EAGLE-2); on a CPU the
cost grows much sooner. Sequoia (Chen et al. 2024) sizes its trees from exactly this
curve, profiled for n = 1 ... 128. `forward_cost_profile` measures it: the target's own
forward (the compact Llama forward, or HF's for other architectures) over n new tokens
after a prefilled context, full logits for every new token, as a verify pass computes.

Timing is `autotune.measure.timing`'s: `Clock` (perf_counter after a device sync), an
untimed warm-up (every size on a GPU), and the sizes visited round-robin `repeats`
times, so a slow drift of a shared machine hits every size alike; each size reports the
median and the minimum.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from autotune.common.errors import AutotuneError
from autotune.common.files import write_atomically
from autotune.measure.timing import Clock, forward_times, median_ms, time_points
# The profile's file and what is read off it live below measuring, for the report.
from autotune.records.profile import FREE_FACTOR, PROFILE_FILE, free_tokens

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel

DEFAULT_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128)
DEFAULT_CONTEXT = 128
DEFAULT_REPEATS = 3


def check_sizes(sizes: Sequence[Any]) -> tuple[int, ...]:
    """Sizes as a sorted tuple of distinct integers >= 1, or one AutotuneError line."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or not sizes:
        raise AutotuneError("profile sizes must be a non-empty list of token counts")
    out = []
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise AutotuneError(f"profile size {size!r} is not a token count >= 1")
        out.append(size)
    if len(set(out)) != len(out):
        raise AutotuneError(f"profile sizes {list(out)} list a size twice")
    return tuple(sorted(out))


def parse_sizes(text: str) -> tuple[int, ...]:
    """`1,2,4,8` -> (1, 2, 4, 8), checked as `check_sizes` does."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    try:
        values = [int(part) for part in items]
    except ValueError:
        raise AutotuneError(f"--sizes {text!r} is not a comma-separated list of token "
                            "counts, e.g. 1,2,4,8") from None
    return check_sizes(values)


def _max_positions(target: LoadedModel) -> int | None:
    config = getattr(target.hf_model, "config", None)
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def forward_cost_profile(target: LoadedModel, sizes: Sequence[int] = DEFAULT_SIZES,
                         context_tokens: int = DEFAULT_CONTEXT,
                         repeats: int = DEFAULT_REPEATS) -> dict[str, Any]:
    """Milliseconds of one target forward over n new tokens, for each n in `sizes`.

    The context is prefilled once (untimed); every timed forward writes its n tokens
    right after it, where a verify pass would. Returns {"model", "device", "dtype",
    "context_tokens", "repeats", "points": [{"tokens", "ms", "ms_min"}, ...]} with the
    points in increasing `tokens`. The context is shortened when the model has too few
    positions for context + the largest size (the result says how long it was).
    """
    sizes = check_sizes(sizes)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise AutotuneError(f"profile repeats={repeats!r} must be an integer >= 1")
    if isinstance(context_tokens, bool) or not isinstance(context_tokens, int) \
            or context_tokens < 1:
        raise AutotuneError(f"profile context_tokens={context_tokens!r} must be an "
                            "integer >= 1")
    largest = sizes[-1]
    limit = _max_positions(target)
    if limit is not None:
        if largest + 1 > limit:
            raise AutotuneError(f"profile size {largest} does not fit the model's {limit} "
                                "positions after a context")
        context_tokens = min(context_tokens, limit - largest)
    forward, device = target.forward, target.device
    times = forward_times(forward, forward.vocab_size, sizes, context_tokens, Clock(device),
                          device, repeats)
    return {
        "model": target.name,
        "device": str(device),
        "dtype": str(target.dtype).removeprefix("torch."),
        "context_tokens": context_tokens,
        "repeats": repeats,
        "points": [{"tokens": n, "ms": median_ms(times[n]),
                    "ms_min": 1000 * min(times[n])} for n in sizes],
    }


def ar_seconds_per_token(target: LoadedModel, repeats: int = 8,
                         context_tokens: int = 32) -> float:
    """The machine's AR speed today: seconds of the target's one-token forward after a
    short context, the median of `repeats` (after the untimed warm-up `time_points`
    runs). What `--time-budget` sizes a search from: every stage's cost scales with it."""
    limit = _max_positions(target)
    if limit is not None:
        context_tokens = max(1, min(context_tokens, limit - 1))
    forward, device = target.forward, target.device
    times = forward_times(forward, forward.vocab_size, (1,), context_tokens, Clock(device),
                          device, repeats, last_only=True)
    ordered = sorted(times[1])
    return ordered[len(ordered) // 2]


def ar_decode_seconds_per_token(target: LoadedModel, prompt_ids: Sequence[int],
                                new_tokens: int = 12, repeats: int = 3) -> float | None:
    """The machine's AR pace as a search pays it: seconds per decoded token of a greedy
    AR decode of `prompt_ids` through the decoder every trial and race uses (its loop,
    sampling and cache work included, which a bare forward leaves out: 1.2-1.7x the
    one-token forward on a slow machine, issue 59), the median of `repeats` after an
    untimed warm-up. None when the decode stops (EOS) before two tokens are decoded."""
    import time

    from autotune.decoding.decoder import SpeculativeDecoder
    from autotune.schema.config import DecodeConfig

    if not prompt_ids:
        return None
    limit = _max_positions(target)
    if limit is not None:
        prompt_ids = list(prompt_ids)[-max(1, limit - new_tokens - 1):]
    decoder = SpeculativeDecoder(target, DecodeConfig())
    clock = Clock(target.device)
    decoder.generate(list(prompt_ids), 2, time.perf_counter)            # warm-up
    paces = []
    for _ in range(repeats):
        out = decoder.generate(list(prompt_ids), new_tokens, clock)
        decoded = len(out.tokens) - out.first_tokens
        if decoded < 2 or out.decode_s <= 0:
            return None
        paces.append(out.decode_s / decoded)
    paces.sort()
    return paces[len(paces) // 2]


DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16)
# Tokens per row in a batched verify pass: 1 (an AR step) up to a long chain.
DEFAULT_ROW_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)


def batch_forward_profile(target: LoadedModel, batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
                          sizes: Sequence[int] = DEFAULT_ROW_SIZES,
                          context_tokens: int = DEFAULT_CONTEXT,
                          repeats: int = DEFAULT_REPEATS) -> dict[str, Any]:
    """Milliseconds of one batched target forward over B rows x n new tokens per row
    (the batched decoder's verify pass, `LlamaForward.forward_rows`), for each B in
    `batch_sizes` and n in `sizes`, every row after `context_tokens` cached tokens.

    Timed as `forward_cost_profile` times (untimed warm-up, of every (B, n) on a GPU;
    every (B, n) visited round-robin `repeats` times; median and minimum). Returns
    {"model", "device", "dtype", "context_tokens", "repeats", "batch_points":
    [{"batch_size", "tokens", "ms", "ms_min"}, ...]} sorted by batch size, then tokens.
    """
    # Imported here, not at the top: the report and `autotune profile`'s argument checks
    # read this module's curve helpers and must not load torch for them.
    import torch

    from autotune.models.llama import LlamaForward

    batch_sizes, sizes = check_sizes(batch_sizes), check_sizes(sizes)
    forward, device = target.forward, target.device
    if not isinstance(forward, LlamaForward):
        raise AutotuneError(f"the batch profile needs the compact Llama-family forward; "
                            f"{target.name} runs on HF's own forward")
    largest_b, largest_n = batch_sizes[-1], sizes[-1]
    limit = _max_positions(target)
    if limit is not None:
        context_tokens = max(1, min(context_tokens, limit - largest_n))
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(forward.vocab_size, (largest_b, context_tokens + largest_n),
                        generator=generator).to(device)
    points = [(b, n) for b in batch_sizes for n in sizes]
    with torch.inference_mode():
        cache = forward.new_cache(largest_b, context_tokens + largest_n)
        forward.forward(ids[:, :context_tokens], cache)

        def run(point: tuple[int, int]) -> None:
            # Every row writes its n tokens right after the context: nothing to crop.
            b, n = point
            forward.forward_rows(ids[:b, context_tokens:context_tokens + n],
                                 cache.rows(0, b), [context_tokens] * b)

        times = time_points(run, points, Clock(device), device, repeats)
    return {
        "model": target.name, "device": str(device),
        "dtype": str(target.dtype).removeprefix("torch."),
        "context_tokens": context_tokens, "repeats": repeats,
        "batch_points": [{"batch_size": b, "tokens": n,
                          "ms": median_ms(times[(b, n)]),
                          "ms_min": 1000 * min(times[(b, n)])} for b, n in points],
    }


def format_profile(profile: dict[str, Any]) -> str:
    """The table of `autotune profile`: tokens, ms, ms/token, x the first size's cost."""
    points = profile["points"]
    base = points[0]
    head = ("tokens", "ms", "ms/token", f"x {base['tokens']}-token cost")
    rows = [(str(p["tokens"]), f"{p['ms']:.2f}", f"{p['ms'] / p['tokens']:.3f}",
             f"{p['ms'] / base['ms']:.2f}" if base["ms"] > 0 else "-") for p in points]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [head, *rows]]
    free = free_tokens(profile)
    lines.append(f"\n{profile['model']} on {profile['device']} ({profile['dtype']}), after "
                 f"{profile['context_tokens']} context tokens, median of {profile['repeats']}")
    one = f"{base['tokens']} token{'s' if base['tokens'] > 1 else ''}"
    if free is not None and free > base["tokens"]:
        lines.append(f"verifying up to {free} tokens costs at most {FREE_FACTOR:g}x {one}")
    elif len(points) > 1 and base["ms"] > 0:
        step = points[1]
        lines.append(f"already {step['tokens']} tokens cost {step['ms'] / base['ms']:.2f}x "
                     f"{one}: verifying is not free here beyond {one}")
    return "\n".join(lines)


def _matches(doc: Any, target: LoadedModel) -> bool:
    return (isinstance(doc, dict) and isinstance(doc.get("points"), list) and doc["points"]
            and doc.get("model") == target.name and doc.get("device") == str(target.device)
            and doc.get("dtype") == str(target.dtype).removeprefix("torch."))


def run_profile(run_dir: Path, target: LoadedModel) -> tuple[dict[str, Any] | None, bool]:
    """The profile for RUN_DIR: (its hardware_profile.json when that was taken with this
    model, device and dtype, False) or (a fresh measurement, True: to be written with
    `save_run_profile` once the run is accepted). Nothing is written here, so a search
    refused afterwards leaves the folder as it was. A failure is a one-line warning and
    (None, False): the profile is worth having, not worth a search."""
    path = run_dir / PROFILE_FILE
    try:
        if path.is_file():
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                doc = None
            if _matches(doc, target):
                return doc, False
        print(f"autotune: profiling the target's forward cost for {DEFAULT_SIZES[0]}.."
              f"{DEFAULT_SIZES[-1]} tokens ({path.name})", file=sys.stderr, flush=True)
        return forward_cost_profile(target), True
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - the search goes on without it
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"autotune: warning: no hardware profile ({type(exc).__name__}"
              f"{': ' + first if first else ''})", file=sys.stderr, flush=True)
        return None, False


def save_run_profile(run_dir: Path, doc: dict[str, Any]) -> None:
    """Write RUN_DIR/hardware_profile.json atomically."""
    write_atomically(run_dir / PROFILE_FILE, json.dumps(doc, indent=2) + "\n")
