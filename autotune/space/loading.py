"""Loading a space: a YAML file and its includes -> checked entries -> SearchSpace.

Every mistake is one AutotuneError line `file:line: key: problem`, with "did you mean"
for a misspelt name. Includes are merged (a local key wins), `when:` conditions are
resolved against the merged scope, and the entries are put in dependency order so that
binding can draw them front to back. Bounds are never copied here: a value is probed
through `DecodeConfig.validate`, and the knob types a key accepts come from its knob
metadata (`KNOBS[key].space_types`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import did_you_mean, display_path, dotted, load_yaml
from autotune.schema.config import KNOBS, config_from_mapping, own_keys
from autotune.schema.methods import find_method, tree_method_names
from autotune.space.binding import SearchSpace
from autotune.space.entries import (
    SWITCH,
    WORKLOAD_KEYS,
    BoundSet,
    Choices,
    Cond,
    Entry,
    Fixed,
    LayerSet,
    Range,
    Spec,
    Where,
    is_int,
    is_number,
)

__all__ = ["available_spaces", "load_space"]

_TOP_KEYS = ("description", "include", "fixed", "knobs")
_TREE_SHAPE = ("tree_width", "tree_depth", "tree_tokens")
# The knob types each tunable DecodeConfig field accepts, from its knob metadata, so a
# new field is tunable without touching this module.
_KNOB_TYPES: dict[str, tuple[str, ...]] = {
    name: knob.space_types for name, knob in KNOBS.items() if name not in WORKLOAD_KEYS}
_TYPE_KEYS: dict[str, tuple[str, ...]] = {
    "int": ("low", "high", "step", "log", "grid"),
    "float": ("low", "high", "step", "log", "grid"),
    "logfloat": ("low", "high", "grid"),          # log is implied; Optuna forbids log + step
    "categorical": ("choices",),
    "bool": (),
    SWITCH: ("choices",),
    "layers": ("candidates", "never_skip", "min_skipped", "max_skipped"),
    "exits": ("candidates", "min_exits", "max_exits"),
    "thresholds": ("low", "high", "step", "log", "grid"),
}
_REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "int": ("low", "high"), "float": ("low", "high"), "logfloat": ("low", "high"),
    "categorical": ("choices",), SWITCH: ("choices",), "thresholds": ("low", "high")}


# ------------------------------------------------------------------ small helpers

def _hint(word: object, options: Any) -> str:
    """did_you_mean, or else the list of what is allowed."""
    names = [str(o) for o in options]
    return did_you_mean(str(word), names) or (f"; expected one of: {', '.join(names)}" if names else "")


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _own_keys(method: Any) -> tuple[str, ...]:
    spec = find_method(method)
    return own_keys(spec) if spec is not None else ()


def _canon(key: str, value: Any) -> Any:
    """DecodeConfig's own coercion of one value (float for float keys, tuples for sets)."""
    return getattr(config_from_mapping({key: value}), key)


def _config_error(key: str, value: Any) -> str | None:
    """Why DecodeConfig.validate rejects `value` for `key`, or None.

    validate() is the one place bounds live, so ranges are probed through it rather than
    copied here; keys it checks together with another key get a partner that passes.
    """
    probe: dict[str, Any] = {key: value}
    if key in ("ngram_min", "ngram_max"):
        probe = {"ngram_min": value, "ngram_max": value}
    elif key in _TREE_SHAPE and is_int(value) and value > 0:
        # A tree needs a tree method and both width and depth; tokens 1 keeps any
        # width inside MAX_TREE_NODES, so each key is checked on its own.
        probe = {"method": tree_method_names()[0], "tree_width": 1, "tree_depth": 1,
                 "tree_tokens": 1, key: value}
    elif key == "tree_choices" and value:
        probe = {"method": tree_method_names()[0], "tree_choices": value}
    elif key == "thresholds":
        probe = {"method": KNOBS["thresholds"].methods[0], "exits": [1], "thresholds": [value]}
    elif key == "method" and "exits" in _own_keys(value):
        probe["exits"] = [1]         # a method that reads exits is invalid without one
    try:
        config_from_mapping(probe).validate()
    except AutotuneError as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------ YAML documents

