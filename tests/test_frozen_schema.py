"""The frozen schema's `params` against the knobs' metadata and the method registry: the
method enum comes from the registry when a schema is loaded (never written by hand in the
JSON files), and a knob added to DecodeConfig without its schema entry (or with other
bounds) fails here."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any, Iterator

import pytest

from autotune.common.errors import AutotuneError
from autotune.schema.config import KNOBS, MAX_TREE_NODES
from autotune.schema.methods import (
    builtin_methods,
    MethodSpec,
    register_method,
    unregister_method,
)
from autotune.frozen.checks import problems, read_parts
from autotune.frozen.schema import READABLE, SCHEMA, SCHEMA_PREFIX, shipped_schema

PARAMS = shipped_schema()["properties"]["params"]
JSON_TYPE = {"int": "integer", "float": "number"}
# The item type of each list kind.
ITEM_TYPE = {"int_set": "integer", "int_list": "integer", "float_list": "number"}


@pytest.fixture
def toy_method() -> Iterator[str]:
    register_method(MethodSpec("toy", label="toy", color="#000000", drafter=lambda: object))
    try:
        yield "toy"
    finally:
        unregister_method("toy")


def test_the_file_names_the_schema_id_the_reader_reads() -> None:
    schema = shipped_schema()
    assert schema["$id"] == SCHEMA and schema["properties"]["schema"]["const"] == SCHEMA


@pytest.mark.parametrize("version", READABLE)
def test_the_loaded_schema_lists_the_built_in_methods(version: str) -> None:
    params = shipped_schema(version)["properties"]["params"]["properties"]
    assert params["method"]["enum"] == list(builtin_methods())
    # The files name no method: the registry is the one list.
    raw = json.loads(files("autotune.frozen").joinpath(
        f"schemas/frozen-{version.removeprefix(SCHEMA_PREFIX)}.schema.json").read_text())
    assert "enum" not in raw["properties"]["params"]["properties"]["method"]


@pytest.mark.parametrize("version", READABLE)
def test_a_config_with_an_unknown_method_is_refused(version: str) -> None:
    doc = {"schema": version, "params": {"method": "hydra"}}
    assert problems(doc) == ["params.method: 'hydra' is not one of "
                             + ", ".join(repr(name) for name in builtin_methods())]
    with pytest.raises(AutotuneError, match="hydra"):
        read_parts(doc)


def test_the_schema_has_one_entry_per_knob() -> None:
    schema_keys, knob_keys = set(PARAMS["properties"]), set(KNOBS)
    assert not knob_keys - schema_keys, "knobs missing from the frozen schema's params"
    assert not schema_keys - knob_keys, "params in the frozen schema that are no knob"
    assert PARAMS["additionalProperties"] is False


def _lower(entry: dict[str, Any]) -> float | None:
    """The lower bound, inclusive or exclusive (top_p excludes 0; validate says why)."""
    return entry.get("minimum", entry.get("exclusiveMinimum"))


@pytest.mark.parametrize("name", list(KNOBS))
def test_each_knobs_type_and_bounds_agree_with_its_metadata(name: str) -> None:
    knob, entry = KNOBS[name], PARAMS["properties"][name]
    if knob.kind == "str" and knob.choices is None and "pattern" in entry:
        assert entry["type"] == "string"             # a free name (drafter: a category)
        return
    if knob.kind == "str":
        assert "enum" in entry
        if knob.choices is not None:
            assert entry["enum"] == list(knob.choices)
        return
    if knob.kind in JSON_TYPE:
        assert entry["type"] == JSON_TYPE[knob.kind]
        value = entry
    elif knob.kind in ITEM_TYPE:
        assert entry["type"] == "array"
        value = entry["items"]
        assert value["type"] == ITEM_TYPE[knob.kind]
        # A skip set is a set: the schema says its items are distinct.
        assert entry.get("uniqueItems", False) is (knob.kind == "int_set")
    else:
        assert knob.kind == "paths"
        assert entry["type"] == "array" and entry["maxItems"] == MAX_TREE_NODES
        path = entry["items"]
        assert path["type"] == "array" and path["minItems"] == 1
        value = path["items"]
        assert value["type"] == "integer"
    assert _lower(value) == knob.low, f"{name}: lower bound"
    assert value.get("maximum") == knob.high, f"{name}: upper bound"


def test_a_registered_method_validates(toy_method: str) -> None:
    assert problems({"schema": SCHEMA, "params": {"method": toy_method}}) == []
    # The file itself is unchanged: a reader without autotune sees the built-ins.
    assert toy_method not in shipped_schema()["properties"]["params"]["properties"][
        "method"]["enum"]


def test_an_unknown_method_names_the_registered_ones(toy_method: str) -> None:
    found = problems({"schema": SCHEMA, "params": {"method": "hydra"}})
    assert found == ["params.method: 'hydra' is not one of "
                     + ", ".join(repr(name) for name in (*builtin_methods(), toy_method))]


def _validation(decision: str = "speculate") -> dict[str, Any]:
    return {"decision": decision, "speedup": 1.1, "ci90": [1.02, 1.2], "prompts": 12,
            "repeats": 2, "by_category": {"code": {"speedup": 1.3, "ci90": None, "prompts": 1}},
            "finalists": [{"trial": 3, "speedup": 1.1, "ci90": [1.02, 1.2]}]}


def test_v1_files_still_read_and_v2_adds_validation() -> None:
    v1 = {"schema": "autotune.frozen/v1", "params": {"method": "ngram", "k": 3}}
    assert problems(v1) == []
    assert read_parts(v1).config.k == 3
    # `validation` is v2's: a v1 file that has it is not a v1 file.
    assert any("validation" in p for p in problems({**v1, "validation": _validation()}))
    v2 = {"schema": "autotune.frozen/v2", "params": {"method": "ngram"},
          "validation": _validation()}
    assert problems(v2) == [] and read_parts(v2).config.engine == "autotune"


def test_v3_adds_the_engine_knob_that_v2_files_cannot_carry() -> None:
    v3 = {"schema": SCHEMA, "params": {"method": "ngram", "engine": "hf"}}
    assert problems(v3) == []
    assert read_parts(v3).config.engine == "hf"
    assert any("engine" in p for p in problems({**v3, "schema": "autotune.frozen/v2"}))
    assert any("engine" in p for p in problems({**v3, "params": {"engine": "tgi"}}))


def test_v4_adds_the_undecided_answer_and_its_min_gain() -> None:
    v4 = {"schema": SCHEMA, "params": {"method": "none"},
          "validation": {**_validation("undecided"), "min_gain": 0.05}}
    # v6 is current; a v4 file reads as it always did.
    assert SCHEMA == "autotune.frozen/v6" and problems(v4) == []
    assert problems({**v4, "schema": "autotune.frozen/v4"}) == []
    # A v3 file cannot say "undecided": that answer is v4's.
    assert any(p.startswith("validation.decision")
               for p in problems({**v4, "schema": "autotune.frozen/v3"}))
    assert problems({**v4, "schema": "autotune.frozen/v3",
                     "validation": _validation("do_not_speculate")}) == []
    assert any(p.startswith("validation.min_gain")
               for p in problems({**v4, "validation": {**v4["validation"], "min_gain": 1.5}}))


def test_validation_structure_is_checked() -> None:
    bad = _validation("maybe")
    bad["ci90"] = [1.0]
    found = problems({"schema": SCHEMA, "params": {}, "validation": bad})
    assert any(p.startswith("validation.decision") for p in found)
    assert any(p.startswith("validation.ci90") for p in found)


def test_a_newer_version_is_refused_in_one_line() -> None:
    found = problems({"schema": "autotune.frozen/v9", "params": {}})
    assert len(found) == 1 and "not supported" in found[0] and "v2" in found[0]


def test_a_methods_own_keys_are_made_from_its_knobs() -> None:
    """The current schema file writes no method's own key but the two whose rule the knob
    cannot say; the loaded schema makes the others from their knobs, so a new method's
    keys need no schema edit."""
    from autotune.schema.knobs import KNOB_METADATA_KEY, own_knob
    from autotune.frozen.schema import knob_entry
    written = json.loads(files("autotune.frozen").joinpath(
        "schemas/frozen-v6.schema.json").read_text())["properties"]["params"]["properties"]
    own = {name for name, knob in KNOBS.items() if knob.methods}
    assert own & set(written) == {"sa_max_matching_ngram_size", "llama_spec_type"}
    assert own <= set(PARAMS["properties"])
    depth = own_knob("toy", "int", 3, "a toy's depth", low=1, high=9)
    assert knob_entry(depth.metadata[KNOB_METADATA_KEY]) == {
        "type": "integer", "minimum": 1, "maximum": 9}
    layers = own_knob("toy", "int_set", (), "a toy's layers", low=0)
    assert knob_entry(layers.metadata[KNOB_METADATA_KEY]) == {
        "type": "array", "items": {"type": "integer", "minimum": 0}, "uniqueItems": True}
