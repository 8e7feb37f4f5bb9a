"""Whether an optional package is installed, without importing it."""

from __future__ import annotations

from importlib.util import find_spec

__all__ = ["installed"]


def installed(module: str) -> bool:
    """Whether `module` (a dotted name) can be imported here; nothing is imported but
    its parent packages."""
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:              # a missing parent package
        return False