@dataclass(frozen=True)
class _Doc:
    """One parsed space file: its data and the line of every key and list item."""

    path: Path
    label: str
    data: Any
    lines: Mapping[tuple[Any, ...], int]

    @classmethod
    def parse(cls, path: Path) -> _Doc:
        data, lines = load_yaml(path)
        return cls(path, display_path(path), data, lines)

    def where(self, at: tuple[Any, ...]) -> Where:
        probe = tuple(str(p) if not isinstance(p, int) else p for p in at)
        while probe and probe not in self.lines:
            probe = probe[:-1]
        return Where(self.label, self.lines.get(probe, 1), dotted(at))

    def error(self, at: tuple[Any, ...], message: str) -> AutotuneError:
        return self.where(at).error(message)


# ------------------------------------------------------------------ locating files

def _shipped_dir() -> Path:
    # setuptools installs package data as plain files (never zipped), so a Path is safe
    # and relative includes can be resolved against it like against any other folder.
    return Path(str(files("autotune.space.presets")))


def _shipped_names() -> list[str]:
    return sorted(p.stem for p in _shipped_dir().glob("*.yaml"))


def available_spaces() -> list[str]:
    """Names of the shipped spaces, sorted (fragments named `_*` are left out)."""
    return [n for n in _shipped_names() if not n.startswith("_")]


