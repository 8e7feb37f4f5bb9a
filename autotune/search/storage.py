"""Which worker owns a trial, and where a study lives.

A worker is named `host:pid:start-time`, which tells a live worker from a reused pid.
Opening a study's storage (a journal file or an RDB URL) is `autotune.records.storage`'s,
below the search so the report opens one without it; its names stay importable here.
"""

from __future__ import annotations

import os
import socket

from autotune.records.storage import JOURNAL_NAME, storage_from_url, storage_url_shown

__all__ = ["JOURNAL_NAME", "storage_url_shown", "storage_from_url", "worker_alive", "worker_id"]


def worker_id() -> str:
    """host:pid:start-time of this process; the start time tells a live worker from a
    reused pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def worker_alive(worker: str) -> bool:
    """Whether the worker that owns a running trial still runs (same host only)."""
    try:
        host, pid_text, started = worker.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return True
    if host != socket.gethostname():
        return True            # another machine: only RDB heartbeats can tell
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return started == "?" or _start_time(pid) == started
