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


def check_writable_folder(path: Path, flag: str) -> None:
    """Raise one AutotuneError line unless the folder `path` can be made (or exists) and
    written into. Probes with a temporary folder inside `path`, or inside its nearest
    existing ancestor when `path` does not exist yet, and removes it: the check leaves
    nothing behind (a run that stops before its first file must leave no folder)."""
    probe_parent = path
    while not probe_parent.exists():
        if probe_parent.parent == probe_parent:
            break
        probe_parent = probe_parent.parent
    if probe_parent.exists() and not probe_parent.is_dir():
        raise AutotuneError(f"{flag} {path}: {probe_parent} is not a folder")
    try:
        probe = tempfile.mkdtemp(prefix=".autotune-probe-", dir=probe_parent)
        try:
            if probe_parent != path:
                # The folder itself must be makeable below the ancestor (a name too long,
                # a file system that refuses it).
                Path(probe, *path.relative_to(probe_parent).parts).mkdir(parents=True)
            with tempfile.TemporaryFile(dir=probe):
                pass
        finally:
            _remove_tree(Path(probe))
    except OSError as exc:
        raise AutotuneError(f"{flag} {path} cannot be written: "
                            f"{exc.strerror or exc} ({probe_parent})") from None


def _remove_tree(root: Path) -> None:
    """Remove the probe folder `root` and the empty folders under it."""
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        folder.rmdir()
    root.rmdir()


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