def _locate(name_or_path: str, base: Path | None) -> Path:
    """A shipped name, or a path (relative to `base` when given, else to the cwd)."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path or os.sep in name_or_path:
        path = Path(name_or_path).expanduser()
        if base is not None and not path.is_absolute():
            path = base / path
        if not path.is_file():
            raise AutotuneError(f"search space file not found: {path}; shipped spaces: "
                                f"{', '.join(available_spaces())}")
        return path.resolve()
    path = _shipped_dir() / f"{name_or_path}.yaml"
    if name_or_path and path.is_file():
        return path.resolve()
    hint = did_you_mean(name_or_path, _shipped_names())
    raise AutotuneError(f"unknown search space {name_or_path!r}{hint}; available: "
                        f"{', '.join(available_spaces())} (or a path to a .yaml file)")


# ------------------------------------------------------------------ loading

class _Loader:
    """Loads one space with its includes; hashes every file read, in include order."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.chain: list[Path] = []

    def load(self, path: Path) -> tuple[str, list[Entry]]:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise AutotuneError(f"cannot read search space {display_path(path)}: {exc.strerror}") from None
        self.digest.update(raw)
        doc = _Doc.parse(path)
        self.chain.append(path)
        try:
            return self._space(doc)
        finally:
            self.chain.pop()

    # -- one file

    def _space(self, doc: _Doc) -> tuple[str, list[Entry]]:
        data = doc.data
        if not isinstance(data, dict):
            raise doc.error((), "a search space is a mapping with description, include, "
                                "fixed and knobs")
        for key in data:
            if key not in _TOP_KEYS:
                raise doc.error((key,), f"unknown top-level key{_hint(key, _TOP_KEYS)}")
        description = data.get("description", "")
        if not isinstance(description, str):
            raise doc.error(("description",), "must be a string")

        fixed = self._fixed(doc)
        knobs = self._knobs(doc)
        local = {e.id: e for e in fixed}
        for entry, _ in knobs:
            if entry.id in local:
                raise doc.error(("knobs", entry.id), f"{entry.id!r} is also under fixed; "
                                                     "a key is either fixed or a knob")
            local[entry.id] = entry

        # Included entries: a later include replaces an earlier one's entry of the same id;
        # a local entry (fixed or knob) replaces any included one of its id.
        included: dict[str, Entry] = {}
        branches: list[tuple[tuple[Any, ...], Any, list[str]]] = []
        branch_names: set[str] = set()
        for at, name, entries, raw_when in self._includes(doc):
            if raw_when is not None:
                if name in branch_names:
                    raise doc.error(at, f"two conditional includes of a space named {name!r}: "
                                        "their params would share the prefix (name one "
                                        "with `as:`)")
                branch_names.add(name)
                entries = [e.prefixed(name + ".") for e in entries]
                branches.append((at + ("when",), raw_when, [e.id for e in entries]))
            for entry in entries:
                included.pop(entry.id, None)
                included[entry.id] = entry
        merged = dict(local)
        merged.update((i, e) for i, e in included.items() if i not in local)

        # Conditions are checked against the merged scope: a `when` may name any knob or
        # fixed key of this file or of what it includes.
        for entry, raw_when in knobs:
            if raw_when is not None:
                at = ("knobs", entry.id, "when")
                merged[entry.id] = dataclasses.replace(
                    entry, when=self._when(doc, at, raw_when, merged))
        for at, raw_when, ids in branches:
            conds = self._when(doc, at, raw_when, merged)
            for bid in ids:
                entry = merged.get(bid)
                if entry is None or bid in local:
                    continue
                merged[bid] = dataclasses.replace(
                    entry, when=conds + entry.when,
                    when_where=entry.when_where if entry.when else doc.where(at))
        return description, _order(doc, list(merged.values()))

    def _includes(self, doc: _Doc) -> Iterator[tuple[tuple[Any, ...], str, list[Entry], Any]]:
        """(where, branch name, entries, raw `when` or None) per include, in order."""
        items = doc.data.get("include", [])
        if not isinstance(items, list):
            raise doc.error(("include",), "must be a list of space names or paths")
        for i, item in enumerate(items):
            at: tuple[Any, ...] = ("include", i)
            raw_when = None
            alias = None
            if isinstance(item, str):
                target = item
            elif isinstance(item, dict):
                for key in item:
                    if key not in ("space", "when", "as"):
                        hint = _hint(key, ("space", "when", "as"))
                        raise doc.error(at + (key,), f"unknown key for an include{hint}")
                target = item.get("space")
                if not isinstance(target, str):
                    raise doc.error(at, "an include mapping needs `space:` (a name or a path)")
                if "when" in item:
                    raw_when = item["when"]
                    if not isinstance(raw_when, dict) or not raw_when:
                        raise doc.error(at + ("when",), "must be a mapping of knob -> value(s)")
                if "as" in item:
                    alias = item["as"]
                    if not isinstance(alias, str) or not alias.isidentifier():
                        raise doc.error(at + ("as",), f"{alias!r} is not a branch name "
                                                      "(letters, digits, _)")
                    if raw_when is None:
                        raise doc.error(at + ("as",), "names a conditional branch: give "
                                                      "`when:` too")
            else:
                raise doc.error(at, "an include is a space name, a path or {space:, when:}")
            try:
                path = _locate(target, doc.path.parent)
            except AutotuneError as exc:
                raise doc.error(at, str(exc)) from None
            if path in self.chain:
                loop = self.chain[self.chain.index(path):] + [path]
                raise doc.error(at, "include cycle: " + " -> ".join(p.name for p in loop))
            _, entries = self.load(path)
            yield at, alias or path.stem, entries, raw_when

    def _fixed(self, doc: _Doc) -> list[Entry]:
        fixed = doc.data.get("fixed", {})
        if not isinstance(fixed, dict):
            raise doc.error(("fixed",), "must be a mapping of config key -> value")
        out = []
        for key, value in fixed.items():
            at = ("fixed", key)
            _check_name(doc, at, key, "config key")
            try:
                canon = _canon(key, value)
            except AutotuneError as exc:
                raise doc.error(at, str(exc)) from None
            problem = (None if isinstance(canon, tuple) and key != "tree_choices"
                       else _config_error(key, canon))
            if problem:
                raise doc.error(at, problem)
            out.append(Entry(key, key, "fixed", Fixed(canon), (), doc.where(at), doc.where(at)))
        return out

    def _knobs(self, doc: _Doc) -> list[tuple[Entry, Any]]:
        knobs = doc.data.get("knobs", {})
        if not isinstance(knobs, dict):
            raise doc.error(("knobs",), "must be a mapping of knob name -> spec")
        return [_knob(doc, name, spec) for name, spec in knobs.items()]

    def _when(self, doc: _Doc, at: tuple[Any, ...], raw: Any,
              scope: Mapping[str, Entry]) -> tuple[Cond, ...]:
        if not isinstance(raw, dict):
            raise doc.error(at, "must be a mapping of knob -> value or list of values")
        conds = []
        for ref, allowed in raw.items():
            here = at + (ref,)
            target = scope.get(ref) if isinstance(ref, str) else None
            if target is None:
                raise doc.error(here, f"unknown knob {ref!r} in when{_hint(ref, scope)}")
            values = allowed if isinstance(allowed, list) else [allowed]
            if not values:
                raise doc.error(here, "needs at least one value")
            conds.append(Cond(ref, tuple(_possible(doc, here, target, v) for v in values)))
        return tuple(conds)


