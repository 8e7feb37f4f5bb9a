"""Where the benches find Spec-Bench's prompts (its `data/spec_bench/question.jsonl`: 480
questions in 13 categories, Xia et al., 2024): `--workload PATH` where a bench takes one,
else the environment variable AUTOTUNE_SPEC_BENCH, else the copy autotune ships
(`--workload spec_bench`)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

ENV = "AUTOTUNE_SPEC_BENCH"


def spec_bench(given: str | None = None) -> Path:
    """The Spec-Bench question.jsonl: `given`, else $AUTOTUNE_SPEC_BENCH, else the shipped
    copy; one line and exit when a given path names no file."""
    value = given or os.environ.get(ENV)
    if not value:
        return Path(str(resources.files("autotune.workloads").joinpath("spec_bench.jsonl")))
    path = Path(value)
    if not path.is_file():
        raise SystemExit(f"{path}: no such file (Spec-Bench's question.jsonl expected)")
    return path


def workload_or_spec_bench(given: str | None = None) -> str:
    """`given`, else Spec-Bench ($AUTOTUNE_SPEC_BENCH, else the shipped copy)."""
    return given or str(spec_bench())
