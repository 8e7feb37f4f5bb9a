"""This process's peak resident set size (RSS), per stage of a run.

Why RSS: it is what the OOM killer and `/usr/bin/time -v` read, and it counts what the
Python and torch allocators hold (freed tensors that glibc has not returned, caches)
as well as live tensors; tracemalloc sees only Python's own allocations, torch's
allocator statistics only CUDA's.

A stage's peak needs the high-water mark restarted at the stage's start. Linux does that
when "5" is written to /proc/self/clear_refs (since 4.0): VmHWM in /proc/self/status
then restarts from the current RSS. Where that is not possible (another OS, a sandbox
refusing the write) the peak is the process's since it started
(`resource.getrusage`'s ru_maxrss), and `StagePeaks.per_stage` says so.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int | None:
    """A `kB` field of /proc/self/status (VmRSS, VmHWM), in KiB; None where unreadable."""
    try:
        found = re.search(rf"^{field}:\s+(\d+)\s+kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def current_rss_bytes() -> int | None:
    """The resident set now, in bytes (None where /proc is absent)."""
    kib = _status_kib("VmRSS")
    return kib * 1024 if kib is not None else None


def peak_rss_bytes() -> int:
    """The resident set's high-water mark, in bytes: since the last `reset_peak` where it
    worked, else since the process started."""
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    return peak if sys.platform == "darwin" else peak * 1024


def reset_peak() -> bool:
    """Restart the high-water mark from the current RSS; False where the OS cannot."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return _status_kib("VmHWM") is not None


class StagePeaks:
    """Peak RSS of consecutive stages: `lap()` closes the current stage and returns its
    peak in bytes, then starts the next one's high-water mark."""

    def __init__(self) -> None:
        self.per_stage = reset_peak()

    def lap(self) -> int:
        peak = peak_rss_bytes()
        if self.per_stage:
            self.per_stage = reset_peak()
        return peak


def gb(n_bytes: float) -> str:
    """`n_bytes` as "1.23 GB" (10^9 bytes)."""
    return f"{n_bytes / 1e9:.2f} GB"


def release_freed_memory() -> bool:
    """Hand the memory the C allocator holds freed back to the OS (glibc's malloc_trim).

    Why: torch's CPU tensors come from malloc; a replay makes and frees thousands of
    small and mid-sized tensors per config (tables, logits, hidden states), and glibc
    keeps the freed pages in its arenas, fragmented, so RSS grew by ~17 MB per config
    screened on the default model while the live objects grew by under 1 MB
    (bench/memory.py). False where there is no glibc (nothing to do there)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False


class TrimEvery:
    """Hands freed pages back once per `n_bytes` of large tensors made and dropped.

    Why: a loop that makes large tensors (a table's logits over the vocabulary) and
    keeps small ones made from them (the table) leaves glibc's freed pages split by the
    kept ones, so RSS grows by what it made: 0.9 GB over one config's exit tables of 32
    prompts on the default model. A trim after each prompt kept it flat but made such a
    config 15-20% slower (each trim and the page faults after it); one per `n_bytes`
    bounds the growth to about `n_bytes` at a tenth of the trims."""

    def __init__(self, n_bytes: int) -> None:
        self.n_bytes = n_bytes
        self._made = 0

    def made(self, n_bytes: int) -> None:
        """`n_bytes` more were made and dropped; trim once they add up to `n_bytes`."""
        self._made += n_bytes
        if self._made >= self.n_bytes:
            release_freed_memory()
            self._made = 0