def _check_name(doc: _Doc, at: tuple[Any, ...], name: Any, noun: str = "knob") -> None:
    """A knob or fixed key must be a tunable DecodeConfig field."""
    if not isinstance(name, str):
        raise doc.error(at, f"{name!r} is not a {noun} name")
    if name in WORKLOAD_KEYS:
        raise doc.error(at, f"{name!r} belongs to the workload, not the space "
                            "(set it on the study)")
    if name not in _KNOB_TYPES:
        raise doc.error(at, f"unknown {noun} {name!r}{_hint(name, _KNOB_TYPES)}")


def _possible(doc: _Doc, at: tuple[Any, ...], target: Entry, value: Any) -> Any:
    """`value` in a DecodeConfig's canonical form, if `target` can ever take it; else error."""
    spec = target.spec
    if isinstance(spec, (LayerSet, BoundSet)) or target.type == "thresholds":
        raise doc.error(at, f"cannot condition on {_article(target.type)} knob; "
                            "use a categorical, bool, int or float knob")
    try:
        canon = _canon(target.key, value)
    except AutotuneError:
        canon = value
    if isinstance(spec, Fixed):
        ok, options = canon == spec.value, f"it is fixed to {spec.value!r}"
    elif isinstance(spec, Choices):
        ok = canon in spec.choices
        options = f"choices: {', '.join(str(c) for c in spec.choices)}"
        if not ok and isinstance(value, str):
            options += did_you_mean(value, spec.choices)
    else:
        assert isinstance(spec, Range)
        ok = is_number(canon) and spec.low <= canon <= spec.high
        if ok and spec.integer:
            ok = is_int(canon) and (canon - int(spec.low)) % int(spec.step or 1) == 0
        options = f"range {spec.low:g}..{spec.high:g}"
    if not ok:
        raise doc.error(at, f"{value!r} is never a value of {target.id!r} ({options})")
    return canon


def _knob(doc: _Doc, name: Any, spec: Any) -> tuple[Entry, Any]:
    """Parse one knob spec; its `when` is returned raw (resolved once includes are merged)."""
    at: tuple[Any, ...] = ("knobs", name)
    if isinstance(spec, dict) and spec.get("type") == SWITCH:
        return _switch(doc, at, name, spec)
    _check_name(doc, at, name)
    if not isinstance(spec, dict):
        raise doc.error(at, "a knob spec is a mapping with a `type:`")
    if "type" not in spec:
        raise doc.error(at, f"missing key 'type'; one of: {', '.join(_TYPE_KEYS)}")
    kind = spec["type"]
    if not isinstance(kind, str) or kind not in _TYPE_KEYS:
        raise doc.error(at + ("type",), f"unknown type {kind!r}{_hint(kind, _TYPE_KEYS)}")
    allowed = _KNOB_TYPES[name]
    if kind not in allowed:
        raise doc.error(at + ("type",), f"knob {name!r} cannot be {_article(kind)} knob; it takes "
                                        f"{' or '.join(allowed) or 'no knob type'}")
    keys = ("type", "when") + _TYPE_KEYS[kind]
    for key in spec:
        if key not in keys:
            raise doc.error(at + (key,), f"unknown key for {_article(kind)} knob{_hint(key, keys)}")
    for key in _REQUIRED_KEYS.get(kind, ()):
        if key not in spec:
            raise doc.error(at, f"missing key {key!r} for {_article(kind)} knob")
    parsed: Spec
    if kind in ("int", "float", "logfloat", "thresholds"):
        parsed = _range(doc, at, name, kind, spec)
    elif kind == "categorical":
        parsed = _choices(doc, at, name, spec["choices"])
    elif kind == "bool":
        parsed = Choices((False, True))
    else:
        parsed = _layer_set(doc, at, kind, spec)
    entry = Entry(name, name, "float" if kind == "logfloat" else kind, parsed, (),
                   doc.where(at), doc.where(at + ("when",)))
    return entry, spec.get("when")


