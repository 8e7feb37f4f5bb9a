"""The README's table of drafting methods, generated from the method registry.

README.md keeps it between `<!-- methods:begin -->` and `<!-- methods:end -->`, so a
method added, renamed or taught to a new engine cannot leave the README behind:
tests/test_method_table.py compares the two and prints the block to paste, and
`python -m autotune.methods.table` prints it. One row per built-in method, in registry
order; the engines that run a method are the export formats whose module lists it
(`METHODS` in autotune/exports/<format>.py).
"""

from __future__ import annotations

from autotune.exports import FORMAT_RECORDS
from autotune.schema.methods import MethodSpec, builtin_methods, get_method
from autotune.models.drafter_folder import KINDS, served_method

BEGIN = "<!-- methods:begin -->"
END = "<!-- methods:end -->"
HEADER = "| method | what it is | needs `--draft` | can draft a tree | engines that run it |"


def engines(name: str) -> tuple[str, ...]:
    """The export formats (`autotune export --format`) whose engine runs method `name`."""
    return tuple(fmt for fmt, record in FORMAT_RECORDS.items() if name in record.module.METHODS)


def _draft_column(spec: MethodSpec) -> str:
    """What `--draft` it needs: a model, a trained drafter's folder, or nothing (and what
    it takes when given)."""
    if spec.needs_draft:
        return "yes: a train-draft folder" if spec.reads_target_features else "yes: a model"
    if spec.uses_draft:
        trained = any(served_method(kind) == spec.name for kind in KINDS)
        return f"no (optional: a model{', or a train-draft folder' if trained else ''})"
    return "no"


def row(spec: MethodSpec) -> str:
    """One method's row."""
    if not spec.drafts:           # the baseline: every engine, speculation off
        run_by = "every engine (no speculation)"
    else:
        run_by = ", ".join(f"`{fmt}`" for fmt in engines(spec.name)) or "autotune only"
    tree = "yes" if spec.can_tree else "always, its own" if spec.own_trees else "no"
    return (f"| `{spec.name}` | {spec.about} | {_draft_column(spec)} | {tree} | "
            f"{run_by} |")


def table() -> str:
    """The table, one row per built-in method."""
    return "\n".join([HEADER, "|---|---|---|---|---|",
                      *(row(get_method(name)) for name in builtin_methods())])


def block() -> str:
    """The table between its markers, as README.md holds it."""
    return "\n".join([BEGIN, table(), END])


def readme_block(text: str) -> str | None:
    """The block README text holds, markers included; None when it has none."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start:end + len(END)]


if __name__ == "__main__":
    print(block())
