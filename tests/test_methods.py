"""The method registry as the decoder and the agreement proxy use it: every built-in's
drafter and scorer resolve, drafters implement the declared interfaces, and a toy
drafter runs through the decoder with one registration and nothing else. Every built-in
lives in its own package (autotune/methods/<name>/), listed once in
`autotune.methods.BUILTINS` and reached by static imports (issue 62), and the shared
replay machinery branches on no method's name."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)
from toy_drafter import RepeatLast, toy  # noqa: F401  (fixture)

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.decoding.drafters.base import Drafter, TreeHooks
import autotune.methods
from autotune.schema.methods import (
    MethodSpec,
    builtin_methods,
    get_method,
    register_method,
    tree_method_names,
    unregister_method,
)
from autotune.measure.agreement import teacher_forced_agreement
from autotune.methods.none.drafter import NoDraft
from autotune.replay.draft_cost import DraftCost

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", builtin_methods())
def test_builtin_drafter_and_scorer_strings_resolve(name):
    spec = get_method(name)
    drafter = spec.drafter_class()
    assert inspect.isclass(drafter) and issubclass(drafter, Drafter)
    assert not inspect.isabstract(drafter), f"{drafter.__name__} leaves methods abstract"
    # Drafters that may draft a tree implement the tree hooks, and only they.
    assert issubclass(drafter, TreeHooks) == spec.can_tree
    scorer = spec.scorer_factory()
    if name == "none":
        assert scorer is None                  # nothing drafted, nothing to score
    else:
        assert callable(scorer)
        assert list(inspect.signature(scorer).parameters) == ["target", "config", "draft"]


def test_the_baseline_is_its_own_drafter():
    assert get_method("none").drafter_class() is NoDraft
    assert inspect.isabstract(Drafter)         # the base class no longer doubles as `none`
    assert tree_method_names() == ("draft_model", "layer_skip", "sorted_exit", "eagle",
                                   "medusa")


def test_a_registered_toy_drafter_decodes_losslessly(toy):
    target = tiny_llama(seed=0, layers=2, vocab=32)
    prompt = [3, 3, 3, 5, 5, 5, 5]
    expected = SpeculativeDecoder(target, DecodeConfig()).generate(
        prompt, 20, time.perf_counter).tokens
    out = SpeculativeDecoder(target, DecodeConfig(method="repeat_last", k=3)).generate(
        prompt, 20, time.perf_counter)
    assert out.tokens == expected
    assert any(r.drafted for r in out.rounds)


def test_a_toy_without_tree_support_is_refused_a_tree(toy):
    with pytest.raises(AutotuneError, match="method=repeat_last cannot draft a tree: .*"
                       "only draft_model, layer_skip, sorted_exit, eagle, medusa give"):
        DecodeConfig(method="repeat_last", tree_width=2, tree_depth=2).validate()


def test_a_toy_claiming_trees_without_hooks_is_refused():
    spec = register_method(MethodSpec("repeat_tree", label="x", color="#000000",
                                      drafter=lambda: RepeatLast, can_tree=True))
    try:
        decoder = SpeculativeDecoder(tiny_llama(seed=0, layers=2, vocab=32),
                                     DecodeConfig(method="repeat_tree", tree_width=2,
                                                  tree_depth=2))
        with pytest.raises(AutotuneError, match="no tree hooks"):
            decoder.generate([1, 2, 3], 4, time.perf_counter)
    finally:
        unregister_method(spec.name)


def test_unknown_method_lists_the_registered_ones(toy):
    with pytest.raises(AutotuneError, match=r"method='hydra' is not one of none, .*repeat_last"):
        DecodeConfig(method="hydra").validate()


def test_a_method_without_scorer_agrees_nowhere(toy):
    target = tiny_llama(seed=0, layers=2, vocab=32)
    ids = [1, 2, 3, 4, 5, 6]
    assert teacher_forced_agreement(target, DecodeConfig(method="repeat_last"),
                                    [(2, ids)]) == (0, 3)


@pytest.mark.parametrize("name", builtin_methods())
def test_a_builtin_lives_in_its_own_package(name):
    spec = get_method(name)
    assert importlib.import_module(f"autotune.methods.{name}").SPEC is spec
    # Each part is reached by a loader of the package, which imports it from a module
    # of the package by name (no "module:attribute" string, issue 62).
    parts = [spec.drafter, spec.scorer, spec.replay, spec.draft_cost, spec.shared_state]
    for part in filter(None, parts):
        assert callable(part) and part.__module__ == f"autotune.methods.{name}", part
        assert part().__module__.startswith(f"autotune.methods.{name}."), part
    cost = spec.draft_cost_class()
    assert cost is None or issubclass(cost, DraftCost)
    assert spec.about, "the README's methods table needs a line on what it is"


def test_the_registry_lists_the_method_packages():
    folders = {path.parent.name for path in (ROOT / "autotune" / "methods").glob("*/__init__.py")}
    assert set(builtin_methods()) == folders
    assert builtin_methods()[0] == "none"          # the baseline leads every list
    assert builtin_methods() == tuple(spec.name for spec in autotune.methods.BUILTINS)


def test_any_first_import_finds_the_built_ins_registered():
    """The package root imports the list, so a process whose first import is the
    registry itself (a worker, a script) finds every built-in, and nothing of the
    methods' code (torch) is loaded to list them."""
    code = ("import sys; from autotune.schema.methods import builtin_methods; "
            "print(len(builtin_methods()), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    assert out == [str(len(autotune.methods.BUILTINS)), "False"]


def test_methods_are_wired_by_imports_a_tool_follows():
    """No module of the schema loads a module by name, and no method names its code by
    a "module:attribute" string (issue 62): import-linter and a reader see every edge."""
    for path in (ROOT / "autotune" / "schema").glob("*.py"):
        assert "importlib" not in path.read_text(), path
    named = re.compile(r"""["'][\w.]+:[A-Za-z_]\w*["']|\{__name__\}\.""")
    for path in (ROOT / "autotune" / "methods").rglob("*.py"):
        assert not named.search(path.read_text()), path


def test_the_shared_replay_code_branches_on_no_method_name():
    """A method's replay and draft cost are its own (its package's replay.py): the
    shared modules ask the registry, never compare a config's method with a name."""
    branch = re.compile(r"method\s*(==|!=|not in|in)\s*[(\"']")
    shared = [*(ROOT / "autotune" / "replay").glob("*.py"),
              ROOT / "autotune" / "measure" / "agreement.py"]
    found = [f"{path.name}:{n}" for path in shared
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if branch.search(line)]
    assert not found, found

