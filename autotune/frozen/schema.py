"""The frozen config's versions and their JSON Schemas.

Each version's structure is a JSON Schema in `schemas/frozen-v*.schema.json`. The files do
not list the method names: `params.method.enum` is filled when a schema is loaded, from the
method registry, so a method is registered in one place (`autotune.schema.methods`).
Nor do the files of v5 on list the methods' own keys: each entry under
`params` is made from the key's knob (`own_knob`: kind, bounds, choices) when the schema is
loaded, so a method's keys are declared once (`DecodeConfig`'s fields). A rule the knob cannot say
(TensorRT-LLM's SA size is never 0; llama-server's spec-type list) is written in the file,
and that entry is used as written.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any, Sequence

from autotune.schema.config import KNOBS
from autotune.schema.knobs import Knob
from autotune.schema.methods import builtin_methods, method_names

SCHEMA = "autotune.frozen/v6"
SCHEMA_PREFIX = "autotune.frozen/"
# Every version this autotune reads, with its JSON Schema file. v2 added `validation`
# (the finalists re-measured on held-out prompts); v3 added the `engine` knob (whose
# drafting rules the figures were measured under; absent = autotune's own, as every
# older file was measured) and, additively, the optional `schedule` (K per batch size);
# v4 added the answer "undecided" and the `min_gain` it is judged with; v5 added, additively,
# `engines` (each engine's own answer, from `autotune search --target all`); v6 added
# `validation.basis` (measured, in which engine, or predicted by autotune's decoder and
# why) and the `implausible` / `suspect` flags. Older files read as they always did (an
# older answer's basis is filled in by `record.upgrade`).
_SCHEMA_FILES = {"autotune.frozen/v1": "schemas/frozen-v1.schema.json",
                 "autotune.frozen/v2": "schemas/frozen-v2.schema.json",
                 "autotune.frozen/v3": "schemas/frozen-v3.schema.json",
                 "autotune.frozen/v4": "schemas/frozen-v4.schema.json",
                 "autotune.frozen/v5": "schemas/frozen-v5.schema.json",
                 SCHEMA: "schemas/frozen-v6.schema.json"}
READABLE = tuple(_SCHEMA_FILES)
# The versions whose file leaves the methods' own keys to their knobs (v5 on).
_KNOBS_MADE = ("autotune.frozen/v5", SCHEMA)


# JSON types of the knob kinds (scalars; a list kind's items).
_JSON_TYPES = {"int": "integer", "float": "number", "int_set": "integer",
               "int_list": "integer", "float_list": "number"}


def knob_entry(knob: Knob) -> dict[str, Any] | None:
    """The JSON Schema of a method's key from its knob: its type and bounds (of each item
    for a list kind; a layer set's items distinct), a string's choices; None for a kind
    whose values the knob cannot describe (a static tree, a free string)."""
    bounds = {k: (int(v) if knob.kind in ("int", "int_set", "int_list") else v)
              for k, v in (("minimum", knob.low), ("maximum", knob.high)) if v is not None}
    if knob.kind in ("int", "float"):
        return {"type": _JSON_TYPES[knob.kind], **bounds}
    if knob.kind == "str":
        return {"enum": list(knob.choices)} if knob.choices is not None else None
    if knob.kind in ("int_set", "int_list", "float_list"):
        entry: dict[str, Any] = {"type": "array",
                                 "items": {"type": _JSON_TYPES[knob.kind], **bounds}}
        if knob.kind == "int_set":
            entry["uniqueItems"] = True
        return entry
    return None


def _with_method_knobs(params: dict[str, Any]) -> None:
    """`params.properties` in the knobs' order, each method's own key made from its knob
    unless the file writes it (a rule beyond kind and bounds)."""
    written = params["properties"]
    made: dict[str, Any] = {}
    for name, knob in KNOBS.items():
        entry = written.get(name) or (knob_entry(knob) if knob.methods else None)
        if entry is None:
            raise ValueError(f"the frozen schema has no entry for config key {name!r}, "
                             "and its knob cannot describe it: write one")
        made[name] = entry
    params["properties"] = {**made, **{k: v for k, v in written.items() if k not in made}}


def _with_methods(version: str, methods: Sequence[str]) -> dict[str, Any]:
    """The schema file of `version` with `params.method.enum` set to `methods` (and, from
    v5 on, the methods' own keys made from their knobs)."""
    schema = json.loads(files("autotune.frozen").joinpath(_SCHEMA_FILES[version]).read_text())
    params = schema["properties"]["params"]
    if version in _KNOBS_MADE:
        _with_method_knobs(params)
    method = params["properties"].get("method")
    if method is not None:
        method["enum"] = list(methods)
    return schema


def shipped_schema(version: str = SCHEMA) -> dict[str, Any]:
    """The JSON Schema of `version` as autotune ships it: its `params.method` enum lists the
    built-in methods (`builtin_methods()`), so it is complete without a plug-in's."""
    return _with_methods(version, builtin_methods())


def validation_schema(version: str = SCHEMA) -> dict[str, Any]:
    """The schema documents are checked against: its method enum lists every registered
    method, so a method registered at run time (a plug-in, a test's toy drafter)
    validates too."""
    return _with_methods(version, method_names())
