"""Writing output files so that a crash or a kill never leaves half of one, and reading
a JSON file into one AutotuneError line when it cannot be read."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from autotune.common.errors import AutotuneError


def cache_root() -> Path:
    """autotune's cache folder: $AUTOTUNE_CACHE, else ~/.cache/autotune (model downloads,
    replay references, engine builds outside a virtual environment)."""
    return Path(os.environ.get("AUTOTUNE_CACHE") or Path.home() / ".cache" / "autotune")


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder, fsync, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def file_version(path: Path) -> str:
    """A short key of one version of a file (its resolved path, size and mtime): what a
    cache derived from the file is filed under, so an edited file is not reused."""
    stat = path.stat()
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()
    return hashlib.sha256(key).hexdigest()[:12]


def read_json(path: str | Path) -> Any:
    """The JSON in `path`, or an AutotuneError naming the file (and the line of a syntax
    error)."""
    path = Path(path)
    if not path.is_file():
        raise AutotuneError(f"file not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise AutotuneError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise AutotuneError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
