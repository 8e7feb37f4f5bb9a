"""The documented table of config keys, kept in step with the knobs' metadata.

docs/commands.md (`DOC_PAGE`), under `autotune measure`, lists every `DecodeConfig` key
in a `| key | meaning | default |` table, whose rows may group related keys
(`gamma`, `target_acceptance`, ... in one row). `documented_keys` reads which keys it
lists, so a test can fail when a knob is added or removed without the docs; `row`
renders a knob's row from its doc and default, which that test prints for the keys to
add. `python -m autotune.schema.knob_table` prints the whole table, one row per key.
"""

from __future__ import annotations

import re
from typing import Any

from autotune.schema.config import KNOBS, DecodeConfig
from autotune.schema.knobs import Knob

# The page (relative to the repository root) whose table lists the config keys.
DOC_PAGE = "docs/commands.md"
TABLE_HEADER = "| key | meaning | default |"
_KEY = re.compile(r"`([^`]+)`")


def show_default(value: Any, knob: Knob) -> str:
    """A default as the docs write it: `fixed`, 4, 0.6, empty."""
    if knob.default_doc is not None:
        return knob.default_doc
    if isinstance(value, tuple):
        return ", ".join(map(str, value)) if value else "empty"
    if isinstance(value, str):
        return f"`{value}`"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def row(name: str) -> str:
    """`| `k` | most draft tokens per round (...) | 4 |`: one knob's row."""
    knob = KNOBS[name]
    return f"| `{name}` | {knob.doc} | {show_default(getattr(DecodeConfig(), name), knob)} |"


def table() -> str:
    """The whole table, one row per knob in field order."""
    return "\n".join([TABLE_HEADER, "|---|---|---|", *(row(name) for name in KNOBS)])


def documented_keys(text: str) -> list[str]:
    """The keys a page's knob table lists, in order (several per row where grouped);
    [] when it has no such table."""
    lines = text.splitlines()
    if TABLE_HEADER not in lines:
        return []
    keys: list[str] = []
    for line in lines[lines.index(TABLE_HEADER) + 2:]:      # past the |---| line
        if not line.startswith("|"):
            break
        keys += _KEY.findall(line.split("|")[1])
    return keys


if __name__ == "__main__":
    print(table())
