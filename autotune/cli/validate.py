"""`autotune validate FILE...`: print each file's verdict (`autotune.cli.file_check` decides it);
exit 2 when any file is invalid."""

from __future__ import annotations

import argparse
import sys

from autotune.cli.file_check import validate_file
from autotune.common.errors import EXIT_USAGE, AutotuneError


def run_validate_command(args: argparse.Namespace) -> int:
    if args.layers < 1:
        raise AutotuneError("--layers must be at least 1")
    status = 0
    for path in args.files:
        verdict = validate_file(path, args.layers)
        if verdict.problems:
            status = EXIT_USAGE        # an invalid file is a bad input
            for problem in verdict.problems:
                print(problem, file=sys.stderr)
            print(f"{path}: invalid {verdict.kind} ({len(verdict.problems)} problem"
                  f"{'s' if len(verdict.problems) > 1 else ''})", file=sys.stderr)
        else:
            print(f"{path}: valid {verdict.kind}: {verdict.summary}")
    return status
