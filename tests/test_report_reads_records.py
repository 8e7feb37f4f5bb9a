"""The report reads records only (issue 62): no module under `autotune/report/` imports
anything of `autotune.measure`, `autotune.search` or `autotune.decoding`, at module level,
inside a function or under `TYPE_CHECKING`.

The report draws a run from what the run kept (the study's records in `autotune.records`,
best.json's in `autotune.frozen`, the run folder's documents); the code that measured,
searched or decoded it stays out, so a change there cannot change a report and the
report's reader need not read it. This test parses every report module's source (so a
function-level import counts, which importing the module would not run);
`pyproject.toml`'s forbidden contract (`lint-imports`) adds the paths through other
modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "autotune" / "report"
FORBIDDEN = ("autotune.measure", "autotune.search", "autotune.decoding")


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) for every import statement in `path`, wherever it stands; a
    relative import resolved against the module's package, and `from pkg import name`
    counted as `pkg.name` too (it may name a submodule)."""
    package = _module_name(path, root)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _forbidden(module: str) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in FORBIDDEN)


REPORT_MODULES = sorted(REPORT.rglob("*.py"))


def test_the_report_has_modules_to_check():
    """The walk finds the report (a moved folder must not make the test below vacuous)."""
    assert len(REPORT_MODULES) > 20
    assert (REPORT / "panels" / "top.py") in REPORT_MODULES


@pytest.mark.parametrize("path", REPORT_MODULES, ids=lambda p: str(p.relative_to(REPORT)))
def test_a_report_module_imports_no_measuring_searching_or_decoding_code(path: Path):
    bad = [f"{path.relative_to(ROOT)}:{line}: {module}"
           for line, module in _imported(path) if _forbidden(module)]
    assert bad == [], ("the report reads records (autotune.records, autotune.frozen), "
                       "never measure/, search/ or decoding/:\n" + "\n".join(bad))


def test_the_check_sees_imports_inside_functions_and_relative_ones(tmp_path: Path):
    """The parser the test relies on finds a function-level and a relative import."""
    package = tmp_path / "autotune" / "report"
    package.mkdir(parents=True)
    module = package / "probe.py"
    module.write_text("def f():\n    from autotune.search.finalists import answer\n"
                      "    from ..measure import summary\n", encoding="utf-8")
    found = [name for _, name in _imported(module, tmp_path)]
    assert "autotune.search.finalists" in found
    assert "autotune.measure.summary" in found
    assert all(_forbidden(name) for name in ("autotune.search.finalists.answer",
                                             "autotune.measure", "autotune.decoding.decoder"))
    assert not _forbidden("autotune.searching") and not _forbidden("autotune.records.answer")
