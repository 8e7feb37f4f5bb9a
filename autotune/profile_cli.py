"""`autotune profile`: time the target's forward for 1..128 new tokens and print the curve
(the same one `autotune search` keeps in its run folder as hardware_profile.json)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.files import write_atomically
from autotune.profile import (DEFAULT_CONTEXT, DEFAULT_REPEATS, DEFAULT_SIZES,
                              forward_cost_profile, format_profile, parse_sizes)


def run_profile_command(args: argparse.Namespace) -> int:
    sizes = parse_sizes(args.sizes) if args.sizes is not None else DEFAULT_SIZES
    for flag, value in (("--context", args.context), ("--repeats", args.repeats)):
        if value is not None and value < 1:
            raise AutotuneError(f"{flag} must be at least 1")
    output = Path(args.output) if args.output else None
    if output is not None and output.is_dir():
        raise AutotuneError(f"-o {output} is a folder; give a file name")
    # torch and transformers load here, once the arguments are known to be good.
    from autotune.models.loading import load_model
    print(f"autotune: loading {args.model}", file=sys.stderr, flush=True)
    target = load_model(args.model, args.device, args.dtype, args.trust_remote_code)
    print(f"autotune: timing the forward for {sizes[0]}..{sizes[-1]} new tokens "
          f"({len(sizes)} sizes)", file=sys.stderr, flush=True)
    profile = forward_cost_profile(
        target, sizes,
        context_tokens=args.context if args.context is not None else DEFAULT_CONTEXT,
        repeats=args.repeats if args.repeats is not None else DEFAULT_REPEATS)
    print(format_profile(profile))
    if output is not None:
        write_atomically(output, json.dumps(profile, indent=2) + "\n")
        print(f"autotune: wrote {output}", file=sys.stderr)
    return 0
