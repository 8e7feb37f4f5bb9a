"""Binding a space: a loaded SearchSpace + a model's depth -> BoundSpace.

`SearchSpace.bind` resolves layer candidates against the stacks they index and drops
what cannot run (a draft model's branch without `--draft`). `BoundSpace` then turns an
Optuna trial into a DecodeConfig (`suggest`, define-by-run), params back into one
(`params_to_config`), a known config into params to enqueue (`encode`), and lists its
grid (for `GridSampler`) and its params (for display).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import optuna

from autotune.common.errors import AutotuneError
from autotune.schema.config import KNOBS, DecodeConfig, config_from_mapping
from autotune.schema.methods import find_method, get_method
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
    KnobValue,
    ParamValue,
    Spec,
    TrainedSpaceArgs,
    active,
    is_int,
)

__all__ = ["BoundSpace", "InfeasibleConfig", "SearchSpace"]


class InfeasibleConfig(AutotuneError):
    """A sampled point the space or the decoder rejects; the message says why."""


_MAX_GRID_POINTS = 100_000
# How a layer set's on/off bits are suggested (recorded with the study: a study made
# with the other encoding cannot resume, its params' distributions differ). Two
# categories, not an integer 0..1: TPE models a categorical bit by counting, where an
# integer costs it a truncated-normal kernel per bit and trial; a skip mask has one bit
# per sublayer: 300 asks on the joint space, 23.2 s as integers, 16.6 s as categories
# (bench/sampler_asks.py).
BIT_PARAMS = "categorical"
BIT_CHOICES = (0, 1)
_DEFAULT = DecodeConfig()


@dataclass(frozen=True)
class SearchSpace:
    """A loaded, checked space; `bind` it to a model's depth to sample from it."""

    name: str
    path: str
    sha256: str              # over the file's bytes and every included file's, in include order
    description: str
    _entries: tuple[Entry, ...] = field(default=(), repr=False)

    def bind(self, n_layers: int, draft_layers: int | None = None,
             trained: str | None = None,
             exit_layers: tuple[int, ...] | None = None,
             drafters: tuple[str, ...] | None = None) -> BoundSpace:
        """Resolve layer candidates for a target of `n_layers` decoder layers and an
        optional draft model of `draft_layers`: each layer knob counts the layers of the
        stack its method indexes (`MethodSpec.stack_layers`: S2D exits run over the draft
        when one is given). `trained`: the kind of a trained drafter given as --draft
        (eagle, medusa, exits). Methods whose draft is not there, or that the trained
        drafter does not serve, are dropped. `exit_layers`: the layers a trained `exits`
        drafter has adapters at; they replace the space's exit candidates (an exit
        elsewhere would read the target's untrained head), the space's exit counts kept
        where that many candidates remain. `drafters`: the members of a per-category
        --draft folder (`DrafterSet.drafter_choices`): a categorical `drafter` knob over
        them joins the space wherever the method it serves is chosen."""
        if not is_int(n_layers) or n_layers < 1:
            raise AutotuneError(f"n_layers={n_layers!r} must be a positive integer")
        if draft_layers is not None and (not is_int(draft_layers) or draft_layers < 1):
            raise AutotuneError(f"draft_layers={draft_layers!r} must be a positive integer")
        what = f"a trained {trained} drafter" if trained else "a draft model"
        needs_draft = AutotuneError(f"space {self.name!r} has no method that runs with "
                                    f"{what}" if trained or draft_layers is not None else
                                    f"space {self.name!r} needs a draft model: pass --draft")

        def missing(method: Any) -> bool:
            return _missing_draft(method, draft_layers is not None, trained)
        bound = []
        for entry in self._entries:
            spec = entry.spec
            if isinstance(spec, LayerSet):
                depth = _stack_depth(entry.key, n_layers, draft_layers)
                if spec.kind == "exits" and exit_layers:
                    spec = _adapter_exits(spec, exit_layers)
                entry = dataclasses.replace(entry, spec=spec.resolve(depth, entry.where))
            elif entry.key == "method":
                if isinstance(spec, Fixed) and missing(spec.value) and not entry.when:
                    fixed = find_method(spec.value)
                    if fixed is not None:
                        fixed.require_available()     # "needs arctic_inference: pip ..."
                    raise needs_draft
                if isinstance(spec, Choices):
                    left = tuple(c for c in spec.choices if not missing(c))
                    if not left:
                        raise needs_draft
                    entry = dataclasses.replace(entry, spec=Choices(left))
            bound.append(entry)
            if drafters and trained and entry.key == "method" and not entry.when:
                bound.extend(_drafter_knob(entry, trained, drafters))
        return BoundSpace(self, n_layers, draft_layers, tuple(_reachable(bound)))


def _drafter_knob(method: Entry, trained: str, drafters: tuple[str, ...]) -> list[Entry]:
    """The `drafter` knob over a per-category folder's members, active where the root
    `method` entry picks the method that the folder's kind serves (none if it cannot)."""
    from autotune.models.drafter_folder import served_method
    serves = served_method(trained)
    spec = method.spec
    if isinstance(spec, Fixed):
        if spec.value != serves:
            return []
        when: tuple[Cond, ...] = ()
    elif isinstance(spec, Choices) and serves in spec.choices:
        when = (Cond(ref=method.id, values=(serves,)),)
    else:
        return []
    return [Entry(id="drafter", key="drafter", type="categorical", spec=Choices(drafters),
                  when=when, where=method.where, when_where=method.where)]


def _stack_depth(key: str, n_layers: int, draft_layers: int | None) -> int:
    """Layers that the layer-indexed `key` counts: those of the stack its method reads."""
    for name in KNOBS[key].methods:
        spec = find_method(name)
        depth = spec.stack_layers(n_layers, draft_layers) if spec is not None else None
        if depth is not None:
            return depth
    return n_layers


def _adapter_exits(spec: LayerSet, exit_layers: tuple[int, ...]) -> LayerSet:
    """The exits knob with the trained adapters' layers as its candidates."""
    layers = tuple(sorted(set(exit_layers)))
    return dataclasses.replace(spec, listed=layers, never=(),
                               min_count=min(spec.min_count, len(layers)))


def _missing_draft(method: Any, has_model: bool, trained: str | None) -> bool:
    """Whether `method` cannot run here: its optional package is missing
    (`MethodSpec.requires`), or with the draft given: it drafts with --draft and a
    trained drafter is there that serves another method (`models.trained.SERVES`), or
    it needs a draft that is not there (a trained head of its own kind, a draft model)."""
    spec = find_method(method)
    if spec is None:
        return False
    if not spec.available():          # its optional package is not installed
        return True
    if trained is not None and spec.uses_draft:
        # Imported here: binding stays torch-free unless a trained drafter is loaded.
        from autotune.models.drafter_folder import served_method
        if served_method(trained) != spec.name:
            return True
    if not spec.needs_draft:
        return False
    return trained != spec.name if spec.reads_target_features else not has_model


def _reachable(entries: list[Entry]) -> list[Entry]:
    """Drop entries whose conditions can no longer hold (a draft model's branch once its
    choice is gone), so that knobs(), grid() and encode() only show what can be sampled."""
    kept: dict[str, Entry] = {}
    for entry in entries:                         # dependency order: refs come first
        if all(c.ref in kept and _can_take(kept[c.ref].spec, c.values) for c in entry.when):
            kept[entry.id] = entry
    return list(kept.values())


def _can_take(spec: Spec, values: tuple[Any, ...]) -> bool:
    if isinstance(spec, Fixed):
        return spec.value in values
    if isinstance(spec, Choices):
        return any(v in spec.choices for v in values)
    return True                                   # ranges: checked when the file was loaded


