"""`autotune profile`: time the target's forward for 1..128 new tokens and print the curve
(the same one `autotune search` keeps in its run folder as hardware_profile.json); with
--batch-sizes also the batched verify pass over B rows x n tokens per row (the run
folder's "batch" profile of a search with --batch-sizes)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from autotune.common.errors import AutotuneError
from autotune.common.files import write_atomically
from autotune.measure.profile import (
    DEFAULT_CONTEXT,
    DEFAULT_REPEATS,
    DEFAULT_ROW_SIZES,
    DEFAULT_SIZES,
    batch_forward_profile,
    check_sizes,
    format_profile,
    forward_cost_profile,
    parse_sizes,
)


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """`--batch-sizes 1,4,16` -> (1, 4, 16): distinct integers >= 1, sorted; anything else
    is one AutotuneError line naming the flag (check_sizes would speak of token counts)."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    try:
        values = [int(part) for part in items]
    except ValueError:
        raise AutotuneError(f"--batch-sizes {text!r} is not a comma-separated list of batch "
                            "sizes, e.g. 1,4,16") from None
    if not values:
        raise AutotuneError(f"--batch-sizes {text!r} lists no batch size")
    for value in values:
        if value < 1:
            raise AutotuneError(f"--batch-sizes: batch size {value} is not >= 1")
    if len(set(values)) != len(values):
        raise AutotuneError(f"--batch-sizes {text!r} lists a batch size twice")
    return check_sizes(values)


def _cell(points: dict[tuple[int, int], float], b: int, n: int) -> str:
    ms = points.get((b, n))
    return f"{ms:.2f}" if ms is not None else "-"


def format_batch_profile(batch: dict[str, Any]) -> str:
    """The batch table of `autotune profile --batch-sizes`: one row per tokens-per-row,
    one column per batch size, median ms of the batched pass; then, per batch size, its
    1-token pass against one row's and the tokens/s that batched AR could reach at most."""
    points = {(p["batch_size"], p["tokens"]): float(p["ms"]) for p in batch["batch_points"]}
    batch_sizes = sorted({b for b, _ in points})
    tokens = sorted({n for _, n in points})
    head = ("tokens/row", *(f"B={b}" for b in batch_sizes))
    rows = [(str(n), *(_cell(points, b, n) for b in batch_sizes)) for n in tokens]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [head, *rows]]
    lines.append(f"\none batched pass over B rows x n tokens per row ({batch['model']} on "
                 f"{batch['device']}, {batch['dtype']}), bare forward after "
                 f"{batch['context_tokens']} context tokens, median of {batch['repeats']}")
    one = points.get((1, 1))
    if one is None or one <= 0:
        lines.append("no 1-row, 1-token point: no batch size is compared with one row")
        return "\n".join(lines)
    width = len(str(batch_sizes[-1]))
    for b in batch_sizes:
        ms = points.get((b, 1))
        if ms is None or ms <= 0:
            continue
        # A batched AR step is this pass at 1 token per row; the decoder's sampling and
        # bookkeeping come on top, so B tokens per pass is a ceiling, not a forecast.
        lines.append(f"{b:>{width}} row{'s' if b > 1 else ' '} cost {ms / one:.2f}x one row "
                     f"at 1 token; tokens/s ceiling of batched AR {b / ms * 1000:.0f}")
    return "\n".join(lines)


def run_profile_command(args: argparse.Namespace) -> int:
    sizes = parse_sizes(args.sizes) if args.sizes is not None else DEFAULT_SIZES
    batch_sizes = (parse_batch_sizes(args.batch_sizes) if args.batch_sizes is not None
                   else None)
    for flag, value in (("--context", args.context), ("--repeats", args.repeats)):
        if value is not None and value < 1:
            raise AutotuneError(f"{flag} must be at least 1")
    output = Path(args.output) if args.output else None
    if output is not None and output.is_dir():
        raise AutotuneError(f"-o {output} is a folder; give a file name")
    context = args.context if args.context is not None else DEFAULT_CONTEXT
    repeats = args.repeats if args.repeats is not None else DEFAULT_REPEATS
    # torch and transformers load here, once the arguments are known to be good.
    from autotune.models.loading import load_model
    print(f"autotune: loading {args.model}", file=sys.stderr, flush=True)
    target = load_model(args.model, args.device, args.dtype, args.trust_remote_code)
    print(f"autotune: timing the forward for {sizes[0]}..{sizes[-1]} new tokens "
          f"({len(sizes)} sizes)", file=sys.stderr, flush=True)
    # The single-row curve first: its check that the sizes fit the model's positions
    # guards the batch profile too, which only shortens its context.
    profile = forward_cost_profile(target, sizes, context_tokens=context, repeats=repeats)
    print(format_profile(profile), flush=True)
    if batch_sizes is not None:
        # Batch size 1 and 1 token per row are always timed: every batch size is read
        # against one row's AR step (as a search's batch profile includes B=1).
        rows = check_sizes(sorted({1, *batch_sizes}))
        widths = check_sizes(sorted({1, *(sizes if args.sizes is not None
                                          else DEFAULT_ROW_SIZES)}))
        print(f"autotune: timing the batched verify pass for batch sizes "
              f"{','.join(map(str, rows))} x {widths[0]}..{widths[-1]} tokens per row",
              file=sys.stderr, flush=True)
        # A model on HF's forward is refused here in one line, and -o is not written.
        batch = batch_forward_profile(target, rows, widths, context_tokens=context,
                                      repeats=repeats)
        print("\n" + format_batch_profile(batch))
        # The key and shape `autotune search --batch-sizes` stores in the run folder.
        profile["batch"] = batch
    if output is not None:
        write_atomically(output, json.dumps(profile, indent=2) + "\n")
        print(f"autotune: wrote {output}", file=sys.stderr)
    return 0
