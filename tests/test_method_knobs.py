"""Every config key is declared once, as a field of DecodeConfig a type checker and a
reader see (issue 62): a method's own keys too (`own_knob`, owned by the method that
reads them), while `validate` asks the methods to check them, naming no method itself."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json

import pytest

from autotune.common.errors import AutotuneError
from autotune.schema import config as config_module
from autotune.schema.config import KNOBS, DecodeConfig
from autotune.schema.knobs import KNOB_METADATA_KEY, method_owner, own_knob
from autotune.schema.methods import builtin_methods, get_method
from autotune.replay.costs import CostParts, LayerParts


def _class_body() -> list[ast.stmt]:
    tree = ast.parse(inspect.getsource(config_module))
    return next(node for node in tree.body
                if isinstance(node, ast.ClassDef) and node.name == "DecodeConfig").body


def test_every_field_is_written_in_the_class() -> None:
    """What a type checker reads is what the dataclass has: each field an annotated
    assignment in the class body, in field order, nothing made at import, no
    `TYPE_CHECKING` restatement and no `__getattr__` that would hide a typo."""
    written = [stmt.target.id for stmt in _class_body()
               if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)]
    assert written == [f.name for f in dataclasses.fields(DecodeConfig)]
    assert not any(isinstance(stmt, ast.If) for stmt in _class_body())
    assert not hasattr(DecodeConfig, "__getattr__")


def test_a_methods_keys_are_owned_by_built_in_methods_declarer_first() -> None:
    owned = {name: knob.methods for name, knob in KNOBS.items() if knob.methods}
    assert len(owned) == 24
    assert {m for methods in owned.values() for m in methods} <= set(builtin_methods())
    # A key another method reads counts among that method's keys, after its declarer's.
    assert owned["exits"] == ("sorted_exit", "llama_draft")
    assert owned["ngram_min"] == ("ngram",)


def test_own_knob_is_a_field_with_its_methods_knob() -> None:
    made = own_knob(("toy", "reader"), "int", 3, "how deep", low=1, high=9)
    assert made.default == 3
    meta = made.metadata[KNOB_METADATA_KEY]
    assert meta.owner == method_owner("toy", "reader") == "method:toy,reader"
    assert (meta.kind, meta.methods, meta.low, meta.high) == ("int", ("toy", "reader"), 1, 9)


def test_validation_names_no_method() -> None:
    """The key declarations name their methods; no function of config.py does."""
    tree = ast.parse(inspect.getsource(config_module))
    functions = [node for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    said = {node.value for fn in functions for node in ast.walk(fn)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    named = said & (set(builtin_methods()) - {"none"})   # `none`: method's default
    assert not named, named


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