@dataclass(frozen=True)
class BoundSpace:
    """A space bound to a model's depth: trials in, DecodeConfigs out."""

    space: SearchSpace
    n_layers: int
    draft_layers: int | None = None
    _entries: tuple[Entry, ...] = field(default=(), repr=False)
    # The engine whose rules every config is measured under (`search --target`), and what
    # that engine cannot run exactly (a config -> one line, or None); see `for_engine`.
    engine: str = "autotune"
    refuse: Callable[[DecodeConfig], str | None] | None = field(default=None, repr=False)

    def for_engine(self, engine: str,
                   refuse: Callable[[DecodeConfig], str | None] | None) -> "BoundSpace":
        """This space with every config measured under `engine`'s rules, and a point
        `refuse` names a reason for rejected as InfeasibleConfig (never measured)."""
        return dataclasses.replace(self, engine=engine, refuse=refuse)

    # -- trials -> configs

    def suggest(self, trial: optuna.trial.BaseTrial) -> DecodeConfig:
        """Suggest every active knob (define-by-run) and build a validated DecodeConfig.

        Raises InfeasibleConfig for a point the space or DecodeConfig rejects; all active
        params are suggested first, so the trial records the whole point either way.
        """
        values: dict[str, KnobValue] = {}
        setter: dict[str, str] = {}
        decided: dict[str, KnobValue] = {}
        problems: list[str] = []
        for entry in self._entries:
            if not active(entry, decided):
                continue
            value = self._draw(entry, trial, values, problems)
            if entry.type == SWITCH:
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
            # Validated under the engine's rules: a knob only that engine has (TensorRT-LLM's
            # public n-gram pool) is valid there and nowhere else.
            config = config_from_mapping({**values, "engine": self.engine})
            # Layer keys are checked against the stack the method indexes (the draft's for
            # exits over --draft); methods that index none against the target's.
            stack = get_method(config.method).stack_layers(self.n_layers, self.draft_layers)
            config.validate(stack if stack is not None else self.n_layers)
        except AutotuneError as exc:
            raise InfeasibleConfig(str(exc)) from None
        waste = config.shape.waste()
        if waste:
            raise InfeasibleConfig(waste)
        reason = self.refuse(config) if self.refuse is not None else None
        if reason:
            raise InfeasibleConfig(reason)
        return config

    def _draw(self, entry: Entry, trial: optuna.trial.BaseTrial,
              values: Mapping[str, KnobValue], problems: list[str]) -> Any:
        spec = entry.spec
        if isinstance(spec, Fixed):
            return spec.value
        if isinstance(spec, Choices):
            return trial.suggest_categorical(entry.id, spec.choices)
        if isinstance(spec, BoundSet) and spec.single:
            return (int(trial.suggest_categorical(entry.id, spec.candidates)),)
        if isinstance(spec, BoundSet):
            chosen = tuple(c for c in spec.candidates
                           if trial.suggest_categorical(f"{entry.id}[{c}]", BIT_CHOICES))
            if not spec.min_count <= len(chosen) <= spec.max_count:
                noun = "exits" if spec.kind == "exits" else "skipped layers"
                problems.append(f"{entry.id} has {len(chosen)} {noun}; the space allows "
                                f"{spec.min_count}..{spec.max_count}")
            return chosen
        assert isinstance(spec, Range)
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

    def encode(self, values: Mapping[str, Any]) -> dict[str, ParamValue] | None:
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
        explicit = frozenset(k for k in values if k not in WORKLOAD_KEYS)
        return self._encode_from(0, given, explicit, {}, {}, {})

    def _encode_from(self, first: int, given: DecodeConfig, explicit: frozenset[str],
                     params: dict[str, ParamValue], decided: dict[str, KnobValue],
                     current: dict[str, KnobValue]) -> dict[str, ParamValue] | None:
        """encode() from entry `first` on; a switch tries each choice on copies of the
        state so far and keeps the first under which the rest is expressible."""
        for index in range(first, len(self._entries)):
            entry = self._entries[index]
            if not active(entry, decided):
                continue
            spec = entry.spec
            if entry.type == SWITCH:
                assert isinstance(spec, Choices)
                for choice in spec.choices:
                    found = self._encode_from(index + 1, given, explicit,
                                              {**params, entry.id: choice},
                                              {**decided, entry.id: choice}, dict(current))
                    if found is not None:
                        return found
                return None
            if isinstance(spec, Fixed):
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
    def _encode_one(entry: Entry, value: Any, given: DecodeConfig,
                    current: Mapping[str, KnobValue]) -> dict[str, ParamValue] | None:
        spec = entry.spec
        if isinstance(spec, Choices):
            return {entry.id: value} if value in spec.choices else None
        if isinstance(spec, BoundSet):
            if not set(value) <= set(spec.candidates):
                return None
            if spec.single:
                return {entry.id: int(value[0])} if len(value) == 1 else None
            return {f"{entry.id}[{c}]": int(c in value) for c in spec.candidates}
        assert isinstance(spec, Range)
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
            if isinstance(spec, Choices):
                grid[param] = list(spec.choices)
            elif isinstance(spec, BoundSet) and spec.single:
                grid[param] = list(spec.candidates)
            elif isinstance(spec, BoundSet):
                grid[param] = list(BIT_CHOICES)
            else:
                assert isinstance(spec, Range)
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
            if isinstance(spec, Choices):
                row["choices"] = list(spec.choices)
            elif isinstance(spec, BoundSet) and spec.single:
                row["choices"] = list(spec.candidates)
            elif isinstance(spec, BoundSet):
                row.update(low=0, high=1, step=1)
            else:
                assert isinstance(spec, Range)
                row.update(low=spec.low, high=spec.high, step=spec.step, log=spec.log)
            row["when"] = " and ".join([c.describe() for c in entry.when] + extra)
            rows.append(row)
        return rows

    def _params(self) -> Iterator[tuple[Entry, str, list[str]]]:
        """(entry, Optuna param name, extra conditions for display) for every knob param."""
        by_id = {e.id: e for e in self._entries}
        for entry in self._entries:
            spec = entry.spec
            if isinstance(spec, Fixed):
                continue
            if isinstance(spec, BoundSet) and spec.single:
                yield entry, entry.id, []
            elif isinstance(spec, BoundSet):
                for c in spec.candidates:
                    yield entry, f"{entry.id}[{c}]", []
            elif entry.type == "thresholds":
                # Thresholds pair with the exits of their own scope (same id prefix).
                exits = by_id.get(entry.id[: -len(entry.key)] + "exits")
                for d, extra in _threshold_depths(exits):
                    yield entry, f"{entry.id}[{d}]", [extra]
            else:
                yield entry, entry.id, []


def _threshold_depths(exits: Entry | None) -> Iterator[tuple[int, str]]:
    """Depths that can carry a threshold (any exit but the deepest possible one)."""
    if exits is None:
        return
    if isinstance(exits.spec, BoundSet) and exits.spec.single:
        return                                   # one exit: the deepest, no threshold
    if isinstance(exits.spec, BoundSet):
        for d in exits.spec.candidates[:-1]:
            yield d, f"{exits.id}[{d}] == 1 and not the deepest exit"
    elif isinstance(exits.spec, Fixed):
        for d in sorted(exits.spec.value)[:-1]:
            yield d, f"exit {d} (fixed)"


def trained_space_args(draft: Any) -> TrainedSpaceArgs:
    """What `SearchSpace.bind` takes from a trained --draft besides its kind: the exit
    layers of trained adapters, the members of a per-category folder. (Read off the
    drafter's attributes, so that the space loads no model code.)"""
    args = TrainedSpaceArgs()
    exit_layers = getattr(draft, "exit_layers", None)
    if exit_layers is not None:
        args["exit_layers"] = tuple(exit_layers)
    drafter_choices = getattr(draft, "drafter_choices", None)
    if drafter_choices is not None:
        args["drafters"] = drafter_choices()
    return args
