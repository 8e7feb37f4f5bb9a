"""A method's config keys live with the method: its spec declares them (`MethodKnob`),
DecodeConfig makes them fields, and `validate` asks the method to check them, naming no
method itself. A new method with knobs of its own touches its package, not config.py."""

from __future__ import annotations

import dataclasses
import inspect
import json
from dataclasses import dataclass, field

import pytest

from autotune.common.errors import AutotuneError
from autotune.schema import config as config_module
from autotune.schema.config import KNOBS, DecodeConfig, method_knobs, with_method_knobs
from autotune.schema.knobs import ALL, KNOB_METADATA_KEY, MethodKnob, knob, method_owner
from autotune.schema.methods import (
    BUILTIN_METHODS,
    MethodSpec,
    all_methods,
    get_method,
    register_method,
)
from autotune.replay.costs import CostParts, LayerParts


def test_every_method_key_is_declared_by_one_method_and_is_a_field() -> None:
    declared = {k.name: spec.name for spec in all_methods() for k in spec.knobs}
    assert len(declared) == sum(len(spec.knobs) for spec in all_methods())
    defaults = DecodeConfig()
    for spec in all_methods():
        for knob_ in spec.knobs:
            meta = KNOBS[knob_.name]
            assert meta.methods[0] == spec.name
            assert (meta.kind, meta.doc, meta.low, meta.high, meta.choices) == (
                knob_.kind, knob_.doc, knob_.low, knob_.high, knob_.choices)
            assert getattr(defaults, knob_.name) == knob_.default
    # A key another method reads counts among that method's keys.
    assert KNOBS["exits"].methods == ("sorted_exit", "llama_draft")


def test_config_py_names_no_method() -> None:
    source = inspect.getsource(config_module)
    code = "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith("#"))
    for name in BUILTIN_METHODS:
        if name != "none":                       # `method`'s default: the AR baseline
            assert f'"{name}"' not in code and f"== {name!r}" not in code, name


def _toy(knobs: tuple[MethodKnob, ...], **kwargs: object) -> MethodSpec:
    return MethodSpec("toy2", label="toy", color="#000000", drafter=lambda: object, order=5,
                      knobs=knobs, **kwargs)


TWO = (MethodKnob("toy_depth", "int", 3, "how deep", low=1, high=9),
       MethodKnob("toy_layers", "int_set", (), "which layers", low=0))


def test_a_new_methods_two_knobs_become_fields_in_their_slots() -> None:
    @dataclass(frozen=True)
    @with_method_knobs(lists_after="k", scalars_after="k2", methods=[_toy(TWO)])
    class Config:
        method: str = field(default="none", metadata=knob("str", ALL, "method"))
        k: int = field(default=4, metadata=knob("str", ALL, "k"))
        k2: int = field(default=5, metadata=knob("str", ALL, "k2"))
        last: int = field(default=6, metadata=knob("str", ALL, "last"))

    names = [f.name for f in dataclasses.fields(Config)]
    assert names == ["method", "k", "toy_layers", "k2", "toy_depth", "last"]
    made = Config(toy_depth=7)
    assert made.toy_depth == 7 and made.toy_layers == ()
    assert dataclasses.replace(made, toy_layers=(1,)).toy_layers == (1,)
    meta = dataclasses.fields(Config)[4].metadata[KNOB_METADATA_KEY]
    assert meta.owner == method_owner("toy2") and (meta.low, meta.high) == (1, 9)


def test_a_key_declared_twice_or_read_undeclared_stops_the_import() -> None:
    with pytest.raises(ValueError, match="declared by both"):
        method_knobs([_toy(TWO), dataclasses.replace(_toy(TWO), name="toy3")])
    with pytest.raises(ValueError, match="no method declares"):
        method_knobs([_toy((), reads=("nothing",))])


def test_a_method_registered_at_run_time_declares_no_keys() -> None:
    with pytest.raises(AutotuneError, match="declares no config keys"):
        register_method(_toy(TWO))
    assert "toy2" not in KNOBS


def test_a_methods_scalar_bounds_are_checked_for_it_and_its_rules_run() -> None:
    # sglang_ngram declares bounds only; its rule between two keys is its `check`.
    with pytest.raises(AutotuneError, match="sglang_ngram_capacity=1 must be at least 2"):
        DecodeConfig(method="sglang_ngram", sglang_ngram_capacity=1).validate()
    DecodeConfig(method="ngram", sglang_ngram_capacity=1).validate()   # not its key
    with pytest.raises(AutotuneError, match="exceeds"):
        DecodeConfig(method="sglang_ngram", sglang_ngram_min_bfs_breadth=5,
                     sglang_ngram_max_bfs_breadth=2).validate()
    # A method's every-config rules hold under any method (as they always have).
    with pytest.raises(AutotuneError, match="suffix_max_tree_depth=0 must be at least 1"):
        DecodeConfig(method="ngram", suffix_max_tree_depth=0).validate()
    assert get_method("suffix").check_every_config is not None


def test_a_method_that_cannot_draft_a_tree_says_why_first() -> None:
    with pytest.raises(AutotuneError, match="SGLang's own tree"):
        DecodeConfig(method="sglang_ngram", tree_width=2, tree_depth=2).validate()
    with pytest.raises(AutotuneError, match="needs tree_depth"):
        DecodeConfig(method="sorted_exit", exits=(2,), tree_width=2).validate()


def test_cost_parts_written_before_method_parts_read_a_methods_part() -> None:
    parts = CostParts("f", {}, [[1, 1.0]], 0.5, 0.7, 0.2, 0.05, 0.02, 1.0,
                      LayerParts(2, 1.0, 0.1, 0.1, 0.01, 0.2, 0.01), None, None, {}, None,
                      {"suffix_speculate": 0.4})
    doc = parts.to_json()
    assert CostParts.from_json(doc) == parts
    old = {key: value for key, value in doc.items() if key != "method_parts"}
    assert CostParts.from_json({**old, "suffix_speculate": 0.4}) == parts
    assert CostParts.from_json({**old, "suffix_speculate": None}).method_parts == {}
    assert json.loads(json.dumps(doc))["method_parts"] == {"suffix_speculate": 0.4}



def test_the_method_knobs_restated_for_type_checkers_are_the_declared_ones():
    """DecodeConfig's `if TYPE_CHECKING:` block names every built-in method's knob with
    its type, in the order the class has them: a knob added, renamed or retyped in a
    method package without the block (or the other way round) fails here."""
    import ast
    import inspect

    from autotune.schema.config import DecodeConfig, method_knobs
    from autotune.schema.knobs import VALUE_TYPES
    from autotune.schema.methods import BUILTIN_METHODS, get_method

    tree = ast.parse(inspect.getsource(config_module))
    cls = next(node for node in tree.body
               if isinstance(node, ast.ClassDef) and node.name == "DecodeConfig")
    block = next(node for node in cls.body if isinstance(node, ast.If)
                 and ast.unparse(node.test) == "TYPE_CHECKING")
    restated = [(stmt.target.id, ast.unparse(stmt.annotation)) for stmt in block.body
                if isinstance(stmt, ast.AnnAssign)]
    declared = [(knob.name, VALUE_TYPES[knob.kind])
                for knob, _ in method_knobs([get_method(n) for n in BUILTIN_METHODS])]
    assert restated == declared
    assert {name for name, _ in declared} <= {f.name for f in dataclasses.fields(DecodeConfig)}