def _switch(doc: _Doc, at: tuple[Any, ...], name: Any, spec: dict) -> tuple[Entry, Any]:
    """A `switch` knob: labels for `when:` conditions; it sets no config key."""
    if not isinstance(name, str) or not name.isidentifier():
        raise doc.error(at, f"{name!r} is not a valid switch name (letters, digits, _)")
    if name in _KNOB_TYPES or name in WORKLOAD_KEYS:
        raise doc.error(at + ("type",), f"a switch sets no config key, so it cannot be named "
                                        f"after the config key {name!r}; pick another name")
    keys = ("type", "when", "choices")
    for key in spec:
        if key not in keys:
            raise doc.error(at + (key,), f"unknown key for a switch knob{_hint(key, keys)}")
    choices = spec.get("choices")
    here = at + ("choices",)
    if not isinstance(choices, list) or not choices:
        raise doc.error(here if "choices" in spec else at,
                        "a switch needs `choices:`, a non-empty list of labels")
    for i, choice in enumerate(choices):
        if not isinstance(choice, str) or not choice:
            raise doc.error(here + (i,), f"{choice!r} is not a label (a non-empty string)")
        if choice in choices[:i]:
            raise doc.error(here + (i,), f"duplicate choice {choice!r}")
    entry = Entry(name, name, SWITCH, Choices(tuple(choices)), (), doc.where(at),
                   doc.where(at + ("when",)))
    return entry, spec.get("when")


def _range(doc: _Doc, at: tuple[Any, ...], name: str, kind: str, spec: dict) -> Range:
    integer = kind == "int"
    log = spec.get("log", kind == "logfloat")
    if not isinstance(log, bool):
        raise doc.error(at + ("log",), "must be true or false")
    bounds = {}
    for key in ("low", "high"):
        value = spec[key]
        if not (is_int(value) if integer else is_number(value)):
            noun = "an integer" if integer else "a number"
            raise doc.error(at + (key,), f"{value!r} is not {noun}")
        bounds[key] = value if integer else float(value)
    low, high = bounds["low"], bounds["high"]
    step = spec.get("step", 1 if integer else None)
    if step is not None and not ((is_int(step) and step >= 1) if integer
                                 else (is_number(step) and step > 0)):
        raise doc.error(at + ("step",), f"{step!r} is not a positive "
                                        f"{'integer' if integer else 'number'}")
    if low > high:
        raise doc.error(at + ("low",), f"low {low} is above high {high}")
    if log and low <= 0:
        raise doc.error(at + ("low",), f"a log-scale range needs low > 0, got {low}")
    if log and step is not None and (step != 1 or not integer):
        raise doc.error(at + ("step",), "a log-scale range cannot have a step (Optuna)")
    probe_key = "thresholds" if kind == "thresholds" else name
    for key in ("low", "high"):
        problem = _config_error(probe_key, bounds[key])
        if problem:
            raise doc.error(at + (key,), f"{key} {bounds[key]}: {problem}")
    grid = spec.get("grid")
    if grid is not None:
        if not isinstance(grid, list) or not grid:
            raise doc.error(at + ("grid",), "must be a non-empty list of values")
        for i, value in enumerate(grid):
            if not (is_int(value) if integer else is_number(value)) or not low <= value <= high:
                raise doc.error(at + ("grid", i), f"{value!r} is not "
                                f"{'an integer' if integer else 'a number'} in {low}..{high}")
        grid = tuple(grid if integer else (float(v) for v in grid))
    parsed = Range(low, high, step, log, integer, grid)
    try:
        parsed.distribution()                # Optuna's own checks, whatever we missed
    except ValueError as exc:
        raise doc.error(at, str(exc).splitlines()[0]) from None
    return parsed


def _choices(doc: _Doc, at: tuple[Any, ...], name: str, choices: Any) -> Choices:
    here = at + ("choices",)
    if not isinstance(choices, list) or not choices:
        raise doc.error(here, "must be a non-empty list")
    out: list[Any] = []
    for i, choice in enumerate(choices):
        if not isinstance(choice, (str, int, float, bool)):
            raise doc.error(here + (i,), f"{choice!r} is not a scalar")
        try:
            canon = _canon(name, choice)
        except AutotuneError as exc:
            raise doc.error(here + (i,), str(exc)) from None
        problem = _config_error(name, canon)
        if problem:
            raise doc.error(here + (i,), problem)
        if canon in out:
            raise doc.error(here + (i,), f"duplicate choice {choice!r}")
        out.append(canon)
    return Choices(tuple(out))


def _layer_set(doc: _Doc, at: tuple[Any, ...], kind: str, spec: dict) -> LayerSet:
    exits = kind == "exits"
    noun = "exit depths" if exits else "layers"

    def int_list(key: str) -> tuple[int, ...]:
        value = spec.get(key, [])
        if not isinstance(value, list) or not all(is_int(v) for v in value):
            raise doc.error(at + (key,), f"must be a list of integer {noun}")
        if exits and 0 in value:
            raise doc.error(at + (key,), "exit depths start at 1 (-1 = the stack's depth - 1)")
        return tuple(value)

    cand = spec.get("candidates", "all")
    listed, start, stop, step = None, None, None, 1
    if isinstance(cand, list):
        listed = int_list("candidates")
    elif isinstance(cand, dict):
        for key, value in cand.items():
            if key not in ("from", "to", "step"):
                raise doc.error(at + ("candidates", key),
                                f"unknown key for a range{_hint(key, ('from', 'to', 'step'))}")
            if not is_int(value) or (key == "step" and value < 1):
                raise doc.error(at + ("candidates", key), f"{value!r} is not a valid integer")
        start, stop, step = cand.get("from"), cand.get("to"), cand.get("step", 1)
    elif cand != "all":
        raise doc.error(at + ("candidates",), f"must be 'all', a list of {noun} or "
                                              "{from, to, step} (to exclusive)")
    never = () if exits else int_list("never_skip")
    low_key, high_key = ("min_exits", "max_exits") if exits else ("min_skipped", "max_skipped")
    least = spec.get(low_key, 1 if exits else 0)
    if not is_int(least) or least < (1 if exits else 0):
        raise doc.error(at + (low_key,), f"{least!r} is not an integer >= {1 if exits else 0}")
    most = spec.get(high_key)
    fraction = not exits and isinstance(most, float) and 0.0 < most < 1.0
    if most is not None and not fraction and not (is_int(most) and most >= 0):
        raise doc.error(at + (high_key,), f"{most!r} is not an integer >= 0"
                        + ("" if exits else " or a fraction of the layers in (0, 1)"))
    if is_int(most) and least > most:
        raise doc.error(at + (high_key,), f"{high_key} {most} is below {low_key} {least}")
    return LayerSet(kind, listed, start, stop, step, never, least, most)


def _order(doc: _Doc, entries: list[Entry]) -> list[Entry]:
    """Entries in dependency order (a knob after every knob its `when` reads, thresholds
    after exits), otherwise in file order; a cycle is an error."""
    ids = {e.id for e in entries}
    exits_ids = {e.id for e in entries if e.key == "exits"}
    deps = {e.id: ({c.ref for c in e.when} | (exits_ids if e.type == "thresholds" else set())) & ids
            for e in entries}
    out: list[Entry] = []
    placed: set[str] = set()
    left = list(entries)
    while left:
        for i, entry in enumerate(left):
            if deps[entry.id] <= placed:
                out.append(left.pop(i))
                placed.add(entry.id)
                break
        else:
            # Every entry left waits on another one left: follow the waits to a loop.
            by_id = {e.id: e for e in left}
            walk = [left[0].id]
            while True:
                nxt = next(e.id for e in left if e.id in deps[walk[-1]])
                if nxt in walk:
                    loop = walk[walk.index(nxt):] + [nxt]
                    break
                walk.append(nxt)
            here = [by_id[i] for i in loop if by_id[i].when_where.path == doc.label]
            culprit = (here or [by_id[loop[0]]])[0]
            raise culprit.when_where.error("condition cycle: " + " -> ".join(loop))
    return out


def load_space(name_or_path: str) -> SearchSpace:
    """Load a shipped space by name ("layer_skip", fragments "_policy" too) or a .yaml path."""
    path = _locate(name_or_path, None)
    loader = _Loader()
    description, entries = loader.load(path)
    return SearchSpace(path.stem, str(path), loader.digest.hexdigest(), description,
                       tuple(entries))
