"""README.md's table of drafting methods against the registry: a method added, renamed
or taught to an engine without the README fails here, with the block to paste
(`python -m autotune.methods.table` prints it)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from toy_drafter import TOY, toy  # noqa: F401  (fixture)

from autotune.schema.methods import builtin_methods
from autotune.exports import FORMATS
from autotune.methods.table import (
    BEGIN,
    END,
    HEADER,
    block,
    engines,
    readme_block,
    table,
)

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_holds_the_generated_methods_table() -> None:
    held = readme_block(README.read_text(encoding="utf-8"))
    assert held is not None, f"README.md has no methods table; paste:\n{block()}"
    assert held == block(), f"README.md's methods table is out of date; replace it with:\n{block()}"


def test_the_block_is_read_between_its_markers() -> None:
    text = "\n".join(["intro", BEGIN, "| a | b |", END, "after"])
    assert readme_block(text) == "\n".join([BEGIN, "| a | b |", END])
    assert readme_block("no table here") is None
    assert readme_block(block()) == block()


def test_rows_render_from_the_registry_and_the_exporters() -> None:
    lines = table().splitlines()
    assert lines[0] == HEADER and len(lines) == 2 + len(builtin_methods())
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert [row[0] for row in cells] == [f"`{name}`" for name in builtin_methods()]
    needs = {row[0].strip("`"): row[2] for row in cells}
    assert needs["none"] == needs["layer_skip"] == needs["ngram"] == "no"
    assert needs["draft_model"] == "yes: a model"
    assert needs["sorted_exit"] == "no (optional: a model, or a train-draft folder)"
    assert needs["eagle"] == needs["medusa"] == "yes: a train-draft folder"
    trees = {row[0].strip("`"): row[3] for row in cells}
    assert [name for name, tree in trees.items() if tree == "yes"] == [
        "draft_model", "layer_skip", "sorted_exit", "eagle", "medusa"]
    # The engines column is each exporter's own METHODS list.
    for name in builtin_methods():
        listed = [fmt for fmt in FORMATS
                  if name in importlib.import_module(f"autotune.exports.{fmt}").METHODS]
        assert list(engines(name)) == listed
    assert engines("layer_skip") == ("dv",)


@pytest.mark.usefixtures("toy")
def test_a_method_registered_at_run_time_is_no_builtin_row() -> None:
    assert TOY not in table()
