"""The frozen config's versions and their JSON Schemas.

Each version's structure is a JSON Schema in `schemas/frozen-v*.schema.json`. The files do
not list the method names: `params.method.enum` is filled when a schema is loaded, from the
method registry, so a method is registered in one place (`autotune.decoding.methods`).
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any, Sequence

from autotune.decoding.methods import BUILTIN_METHODS, method_names

SCHEMA = "autotune.frozen/v5"
SCHEMA_PREFIX = "autotune.frozen/"
# Every version this autotune reads, with its JSON Schema file. v2 added `validation`
# (the finalists re-measured on held-out prompts); v3 added the `engine` knob (whose
# drafting rules the figures were measured under; absent = autotune's own, as every
# older file was measured) and, additively, the optional `schedule` (K per batch size);
# v4 added the answer "undecided" and the `min_gain` it is judged with; v5 added, additively,
# `engines` (each engine's own answer, from `autotune search --target all`). Older files
# read as they always did.
_SCHEMA_FILES = {"autotune.frozen/v1": "schemas/frozen-v1.schema.json",
                 "autotune.frozen/v2": "schemas/frozen-v2.schema.json",
                 "autotune.frozen/v3": "schemas/frozen-v3.schema.json",
                 "autotune.frozen/v4": "schemas/frozen-v4.schema.json",
                 SCHEMA: "schemas/frozen-v5.schema.json"}
READABLE = tuple(_SCHEMA_FILES)


def _with_methods(version: str, methods: Sequence[str]) -> dict[str, Any]:
    """The schema file of `version` with `params.method.enum` set to `methods`."""
    schema = json.loads(files("autotune.frozen").joinpath(_SCHEMA_FILES[version]).read_text())
    method = schema["properties"]["params"]["properties"].get("method")
    if method is not None:
        method["enum"] = list(methods)
    return schema


def shipped_schema(version: str = SCHEMA) -> dict[str, Any]:
    """The JSON Schema of `version` as autotune ships it: its `params.method` enum lists the
    built-in methods (`BUILTIN_METHODS`), so it is complete without autotune's registry."""
    return _with_methods(version, BUILTIN_METHODS)


def validation_schema(version: str = SCHEMA) -> dict[str, Any]:
    """The schema documents are checked against: its method enum lists every registered
    method, so a method registered at run time (a plug-in, a test's toy drafter)
    validates too."""
    return _with_methods(version, method_names())
