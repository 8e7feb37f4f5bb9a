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


# --------------------------------------------------------------- the process tree
# Engines run as children (vLLM's engine processes and their workers, llama-server): a
# run's own peak leaves them out, though they hold as much as it does (about 2.9 GB per
# idle vLLM engine). Their memory is read as PSS (proportional set size, from
# /proc/<pid>/smaps_rollup), so pages the children share (a model file mapped by
# several) count once, not once per process as a sum of RSS would; this process's own
# part is its RSS, as its own peak is reported.

def _children() -> dict[int, list[int]]:
    """Parent pid -> its children's pids, from /proc/<pid>/stat."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields after its last ")".
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, theirs, ...)."""
    tree, found, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def pss_bytes(pid: int) -> int:
    """`pid`'s proportional set size in bytes (0 where it has ended or is unreadable)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    found = re.search(r"^Pss:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else 0


def tree_bytes(pid: int | None = None) -> int:
    """The memory of `pid` (None: this process, read as its RSS, the figure its own peak
    is reported in) and every process below it (PSS summed)."""
    import os

    if pid is None:
        own = current_rss_bytes() or 0
        return own + sum(pss_bytes(p) for p in descendants(os.getpid()))
    return sum(pss_bytes(p) for p in (pid, *descendants(pid)))


class TreePeaks:
    """Peak memory of this process and its children (engines) per stage, sampled every
    `every_s` seconds by a daemon thread (a child's high-water mark cannot be restarted
    from here, so its peak is what a sample saw). `lap()` closes the current stage and
    returns its peak in bytes (0 where /proc is absent); `close()` stops the sampling."""

    def __init__(self, every_s: float = 1.0) -> None:
        import threading

        self._peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.available = Path("/proc/self/smaps_rollup").exists()
        self._every = every_s
        self._thread = threading.Thread(target=self._sample, name="autotune-memory",
                                        daemon=True)
        if self.available:
            self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.sample_now()
            self._stop.wait(self._every)

    def sample_now(self) -> None:
        value = tree_bytes()
        with self._lock:
            self._peak = max(self._peak, value)

    def lap(self) -> int:
        if not self.available:
            return 0
        self.sample_now()
        with self._lock:
            peak, self._peak = self._peak, 0
        return peak

    def close(self) -> None:
        self._stop.set()


def available_bytes() -> int | None:
    """What the OS can still give without swapping (MemAvailable), None where unknown."""
    try:
        found = re.search(r"^MemAvailable:\s+(\d+)\s+kB", Path("/proc/meminfo").read_text(),
                          re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


def engines_that_fit(engine_bytes: int, most: int, spare_bytes: int = 2 * 1024**3) -> int:
    """How many more idle engines of `engine_bytes` each the machine's available memory
    holds beside `spare_bytes` for the run itself, between 0 and `most` (`most` where
    the memory is unknown)."""
    free = available_bytes()
    if free is None or engine_bytes <= 0:
        return most
    return max(0, min(most, (free - spare_bytes) // engine_bytes))
