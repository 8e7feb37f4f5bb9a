"""The import contract of pyproject.toml ([tool.importlinter]) holds, and its layers place
every top-level part of the package: a new subpackage must be put in a layer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:                                  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"


def _config() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]


def test_the_import_contracts_are_kept():
    """import-linter over the source tree (cwd is the root, first on the path)."""
    code = ("import sys; from importlinter.cli import lint_imports_command; "
            "sys.exit(lint_imports_command())")
    done = subprocess.run([sys.executable, "-c", code, "--no-cache", "--no-logo", str(PYPROJECT)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, (f"lint-imports exited {done.returncode}:\n"
                                  f"{done.stdout}{done.stderr}")
    assert "broken" in done.stdout and " 0 broken" in done.stdout, done.stdout


def _layer_modules(contract: dict) -> set[str]:
    """The modules a layers contract names: siblings split on "|" (independent) or ":",
    optional ones in parentheses, each under every container when there are some."""
    names = set()
    for layer in contract["layers"]:
        for part in re.split(r"[|:]", layer):
            name = part.strip().strip("()").strip()
            if name:
                names.add(name)
    containers = contract.get("containers") or []
    if containers:
        names = {f"{container}.{name}" for container in containers for name in names}
    return names


def _top_level_parts(package: str) -> set[str]:
    """Subpackages (folders with __init__.py) and modules directly under the package."""
    folder = ROOT / package
    parts = {path.parent.name for path in folder.glob("*/__init__.py")}
    parts |= {path.stem for path in folder.glob("*.py")
              if path.stem not in ("__init__", "__main__")}
    return {f"{package}.{name}" for name in parts}


def test_the_layers_place_every_top_level_package():
    config = _config()
    root = config["root_package"]
    layered = [c for c in config["contracts"] if c.get("type") == "layers"]
    assert layered, "no layers contract in [tool.importlinter]"
    named = set().union(*(_layer_modules(contract) for contract in layered))
    top = {name for name in named if name.count(".") == 1 and name.startswith(f"{root}.")}
    parts = _top_level_parts(root)
    assert sorted(parts - top) == [], "not placed in a layer of pyproject.toml's contract"
    assert sorted(top - parts) == [], "named in a layer but not a package of the tree"
