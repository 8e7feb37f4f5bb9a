"""`autotune report RUN_DIR`: write (or rewrite) the interactive HTML report of a run folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.report import write_report


def run_report_command(args: argparse.Namespace) -> int:
    out = write_report(Path(args.run_dir), Path(args.output) if args.output else None,
                       storage=args.storage)
    print(f"autotune: wrote {out}", file=sys.stderr)
    return 0
