"""Where a study lives: an Optuna storage by URL or journal path.

Storage is Optuna's own: a journal file in the run folder by default (appended and
fsync'ed per change, so `kill -9` loses nothing finished), or any RDB URL shared by many
workers (with heartbeats, so a lost machine's trial is failed and queued again).

Imports optuna, not torch: the report and `autotune report` open a study through it,
below the search (which worker owns a trial is the search's: `search.storage`).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import optuna
from optuna.storages import BaseStorage
from optuna.storages.journal import JournalFileBackend

from autotune.common.errors import AutotuneError

__all__ = ["JOURNAL_NAME", "storage_url_shown", "storage_from_url"]

JOURNAL_NAME = "study.journal"       # the default storage, inside the run folder


def storage_from_url(storage: str) -> BaseStorage:
    """An Optuna storage from a URL (RDB, with heartbeats) or a journal file path."""
    if "://" in storage:
        if storage.startswith("redis"):
            raise AutotuneError("redis storage is not supported; use a journal file or an "
                                "RDB URL (postgresql://, mysql://, sqlite:///)")
        # Workers starting together race to create the schema; the loser's CREATE fails
        # on a duplicate, and a second try finds the tables made.
        for attempt in range(4):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    # A worker that stops beating for grace_period is taken as lost: its
                    # trial is failed and queued again (counted_trials skips the lost one).
                    return optuna.storages.RDBStorage(
                        storage, heartbeat_interval=30, grace_period=120,
                        heartbeat_stale_trial_callback=(
                            optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)),
                        engine_kwargs={"pool_pre_ping": True})
            except Exception as exc:  # driver missing, server down, bad URL: one line
                racing = any(word in str(exc) for word in ("already exists", "duplicate key"))
                if racing and attempt < 3:
                    time.sleep(0.5 * (attempt + 1))
                    continue
                raise AutotuneError(f"cannot open storage {storage_url_shown(storage)}: "
                                    f"{str(exc).splitlines()[0]}") from None
    path = Path(storage)
    path.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


def storage_url_shown(url: str) -> str:
    """The URL with any password replaced, for messages and files."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url
