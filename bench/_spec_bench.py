"""Where the benches find Spec-Bench's prompts (its `data/spec_bench/question.jsonl`: 480
questions in 13 categories, Xia et al., 2024): `--workload PATH` where a bench takes one,
else the environment variable AUTOTUNE_SPEC_BENCH. autotune does not ship the file."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "AUTOTUNE_SPEC_BENCH"


def spec_bench(given: str | None = None) -> Path:
    """The Spec-Bench question.jsonl: `given`, else $AUTOTUNE_SPEC_BENCH; one line and exit
    when neither names a file."""
    value = given or os.environ.get(ENV)
    if not value:
        raise SystemExit(f"this bench measures on Spec-Bench: set {ENV}=PATH/question.jsonl "
                         "(or give --workload PATH where the bench takes it)")
    path = Path(value)
    if not path.is_file():
        raise SystemExit(f"{path}: no such file (Spec-Bench's question.jsonl expected)")
    return path


def spec_bench_or_builtin(given: str | None = None) -> str:
    """`given`, else Spec-Bench from $AUTOTUNE_SPEC_BENCH, else autotune's built-in prompts."""
    return given or os.environ.get(ENV) or "builtin"
