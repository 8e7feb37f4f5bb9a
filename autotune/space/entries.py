"""What a loaded space is made of: one `Entry` per fixed key or knob, with its parsed spec.

Loading (`loading.py`) builds these from YAML and checks them; binding (`binding.py`)
resolves layer sets against a model's depth and draws values from them. Both read the
same pieces, so they live here, apart from either step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict, Union

import optuna
from optuna.distributions import CategoricalChoiceType, FloatDistribution, IntDistribution

from autotune.common.errors import AutotuneError
from autotune.schema.config import KNOBS
from autotune.schema.knobs import WORKLOAD

SWITCH = "switch"           # a knob type that chooses a branch and sets no config key
# Sampling settings describe the workload a config is tuned for, so a space cannot vary them.
WORKLOAD_KEYS = frozenset(name for name, knob in KNOBS.items() if knob.owner == WORKLOAD)


def is_int(value: object) -> bool:
    """An int that is not a bool (YAML's `true` is one to Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Where:
    """A place in a space file, for one-line errors."""

    path: str            # as shown to the user
    line: int
    what: str            # dotted key, e.g. knobs.k.low

    def error(self, message: str) -> AutotuneError:
        what = f" {self.what}:" if self.what else ""
        return AutotuneError(f"{self.path}:{self.line}:{what} {message}")


@dataclass(frozen=True)
class Fixed:
    value: Any                               # canonical DecodeConfig value


@dataclass(frozen=True)
class Range:
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
class Choices:
    """categorical or bool knob."""

    choices: tuple[Any, ...]


@dataclass(frozen=True)
class LayerSet:
    """layers / exits knob before binding: candidates are resolved against a depth later."""

    kind: str                                # "layers" or "exits"
    listed: tuple[int, ...] | None           # explicit candidates; None means a range
    start: int | None                        # range bounds (None: the stack's first / last)
    stop: int | None                         # exclusive
    step: int
    never: tuple[int, ...]                   # never_skip (layers only)
    min_count: int
    max_count: int | float | None            # None: no limit; float: fraction of the depth

    def resolve(self, depth: int, where: Where) -> BoundSet:
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
        return BoundSet(self.kind, candidates, self.min_count, min(most, len(candidates)))


@dataclass(frozen=True)
class BoundSet:
    """layers / exits knob after binding: one 0/1 param per candidate, or, where exactly
    one is chosen (`single`), one categorical param over the candidates (0/1 bits would
    draw one set bit in few trials)."""

    kind: str
    candidates: tuple[int, ...]
    min_count: int
    max_count: int

    @property
    def single(self) -> bool:
        return self.min_count == self.max_count == 1


Spec = Fixed | Range | Choices | LayerSet | BoundSet
# What a knob gives its config key, as DecodeConfig's fields hold it (a number, a choice,
# a layer set, thresholds, tree choices), or a switch's label.
KnobValue = Union[None, bool, int, float, str, tuple[int, ...], tuple[float, ...],
                  tuple[tuple[int, ...], ...]]
# One Optuna param's value: what a distribution suggests (Optuna's own type; a layer set
# is one 0/1 param per candidate layer).
ParamValue = CategoricalChoiceType


class TrainedSpaceArgs(TypedDict, total=False):
    """What `SearchSpace.bind` takes from a trained --draft besides its kind."""

    exit_layers: tuple[int, ...]        # the layers a trained `exits` drafter adapts
    drafters: tuple[str, ...]           # a per-category folder's `drafter` choices


@dataclass(frozen=True)
class Cond:
    """Holds when entry `ref` is active and took one of `values`."""

    ref: str
    values: tuple[Any, ...]

    def describe(self) -> str:
        if len(self.values) == 1:
            return f"{self.ref} == {self.values[0]}"
        return f"{self.ref} in [{', '.join(str(v) for v in self.values)}]"


@dataclass(frozen=True)
class Entry:
    """One fixed value or one knob of a loaded space."""

    id: str                  # scoped name, `<branch>.` prefixed; base of its Optuna param names
    key: str                 # the DecodeConfig field it sets
    type: str                # "fixed", "int", "float", "categorical", "bool", "layers", ...
    spec: Spec
    when: tuple[Cond, ...]
    where: Where             # the knob's (or fixed key's) line
    when_where: Where        # its `when:` line (the include's, for a branch condition)

    def prefixed(self, prefix: str) -> Entry:
        when = tuple(Cond(prefix + c.ref, c.values) for c in self.when)
        return dataclasses.replace(self, id=prefix + self.id, when=when)


def active(entry: Entry, decided: Mapping[str, Any]) -> bool:
    """All conditions hold on the values decided so far (an undecided ref is inactive)."""
    return all(c.ref in decided and decided[c.ref] in c.values for c in entry.when)
