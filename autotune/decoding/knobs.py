"""Knob metadata: the one description of each DecodeConfig field.

Each field of `DecodeConfig` carries a `Knob` in its dataclass metadata: its value kind,
bounds, which method or exit policy owns it, and a one-line doc. Coercion of CLI and file
values, the frozen schema's `params` (checked against it by a test), the space's knob
types, the exporters' and the report's key lists and the README's knob table all read it,
so a new knob is one field.

Torch-free and import-free: `config.py` builds `KNOBS` from its fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def method_owner(name: str) -> str:
    return f"method:{name}"


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
