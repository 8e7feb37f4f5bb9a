"""Knob metadata: the one description of each DecodeConfig field.

Each field of `DecodeConfig` carries a `Knob` in its dataclass metadata: its value kind,
bounds, which method or exit policy owns it, and a one-line doc. Coercion of CLI and file
values, the frozen schema's `params` (checked against it by a test), the space's knob
types, the exporters' and the report's key lists and the README's knob table all read it,
so a new knob is one field.

A method's own keys are fields too (`own_knob`: the knob owned by the method that reads
it), written out in `config.py` beside the shared ones. The checks every knob shares
(`check_bounds`, `check_exit_order`) live here.

Torch-free; imports nothing of autotune but its error class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from autotune.common.errors import AutotuneError

# Value kinds, with the space knob types that may tune each.
SPACE_TYPES: dict[str, tuple[str, ...]] = {
    "int": ("int", "categorical"),
    "float": ("float", "logfloat", "categorical"),
    "str": ("categorical",),
    "int_set": ("layers",),          # a set of layer indices (skip sets)
    "int_list": ("exits",),          # an increasing list of exit depths
    "float_list": ("thresholds",),   # one value per exit
    "paths": (),                     # a static tree: not searched (see the tree space)
}

# Owners: who reads the knob.
ALL = "all"                  # every method (method itself, and the exit-policy switch)
DRAFTING = "drafting"        # every drafting method (k)
SHAPE = "shape"              # the draft shape (tree knobs), any tree-capable method
WORKLOAD = "workload"        # sampling settings: inputs of a study, not tuned
DRAFT = "draft"              # which member of a per-category --draft folder drafts (any
                             # method that drafts with --draft; no method's own key)


def method_owner(*names: str) -> str:
    """The owner of a method's own key: the method that declares it, then any other
    that reads it too (`exits`: sorted_exit, llama_draft)."""
    return "method:" + ",".join(names)


def policy_owner(*names: str) -> str:
    return "policy:" + ",".join(names)


@dataclass(frozen=True)
class Knob:
    """kind: a key of SPACE_TYPES. low/high: inclusive bounds of the value (of each item
    for lists), None when open. choices: allowed strings (None: any, or a registry's
    names). owner: ALL, DRAFTING, SHAPE, WORKLOAD, DRAFT, `method:NAME` or `policy:A,B`.
    doc: one line for the README table and `--help`. default_doc: how the README shows
    the default when `str(default)` would not read well."""

    kind: str
    owner: str
    doc: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    default_doc: str | None = None

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self.owner.removeprefix("method:").split(",")) \
            if self.owner.startswith("method:") else ()

    @property
    def policies(self) -> tuple[str, ...]:
        return tuple(self.owner.removeprefix("policy:").split(",")) \
            if self.owner.startswith("policy:") else ()

    @property
    def space_types(self) -> tuple[str, ...]:
        return SPACE_TYPES[self.kind]


KNOB_METADATA_KEY = "knob"


def knob(kind: str, owner: str, doc: str, **bounds: Any) -> dict[str, Knob]:
    """Dataclass field metadata: `field(default=4, metadata=knob("int", DRAFTING, ...))`."""
    if kind not in SPACE_TYPES:
        raise ValueError(f"unknown knob kind {kind!r}")
    return {KNOB_METADATA_KEY: Knob(kind, owner, doc, **bounds)}


def own_knob(methods: str | tuple[str, ...], kind: str, default: Any, doc: str,
             **bounds: Any) -> Any:
    """A method's own key as a DecodeConfig field: `ngram_min: int = own_knob("ngram",
    "int", 1, "shortest prompt-lookup n-gram", low=1)`. `methods`: the method whose key
    it is, or (it, and the others that read it too). A scalar key's bounds and choices
    are checked for every config of its method (`DecodeConfig.validate`)."""
    owners = (methods,) if isinstance(methods, str) else methods
    return field(default=default, metadata=knob(kind, method_owner(*owners), doc, **bounds))


# Kinds whose value is one number or string (a list kind's bounds bind each item).
SCALAR_KINDS = frozenset({"int", "float", "str"})


def within(low: float | None, high: float | None, value: float) -> bool:
    """Whether `value` lies inside the inclusive bounds (None: open)."""
    return (low is None or value >= low) and (high is None or value <= high)


def check_bounds(name: str, value: Any, low: float | None, high: float | None) -> None:
    """One line when a scalar knob's `value` lies outside [low, high]: every knob, the
    common ones and the methods' own, says it in these words."""
    if within(low, high, value):
        return
    if low is not None and high is not None:
        raise AutotuneError(f"{name}={value} must lie in [{low:g}, {high:g}]")
    if low is None:
        raise AutotuneError(f"{name}={value} must be <= {high:g}")
    raise AutotuneError(f"{name}={value} must be >= {low:g}" if low == 0
                        else f"{name}={value} must be at least {low:g}")


def check_exit_order(depths: Sequence[int], named: str, low: float | None = None) -> None:
    """The rule every list of exit depths keeps (the `exits` knob, train-draft's
    --exit-layers and the adapters it trains there): increasing, each depth once, since
    exits are read shallowest first; with `low`, the first at least `low`.
    `named` opens the one-line message (e.g. "exits=[16, 8]")."""
    if any(b <= a for a, b in zip(depths, depths[1:])) \
            or (low is not None and len(depths) > 0 and depths[0] < low):
        bound = f" and >= {low:g}" if low is not None else ""
        raise AutotuneError(f"{named} must be increasing{bound}, each layer once")
