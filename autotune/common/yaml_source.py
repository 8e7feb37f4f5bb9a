"""YAML files that remember where each key came from, for one-line errors.

Spaces and objectives are data written by people; a bad value should be reported as
`file:line: key: message; did you mean 'x'?`, the way a compiler would. `load_yaml`
returns the parsed document together with a map from key paths to line numbers, built
from the same text by `yaml.compose` (SafeLoader), so validators can point at the line
of the key they reject without a custom loader.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from autotune.common.errors import AutotuneError

KeyPath = tuple["str | int", ...]


def located(path: str | Path, line: int, message: str) -> AutotuneError:
    """An AutotuneError reading `path:line: message`, kept to one line."""
    first = " ".join(str(message).split())
    return AutotuneError(f"{path}:{line}: {first}")


def display_path(path: str | Path) -> str:
    """How a file is named in messages: relative to the working folder when inside it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:                      # another drive on Windows
        return str(path)
    return str(path) if rel.startswith("..") else rel


def dotted(key_path: KeyPath) -> str:
    """("knobs", "k", "choices", 2) -> "knobs.k.choices[2]"."""
    out = ""
    for part in key_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def closest(word: str, options: Iterable[str]) -> str | None:
    """The option closest to `word`, or None when none is close.

    Besides difflib's similarity, a word that begins exactly one option counts as close:
    people shorten long names (`latency` for `latency_ms_per_token`).
    """
    word, names = str(word), [str(o) for o in options]
    close = difflib.get_close_matches(word, names, n=1)
    if not close and word:
        close = [n for n in names if n.startswith(word)]
        close = close if len(close) == 1 else []
    return close[0] if close else None


def did_you_mean(word: str, options: Iterable[str], *, inline: bool = False) -> str:
    """`"; did you mean 'x'?"` for the closest option to `word` (see `closest`), or `""`
    when none is close. `inline` gives `" (did you mean 'x'?)"`, for messages that go on
    after the hint (`unknown key 'kk' (did you mean 'k'?); keys: ...`)."""
    close = closest(word, options)
    if close is None:
        return ""
    return f" (did you mean {close!r}?)" if inline else f"; did you mean {close!r}?"


def load_yaml(path: Path) -> tuple[Any, dict[KeyPath, int]]:
    """Safe-load `path` and map each key path to its 1-based line.

    A mapping entry's path is its parents' keys plus its own key (`("workload",
    "prompts")`) and its line is the key's; a sequence item's path ends in its index and
    its line is the item's start. The root `()` is line 1. YAML syntax errors become
    `path:line: YAML syntax error: ...`; so does a key repeated in one mapping (PyYAML
    keeps the last one silently, and a repeated key is almost always a slip). Messages
    name the file by `display_path`.
    """
    label = display_path(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AutotuneError(f"file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise AutotuneError(f"{path} is not valid UTF-8 (byte {exc.start})") from None
    except OSError as exc:
        raise AutotuneError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        reason = exc.problem or exc.context or "invalid YAML"
        raise located(label, line, f"YAML syntax error: {reason}") from None
    except yaml.YAMLError as exc:
        raise located(label, 1, f"YAML syntax error: {exc}") from None
    lines: dict[KeyPath, int] = {(): 1}
    if root is not None:
        _walk(label, root, (), lines, set())
    return data, lines


def line_of(lines: dict[KeyPath, int], key_path: KeyPath) -> int:
    """The line of `key_path`, or of its nearest ancestor that has one (at worst 1)."""
    for end in range(len(key_path), -1, -1):
        if key_path[:end] in lines:
            return lines[key_path[:end]]
    return 1


def _key(node: yaml.Node) -> str | int:
    """A mapping key as the loader would construct it (ints stay ints, rest as text)."""
    if isinstance(node, yaml.ScalarNode):
        if node.tag == "tag:yaml.org,2002:int":
            try:
                return int(node.value)
            except ValueError:
                return node.value
        return node.value
    return repr(node)        # a complex key: never a valid name, but still reportable


def _walk(label: str, node: yaml.Node, prefix: KeyPath, lines: dict[KeyPath, int],
          seen: set[int]) -> None:
    # Aliases make the node graph a DAG (or, in hostile input, a cycle): visit once.
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set[str | int] = set()
        for key_node, value_node in node.value:
            key = _key(key_node)
            path = prefix + (key,)
            if key in keys:
                raise located(label, key_node.start_mark.line + 1, f"{dotted(path)}: duplicate key")
            keys.add(key)
            lines.setdefault(path, key_node.start_mark.line + 1)
            _walk(label, value_node, path, lines, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            path = prefix + (index,)
            lines.setdefault(path, item.start_mark.line + 1)
            _walk(label, item, path, lines, seen)
