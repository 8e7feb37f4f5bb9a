"""Engines' start-up times as measured on this machine, kept for the next run's plan.

A time budget admits an engine's race in itself only if its engines' start-up fits
(issue 59): vLLM's CPU build takes 28 s eager and 66-97 s compiled on a 2-core machine,
and three of them (a finalist, its default, its AR) were 342 s of a 600 s run. A prior
in AR tokens (`EngineCost.start_tokens`) scales with the machine's decode speed, which a
start-up (Python imports, weight loading, graph compilation) does not; so each start is
recorded here, in seconds, and a later plan prices the engine's start-up with the median
of what this machine recorded for the same engine, version, mode, model and threads.

The file is `<cache>/engine_startup.json` (`AUTOTUNE_CACHE` moves it), written
atomically; a file that does not read is ignored (and rewritten by the next start).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from autotune.common.files import cache_root, write_atomically

__all__ = ["STARTUP_FILE", "StartupKey", "known_startup", "machine_threads", "record_startup",
           "startup_file"]

STARTUP_FILE = "engine_startup.json"
# The most recent starts kept per key (the median of these prices the next plan).
KEPT = 5


@dataclass(frozen=True)
class StartupKey:
    """What an engine's start-up depends on: the engine, its release, its mode
    (compiled or eager), the model it loads and the CPU threads it may use."""

    engine: str
    version: str
    mode: str
    model: str
    threads: int

    def text(self) -> str:
        return f"{self.engine} {self.version} {self.mode} {self.model} threads={self.threads}"


def startup_file() -> Path:
    return cache_root() / STARTUP_FILE


def machine_threads() -> int:
    """CPU threads this process may run on (a `taskset` narrows them)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _read(path: Path) -> dict[str, list[float]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: [float(v) for v in values if isinstance(v, (int, float)) and v > 0]
            for key, values in data.items() if isinstance(values, list)}


def known_startup(key: StartupKey, path: Path | None = None) -> float | None:
    """The median start-up in seconds this machine recorded for `key`, or None."""
    values = sorted(_read(path or startup_file()).get(key.text(), []))
    return values[len(values) // 2] if values else None


def record_startup(key: StartupKey, seconds: float, path: Path | None = None) -> None:
    """Add one measured start-up of `key` (the oldest beyond KEPT dropped). A cache
    folder that cannot be written loses the figure, never the run."""
    if not seconds > 0:
        return
    path = path or startup_file()
    data = _read(path)
    data[key.text()] = [*data.get(key.text(), []), float(seconds)][-KEPT:]
    try:
        write_atomically(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass
