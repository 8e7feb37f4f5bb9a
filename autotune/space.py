"""Search spaces: YAML data -> typed knobs -> Optuna params -> DecodeConfig.

A space file (`search_spaces/*.yaml`, shipped as package data of `autotune.search_spaces`)
names the knobs to tune, their ranges and when each one applies. `load_space` parses and
checks it: every mistake is one AutotuneError line with `file:line: key: problem`.
`SearchSpace.bind` resolves layer candidates against a model's depth, and the resulting
`BoundSpace` turns an Optuna trial into a DecodeConfig (`suggest`, define-by-run), a params
dict back into one (`params_to_config`), a known config into params to enqueue (`encode`),
and lists its grid (for `GridSampler`) and its params (for display).

Layer sets are one 0/1 integer param per candidate layer (`attn_skip[12]`), as Draft &
Verify's Bayesian search encodes them, so every sampler (TPE, GP, CMA-ES, bayes_opt)
treats them as ordinary dimensions. A point the space or DecodeConfig rejects (too many
skipped layers, ngram_min > ngram_max, ...) raises InfeasibleConfig.

File format (top-level keys `description`, `include`, `fixed`, `knobs`):

    include: [_policy, {space: ngram, when: {method: ngram}}]
    fixed: {method: layer_skip}
    knobs:
      k: {type: int, low: 1, high: 12}
      attn_skip: {type: layers, never_skip: [0], max_skipped: 0.6}
      gamma: {type: float, low: 0.05, high: 0.95, when: {exit_policy: [confidence, adaptive]}}

An include with `when:` makes the included space a conditional branch whose params are
namespaced `<space>.<knob>` (several branches share knob names with different ranges);
`as: NAME` names the branch instead of the file's name (one file included twice, or a
fragment `_x` that should not show as `_x.` in param names).

A `switch` knob chooses between branches without setting any config key: its name is
not a DecodeConfig field, its `choices:` are labels that `when:` conditions test, e.g.

    draft_shape: {type: switch, choices: [chain, tree], when: {method: layer_skip}}

`encode` finds a switch's value by trying its choices in order and keeping the first
one under which the whole config is expressible (so list the plainer branch first).

Draft trees: a dynamic tree (tree_width >= 1) whose tree_tokens keeps every drafted
node (tree_tokens >= the pool size, tree_width + (tree_depth-1)*tree_width^2) is the
same tree as tree_tokens=0, and one with 0 < tree_tokens < tree_depth drafts levels the
rerank can never keep (a node's value is at most its parent's, so the kept nodes form a
tree of depth <= tree_tokens: EAGLE-2, Li et al. 2024). Both raise InfeasibleConfig
rather than spend a trial measuring a duplicate or a dominated point.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import FloatDistribution, IntDistribution

from autotune.decoding.config import DecodeConfig, config_from_mapping
from autotune.errors import AutotuneError
from autotune.yaml_source import did_you_mean, display_path, dotted, load_yaml

__all__ = ["BoundSpace", "InfeasibleConfig", "SearchSpace", "available_spaces", "load_space",
           "wasted_tree"]


class InfeasibleConfig(AutotuneError):
    """A sampled point the space or the decoder rejects; the message says why."""


_MAX_GRID_POINTS = 100_000
_TOP_KEYS = ("description", "include", "fixed", "knobs")
# Sampling settings describe the workload a config is tuned for, so a space cannot vary them.
_WORKLOAD_KEYS = frozenset({"temperature", "top_p"})
_DEFAULT = DecodeConfig()
_TREE_SHAPE = ("tree_width", "tree_depth", "tree_tokens")
_SET_KINDS = ("layers", "exits")
_SWITCH = "switch"


def _knob_types() -> dict[str, tuple[str, ...]]:
    """Knob types each DecodeConfig field accepts, read off the field annotations so that a
    new scalar field is tunable without touching this module."""
    by_annotation = {"int": ("int", "categorical"), "float": ("float", "logfloat", "categorical"),
                     "str": ("categorical",), "bool": ("bool", "categorical")}
    sets = {"attn_skip": ("layers",), "mlp_skip": ("layers",), "exits": ("exits",),
            "thresholds": ("thresholds",)}
    return {f.name: sets.get(f.name, by_annotation.get(str(f.type), ()))
            for f in dataclasses.fields(DecodeConfig) if f.name not in _WORKLOAD_KEYS}


_KNOB_TYPES = _knob_types()
_TYPE_KEYS: dict[str, tuple[str, ...]] = {
    "int": ("low", "high", "step", "log", "grid"),
    "float": ("low", "high", "step", "log", "grid"),
    "logfloat": ("low", "high", "grid"),          # log is implied; Optuna forbids log + step
    "categorical": ("choices",),
    "bool": (),
    _SWITCH: ("choices",),
    "layers": ("candidates", "never_skip", "min_skipped", "max_skipped"),
    "exits": ("candidates", "min_exits", "max_exits"),
    "thresholds": ("low", "high", "step", "log", "grid"),
}
_REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "int": ("low", "high"), "float": ("low", "high"), "logfloat": ("low", "high"),
    "categorical": ("choices",), _SWITCH: ("choices",), "thresholds": ("low", "high")}


# ------------------------------------------------------------------ small helpers

def _hint(word: object, options: Any) -> str:
    """did_you_mean, or else the list of what is allowed."""
    names = [str(o) for o in options]
    return did_you_mean(str(word), names) or (f"; expected one of: {', '.join(names)}" if names else "")


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
    elif key in _TREE_SHAPE and _is_int(value) and value > 0:
        # A tree needs a tree method and both width and depth; tokens 1 keeps any
        # width inside MAX_TREE_NODES, so each key is checked on its own.
        probe = {"method": "draft_model", "tree_width": 1, "tree_depth": 1, "tree_tokens": 1,
                 key: value}
    elif key == "tree_choices" and value:
        probe = {"method": "draft_model", "tree_choices": value}
    elif key == "thresholds":
        probe = {"method": "sorted_exit", "exits": [1], "thresholds": [value]}
    elif key == "method" and value == "sorted_exit":
        probe["exits"] = [1]
    try:
        config_from_mapping(probe).validate()
    except AutotuneError as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------ parsed pieces

@dataclass(frozen=True)
class _Where:
    """A place in a space file, for one-line errors."""

    path: str            # as shown to the user
    line: int
    what: str            # dotted key, e.g. knobs.k.low

    def error(self, message: str) -> AutotuneError:
        what = f" {self.what}:" if self.what else ""
        return AutotuneError(f"{self.path}:{self.line}:{what} {message}")


@dataclass(frozen=True)
class _Fixed:
    value: Any                               # canonical DecodeConfig value


@dataclass(frozen=True)
class _Range:
    """int / float / thresholds knob: an Optuna numeric distribution (one per threshold)."""

    low: float
    high: float
    step: float | None
    log: bool
    integer: bool
    grid: tuple[float, ...] | None

    def distribution(self) -> IntDistribution | FloatDistribution:
        if self.integer:
            return IntDistribution(int(self.low), int(self.high), log=self.log,
                                   step=int(self.step or 1))
        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def suggest(self, trial: optuna.trial.BaseTrial, name: str) -> int | float:
        if self.integer:
            return trial.suggest_int(name, int(self.low), int(self.high),
                                     step=int(self.step or 1), log=self.log)
        return trial.suggest_float(name, self.low, self.high, step=self.step, log=self.log)

    def grid_values(self) -> list[Any] | None:
        if self.grid is not None:
            return list(self.grid)
        if self.integer:
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        return None


@dataclass(frozen=True)
class _Choices:
    """categorical or bool knob."""

    choices: tuple[Any, ...]


@dataclass(frozen=True)
class _LayerSet:
    """layers / exits knob before binding: candidates are resolved against a depth later."""

    kind: str                                # "layers" or "exits"
    listed: tuple[int, ...] | None           # explicit candidates; None means a range
    start: int | None                        # range bounds (None: the stack's first / last)
    stop: int | None                         # exclusive
    step: int
    never: tuple[int, ...]                   # never_skip (layers only)
    min_count: int
    max_count: int | float | None            # None: no limit; float: fraction of the depth

    def resolve(self, depth: int, where: _Where) -> _BoundSet:
        # Layers are 0..depth-1; exit depths are 1..depth. Negatives count from the end
        # in both (-1 = the last layer, or depth-1 layers run).
        exits = self.kind == "exits"
        lo, hi = (1, depth) if exits else (0, depth - 1)
        noun = "exit depth" if exits else "layer"

        def index(x: int) -> int:
            value = x + depth if x < 0 else x
            if not lo <= value <= hi:
                raise where.error(f"{noun} {x} is outside {lo}..{hi} of this {depth}-layer stack")
            return value

        def bound(x: int | None, default: int) -> int:      # range ends: clipped, not checked
            return default if x is None else (x + depth if x < 0 else x)

        if self.listed is not None:
            values = {index(x) for x in self.listed}
        else:
            start, stop = bound(self.start, lo), bound(self.stop, hi + 1)
            values = {v for v in range(start, stop, self.step) if lo <= v <= hi}
        candidates = tuple(sorted(values - {index(x) for x in self.never}))
        if self.max_count is None:
            most = len(candidates)
        elif isinstance(self.max_count, float):
            most = math.floor(self.max_count * depth)
        else:
            most = self.max_count
        low_key, high_key = ("min_exits", "max_exits") if exits else ("min_skipped", "max_skipped")
        if self.min_count > len(candidates):
            raise where.error(f"{low_key} {self.min_count} is more than the {len(candidates)} "
                              f"candidate {noun}s of this {depth}-layer stack")
        if self.min_count > most:
            raise where.error(f"{high_key} {self.max_count} allows {most} on this {depth}-layer "
                              f"stack, fewer than {low_key} {self.min_count}")
        return _BoundSet(self.kind, candidates, self.min_count, min(most, len(candidates)))


@dataclass(frozen=True)
class _BoundSet:
    """layers / exits knob after binding: one 0/1 param per candidate."""

    kind: str
    candidates: tuple[int, ...]
    min_count: int
    max_count: int


_Spec = _Fixed | _Range | _Choices | _LayerSet | _BoundSet


@dataclass(frozen=True)
class _Cond:
    """Holds when entry `ref` is active and took one of `values`."""

    ref: str
    values: tuple[Any, ...]

    def describe(self) -> str:
        if len(self.values) == 1:
            return f"{self.ref} == {self.values[0]}"
        return f"{self.ref} in [{', '.join(str(v) for v in self.values)}]"


@dataclass(frozen=True)
class _Entry:
    """One fixed value or one knob of a loaded space."""

    id: str                  # scoped name, `<branch>.` prefixed; base of its Optuna param names
    key: str                 # the DecodeConfig field it sets
    type: str                # "fixed", "int", "float", "categorical", "bool", "layers", ...
    spec: _Spec
    when: tuple[_Cond, ...]
    where: _Where            # the knob's (or fixed key's) line
    when_where: _Where       # its `when:` line (the include's, for a branch condition)

    def prefixed(self, prefix: str) -> _Entry:
        when = tuple(_Cond(prefix + c.ref, c.values) for c in self.when)
        return dataclasses.replace(self, id=prefix + self.id, when=when)


def _active(entry: _Entry, decided: Mapping[str, Any]) -> bool:
    """All conditions hold on the values decided so far (an undecided ref is inactive)."""
    return all(c.ref in decided and decided[c.ref] in c.values for c in entry.when)


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

    def where(self, at: tuple[Any, ...]) -> _Where:
        probe = tuple(str(p) if not isinstance(p, int) else p for p in at)
        while probe and probe not in self.lines:
            probe = probe[:-1]
        return _Where(self.label, self.lines.get(probe, 1), dotted(at))

    def error(self, at: tuple[Any, ...], message: str) -> AutotuneError:
        return self.where(at).error(message)


# ------------------------------------------------------------------ locating files

def _shipped_dir() -> Path:
    # setuptools installs package data as plain files (never zipped), so a Path is safe
    # and relative includes can be resolved against it like against any other folder.
    return Path(str(files("autotune.search_spaces")))


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

    def load(self, path: Path) -> tuple[str, list[_Entry]]:
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

    def _space(self, doc: _Doc) -> tuple[str, list[_Entry]]:
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
        included: dict[str, _Entry] = {}
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

    def _includes(self, doc: _Doc) -> Iterator[tuple[tuple[Any, ...], str, list[_Entry], Any]]:
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

    def _fixed(self, doc: _Doc) -> list[_Entry]:
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
            out.append(_Entry(key, key, "fixed", _Fixed(canon), (), doc.where(at), doc.where(at)))
        return out

    def _knobs(self, doc: _Doc) -> list[tuple[_Entry, Any]]:
        knobs = doc.data.get("knobs", {})
        if not isinstance(knobs, dict):
            raise doc.error(("knobs",), "must be a mapping of knob name -> spec")
        return [_knob(doc, name, spec) for name, spec in knobs.items()]

    def _when(self, doc: _Doc, at: tuple[Any, ...], raw: Any,
              scope: Mapping[str, _Entry]) -> tuple[_Cond, ...]:
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
            conds.append(_Cond(ref, tuple(_possible(doc, here, target, v) for v in values)))
        return tuple(conds)


def _check_name(doc: _Doc, at: tuple[Any, ...], name: Any, noun: str = "knob") -> None:
    """A knob or fixed key must be a tunable DecodeConfig field."""
    if not isinstance(name, str):
        raise doc.error(at, f"{name!r} is not a {noun} name")
    if name in _WORKLOAD_KEYS:
        raise doc.error(at, f"{name!r} belongs to the workload, not the space "
                            "(set it on the study)")
    if name not in _KNOB_TYPES:
        raise doc.error(at, f"unknown {noun} {name!r}{_hint(name, _KNOB_TYPES)}")


def _possible(doc: _Doc, at: tuple[Any, ...], target: _Entry, value: Any) -> Any:
    """`value` in a DecodeConfig's canonical form, if `target` can ever take it; else error."""
    spec = target.spec
    if isinstance(spec, (_LayerSet, _BoundSet)) or target.type == "thresholds":
        raise doc.error(at, f"cannot condition on {_article(target.type)} knob; "
                            "use a categorical, bool, int or float knob")
    try:
        canon = _canon(target.key, value)
    except AutotuneError:
        canon = value
    if isinstance(spec, _Fixed):
        ok, options = canon == spec.value, f"it is fixed to {spec.value!r}"
    elif isinstance(spec, _Choices):
        ok = canon in spec.choices
        options = f"choices: {', '.join(str(c) for c in spec.choices)}"
        if not ok and isinstance(value, str):
            options += did_you_mean(value, spec.choices)
    else:
        assert isinstance(spec, _Range)
        ok = _is_number(canon) and spec.low <= canon <= spec.high
        if ok and spec.integer:
            ok = _is_int(canon) and (canon - int(spec.low)) % int(spec.step or 1) == 0
        options = f"range {spec.low:g}..{spec.high:g}"
    if not ok:
        raise doc.error(at, f"{value!r} is never a value of {target.id!r} ({options})")
    return canon


def _knob(doc: _Doc, name: Any, spec: Any) -> tuple[_Entry, Any]:
    """Parse one knob spec; its `when` is returned raw (resolved once includes are merged)."""
    at: tuple[Any, ...] = ("knobs", name)
    if isinstance(spec, dict) and spec.get("type") == _SWITCH:
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
    parsed: _Spec
    if kind in ("int", "float", "logfloat", "thresholds"):
        parsed = _range(doc, at, name, kind, spec)
    elif kind == "categorical":
        parsed = _choices(doc, at, name, spec["choices"])
    elif kind == "bool":
        parsed = _Choices((False, True))
    else:
        parsed = _layer_set(doc, at, kind, spec)
    entry = _Entry(name, name, "float" if kind == "logfloat" else kind, parsed, (),
                   doc.where(at), doc.where(at + ("when",)))
    return entry, spec.get("when")


def _switch(doc: _Doc, at: tuple[Any, ...], name: Any, spec: dict) -> tuple[_Entry, Any]:
    """A `switch` knob: labels for `when:` conditions; it sets no config key."""
    if not isinstance(name, str) or not name.isidentifier():
        raise doc.error(at, f"{name!r} is not a valid switch name (letters, digits, _)")
    if name in _KNOB_TYPES or name in _WORKLOAD_KEYS:
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
    entry = _Entry(name, name, _SWITCH, _Choices(tuple(choices)), (), doc.where(at),
                   doc.where(at + ("when",)))
    return entry, spec.get("when")


def _range(doc: _Doc, at: tuple[Any, ...], name: str, kind: str, spec: dict) -> _Range:
    integer = kind == "int"
    log = spec.get("log", kind == "logfloat")
    if not isinstance(log, bool):
        raise doc.error(at + ("log",), "must be true or false")
    bounds = {}
    for key in ("low", "high"):
        value = spec[key]
        if not (_is_int(value) if integer else _is_number(value)):
            noun = "an integer" if integer else "a number"
            raise doc.error(at + (key,), f"{value!r} is not {noun}")
        bounds[key] = value if integer else float(value)
    low, high = bounds["low"], bounds["high"]
    step = spec.get("step", 1 if integer else None)
    if step is not None and not ((_is_int(step) and step >= 1) if integer
                                 else (_is_number(step) and step > 0)):
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
            if not (_is_int(value) if integer else _is_number(value)) or not low <= value <= high:
                raise doc.error(at + ("grid", i), f"{value!r} is not "
                                f"{'an integer' if integer else 'a number'} in {low}..{high}")
        grid = tuple(grid if integer else (float(v) for v in grid))
    parsed = _Range(low, high, step, log, integer, grid)
    try:
        parsed.distribution()                # Optuna's own checks, whatever we missed
    except ValueError as exc:
        raise doc.error(at, str(exc).splitlines()[0]) from None
    return parsed


def _choices(doc: _Doc, at: tuple[Any, ...], name: str, choices: Any) -> _Choices:
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
    return _Choices(tuple(out))


def _layer_set(doc: _Doc, at: tuple[Any, ...], kind: str, spec: dict) -> _LayerSet:
    exits = kind == "exits"
    noun = "exit depths" if exits else "layers"

    def int_list(key: str) -> tuple[int, ...]:
        value = spec.get(key, [])
        if not isinstance(value, list) or not all(_is_int(v) for v in value):
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
            if not _is_int(value) or (key == "step" and value < 1):
                raise doc.error(at + ("candidates", key), f"{value!r} is not a valid integer")
        start, stop, step = cand.get("from"), cand.get("to"), cand.get("step", 1)
    elif cand != "all":
        raise doc.error(at + ("candidates",), f"must be 'all', a list of {noun} or "
                                              "{from, to, step} (to exclusive)")
    never = () if exits else int_list("never_skip")
    low_key, high_key = ("min_exits", "max_exits") if exits else ("min_skipped", "max_skipped")
    least = spec.get(low_key, 1 if exits else 0)
    if not _is_int(least) or least < (1 if exits else 0):
        raise doc.error(at + (low_key,), f"{least!r} is not an integer >= {1 if exits else 0}")
    most = spec.get(high_key)
    fraction = not exits and isinstance(most, float) and 0.0 < most < 1.0
    if most is not None and not fraction and not (_is_int(most) and most >= 0):
        raise doc.error(at + (high_key,), f"{most!r} is not an integer >= 0"
                        + ("" if exits else " or a fraction of the layers in (0, 1)"))
    if _is_int(most) and least > most:
        raise doc.error(at + (high_key,), f"{high_key} {most} is below {low_key} {least}")
    return _LayerSet(kind, listed, start, stop, step, never, least, most)


def _order(doc: _Doc, entries: list[_Entry]) -> list[_Entry]:
    """Entries in dependency order (a knob after every knob its `when` reads, thresholds
    after exits), otherwise in file order; a cycle is an error."""
    ids = {e.id for e in entries}
    exits_ids = {e.id for e in entries if e.key == "exits"}
    deps = {e.id: ({c.ref for c in e.when} | (exits_ids if e.type == "thresholds" else set())) & ids
            for e in entries}
    out: list[_Entry] = []
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


# ------------------------------------------------------------------ public types

@dataclass(frozen=True)
class SearchSpace:
    """A loaded, checked space; `bind` it to a model's depth to sample from it."""

    name: str
    path: str
    sha256: str              # over the file's bytes and every included file's, in include order
    description: str
    _entries: tuple[_Entry, ...] = field(default=(), repr=False)

    def bind(self, n_layers: int, draft_layers: int | None = None) -> BoundSpace:
        """Resolve layer candidates for a target of `n_layers` decoder layers and an
        optional draft model of `draft_layers`; `exits` run over the draft when given
        (S2D over a separate draft), else over the target."""
        if not _is_int(n_layers) or n_layers < 1:
            raise AutotuneError(f"n_layers={n_layers!r} must be a positive integer")
        if draft_layers is not None and (not _is_int(draft_layers) or draft_layers < 1):
            raise AutotuneError(f"draft_layers={draft_layers!r} must be a positive integer")
        needs_draft = AutotuneError(f"space {self.name!r} needs a draft model: pass --draft")
        exit_depth = n_layers if draft_layers is None else draft_layers
        bound = []
        for entry in self._entries:
            spec = entry.spec
            if isinstance(spec, _LayerSet):
                depth = exit_depth if spec.kind == "exits" else n_layers
                entry = dataclasses.replace(entry, spec=spec.resolve(depth, entry.where))
            elif entry.key == "method" and draft_layers is None:
                if isinstance(spec, _Fixed) and spec.value == "draft_model" and not entry.when:
                    raise needs_draft
                if isinstance(spec, _Choices):
                    left = tuple(c for c in spec.choices if c != "draft_model")
                    if not left:
                        raise needs_draft
                    entry = dataclasses.replace(entry, spec=_Choices(left))
            bound.append(entry)
        return BoundSpace(self, n_layers, draft_layers, tuple(_reachable(bound)))


def _reachable(entries: list[_Entry]) -> list[_Entry]:
    """Drop entries whose conditions can no longer hold (the draft_model branch once its
    choice is gone), so that knobs(), grid() and encode() only show what can be sampled."""
    kept: dict[str, _Entry] = {}
    for entry in entries:                         # dependency order: refs come first
        if all(c.ref in kept and _can_take(kept[c.ref].spec, c.values) for c in entry.when):
            kept[entry.id] = entry
    return list(kept.values())


def _can_take(spec: _Spec, values: tuple[Any, ...]) -> bool:
    if isinstance(spec, _Fixed):
        return spec.value in values
    if isinstance(spec, _Choices):
        return any(v in spec.choices for v in values)
    return True                                   # ranges: checked when the file was loaded


@dataclass(frozen=True)
class BoundSpace:
    """A space bound to a model's depth: trials in, DecodeConfigs out."""

    space: SearchSpace
    n_layers: int
    draft_layers: int | None = None
    _entries: tuple[_Entry, ...] = field(default=(), repr=False)

    # -- trials -> configs

    def suggest(self, trial: optuna.trial.BaseTrial) -> DecodeConfig:
        """Suggest every active knob (define-by-run) and build a validated DecodeConfig.

        Raises InfeasibleConfig for a point the space or DecodeConfig rejects; all active
        params are suggested first, so the trial records the whole point either way.
        """
        values: dict[str, Any] = {}
        setter: dict[str, str] = {}
        decided: dict[str, Any] = {}
        problems: list[str] = []
        for entry in self._entries:
            if not _active(entry, decided):
                continue
            value = self._draw(entry, trial, values, problems)
            if entry.type == _SWITCH:
                decided[entry.id] = value            # a branch label, not a config value
                continue
            if entry.key in values and values[entry.key] != value:
                problems.append(f"{entry.key} is {values[entry.key]!r} by "
                                f"{setter[entry.key]} and {value!r} by {entry.id}")
            decided[entry.id] = values[entry.key] = value
            setter[entry.key] = entry.id
        if problems:
            raise InfeasibleConfig(problems[0])
        try:
            config = config_from_mapping(values)
            over_draft = config.method == "sorted_exit" and self.draft_layers is not None
            config.validate(self.draft_layers if over_draft else self.n_layers)
        except AutotuneError as exc:
            raise InfeasibleConfig(str(exc)) from None
        waste = wasted_tree(config)
        if waste:
            raise InfeasibleConfig(waste)
        return config

    def _draw(self, entry: _Entry, trial: optuna.trial.BaseTrial, values: Mapping[str, Any],
              problems: list[str]) -> Any:
        spec = entry.spec
        if isinstance(spec, _Fixed):
            return spec.value
        if isinstance(spec, _Choices):
            return trial.suggest_categorical(entry.id, spec.choices)
        if isinstance(spec, _BoundSet):
            chosen = tuple(c for c in spec.candidates
                           if trial.suggest_int(f"{entry.id}[{c}]", 0, 1))
            if not spec.min_count <= len(chosen) <= spec.max_count:
                noun = "exits" if spec.kind == "exits" else "skipped layers"
                problems.append(f"{entry.id} has {len(chosen)} {noun}; the space allows "
                                f"{spec.min_count}..{spec.max_count}")
            return chosen
        assert isinstance(spec, _Range)
        if entry.type == "thresholds":
            # One per exit but the deepest, which always emits (stored as 0.0).
            exits = tuple(sorted(values.get("exits", ())))
            drawn = tuple(float(spec.suggest(trial, f"{entry.id}[{d}]")) for d in exits[:-1])
            return drawn + (0.0,) if exits else ()
        return spec.suggest(trial, entry.id)

    def params_to_config(self, params: Mapping[str, Any]) -> DecodeConfig:
        """The config a finished trial's params stand for (same rules as `suggest`)."""
        try:
            return self.suggest(optuna.trial.FixedTrial(dict(params)))
        except ValueError as exc:            # FixedTrial: a param missing or not a choice
            raise AutotuneError(f"params do not fit space {self.space.name!r}: "
                                f"{str(exc).splitlines()[0]}") from None

    # -- configs -> params

    def encode(self, values: Mapping[str, Any]) -> dict[str, Any] | None:
        """Optuna params that reproduce a (partial) canonical config, for `enqueue_trial`.

        Keys left out take DecodeConfig's defaults (the space's fixed values where it has
        them). Numbers outside a knob's range are kept: an enqueued default is tried as
        given. Returns None when the space cannot express the values: a choice it does not
        offer, a layer that is not a candidate, a value against a fixed one, or a key the
        space neither tunes nor fixes set away from its default. A switch takes the first
        of its choices under which the rest is expressible. Workload keys
        (temperature, top_p) are ignored. Keys that are not DecodeConfig fields, or values
        of the wrong type, raise AutotuneError (a caller's mistake, not a config to skip).
        """
        given = config_from_mapping(values)
        explicit = frozenset(k for k in values if k not in _WORKLOAD_KEYS)
        return self._encode_from(0, given, explicit, {}, {}, {})

    def _encode_from(self, first: int, given: DecodeConfig, explicit: frozenset[str],
                     params: dict[str, Any], decided: dict[str, Any],
                     current: dict[str, Any]) -> dict[str, Any] | None:
        """encode() from entry `first` on; a switch tries each choice on copies of the
        state so far and keeps the first under which the rest is expressible."""
        for index in range(first, len(self._entries)):
            entry = self._entries[index]
            if not _active(entry, decided):
                continue
            spec = entry.spec
            if entry.type == _SWITCH:
                assert isinstance(spec, _Choices)
                for choice in spec.choices:
                    found = self._encode_from(index + 1, given, explicit,
                                              {**params, entry.id: choice},
                                              {**decided, entry.id: choice}, dict(current))
                    if found is not None:
                        return found
                return None
            if isinstance(spec, _Fixed):
                if entry.key in explicit and getattr(given, entry.key) != spec.value:
                    return None
                value = spec.value
            else:
                value = getattr(given, entry.key)
                encoded = self._encode_one(entry, value, given, current)
                if encoded is None:
                    return None
                params.update(encoded)
            decided[entry.id] = current[entry.key] = value
        if any(getattr(given, k) != getattr(_DEFAULT, k) for k in explicit - set(current)):
            return None
        return params

    @staticmethod
    def _encode_one(entry: _Entry, value: Any, given: DecodeConfig,
                    current: Mapping[str, Any]) -> dict[str, Any] | None:
        spec = entry.spec
        if isinstance(spec, _Choices):
            return {entry.id: value} if value in spec.choices else None
        if isinstance(spec, _BoundSet):
            if not set(value) <= set(spec.candidates):
                return None
            return {f"{entry.id}[{c}]": int(c in value) for c in spec.candidates}
        assert isinstance(spec, _Range)
        if entry.type == "thresholds":
            exits = tuple(sorted(current.get("exits", given.exits)))
            padded = dataclasses.replace(given, exits=exits).exit_thresholds()
            # zip stops before the deepest exit, whose threshold is never read
            return {f"{entry.id}[{d}]": t for d, t in zip(exits[:-1], padded)}
        return {entry.id: value}

    # -- listings

    def grid(self) -> dict[str, list[Any]]:
        """Values per param for optuna.samplers.GridSampler (every branch's params)."""
        grid: dict[str, list[Any]] = {}
        for entry, param, _ in self._params():
            spec = entry.spec
            if isinstance(spec, _Choices):
                grid[param] = list(spec.choices)
            elif isinstance(spec, _BoundSet):
                grid[param] = [0, 1]
            else:
                assert isinstance(spec, _Range)
                points = spec.grid_values()
                if points is None:
                    kind = "thresholds" if entry.type == "thresholds" else "float"
                    raise entry.where.error(f"{kind} knob {entry.id!r} needs a `grid:` list for "
                                            "the grid sampler")
                grid[param] = points
        count = math.prod(len(v) for v in grid.values())
        if count > _MAX_GRID_POINTS:
            raise AutotuneError(
                f"space {self.space.name!r} has {count:,} grid points on {self.n_layers} layers, "
                f"more than the grid sampler's {_MAX_GRID_POINTS:,}; narrow it (fewer "
                "candidates, shorter grid: lists) or use another sampler")
        return grid

    def knobs(self) -> list[dict[str, Any]]:
        """One row per Optuna param (param, key, type, low, high, step, log, choices, when)."""
        rows = []
        for entry, param, extra in self._params():
            spec = entry.spec
            row: dict[str, Any] = {"param": param, "key": entry.key, "type": entry.type,
                                   "low": None, "high": None, "step": None, "log": False,
                                   "choices": None}
            if isinstance(spec, _Choices):
                row["choices"] = list(spec.choices)
            elif isinstance(spec, _BoundSet):
                row.update(low=0, high=1, step=1)
            else:
                assert isinstance(spec, _Range)
                row.update(low=spec.low, high=spec.high, step=spec.step, log=spec.log)
            row["when"] = " and ".join([c.describe() for c in entry.when] + extra)
            rows.append(row)
        return rows

    def _params(self) -> Iterator[tuple[_Entry, str, list[str]]]:
        """(entry, Optuna param name, extra conditions for display) for every knob param."""
        by_id = {e.id: e for e in self._entries}
        for entry in self._entries:
            spec = entry.spec
            if isinstance(spec, _Fixed):
                continue
            if isinstance(spec, _BoundSet):
                for c in spec.candidates:
                    yield entry, f"{entry.id}[{c}]", []
            elif entry.type == "thresholds":
                # Thresholds pair with the exits of their own scope (same id prefix).
                exits = by_id.get(entry.id[: -len(entry.key)] + "exits")
                for d, extra in _threshold_depths(exits):
                    yield entry, f"{entry.id}[{d}]", [extra]
            else:
                yield entry, entry.id, []


def _threshold_depths(exits: _Entry | None) -> Iterator[tuple[int, str]]:
    """Depths that can carry a threshold (any exit but the deepest possible one)."""
    if exits is None:
        return
    if isinstance(exits.spec, _BoundSet):
        for d in exits.spec.candidates[:-1]:
            yield d, f"{exits.id}[{d}] == 1 and not the deepest exit"
    elif isinstance(exits.spec, _Fixed):
        for d in sorted(exits.spec.value)[:-1]:
            yield d, f"exit {d} (fixed)"


def wasted_tree(config: DecodeConfig) -> str | None:
    """Why a valid dynamic tree would waste a trial (see the module docstring), or None."""
    width, depth, tokens = config.tree_width, config.tree_depth, config.tree_tokens
    if config.tree_choices or not width or not tokens:
        return None
    pool = config.tree_pool_size()
    if tokens >= pool:
        return (f"tree_tokens={tokens} keeps all {pool} nodes a width-{width} depth-{depth} "
                "tree drafts: the same tree as tree_tokens=0")
    if tokens < depth:
        return (f"tree_tokens={tokens} < tree_depth={depth}: the rerank keeps no node below "
                f"level {tokens}, so levels {tokens + 1}..{depth} are drafted for nothing")
    return None


def load_space(name_or_path: str) -> SearchSpace:
    """Load a shipped space by name ("layer_skip", fragments "_policy" too) or a .yaml path."""
    path = _locate(name_or_path, None)
    loader = _Loader()
    description, entries = loader.load(path)
    return SearchSpace(path.stem, str(path), loader.digest.hexdigest(), description,
                       tuple(entries))

