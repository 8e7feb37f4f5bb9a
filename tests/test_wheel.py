"""The wheel a user installs: built from the source tree, it holds every package and data
file, and installed non-editable in a fresh venv (no source tree on the path) its
`autotune` command runs --help, a tiny `measure` and a tiny `search --fidelity multi` from a
folder outside the source tree.

The fresh venv reuses this environment's installed dependencies (torch and the rest)
through a `.pth` file naming a folder of links to them, with this environment's own
autotune (the editable install) left out, so nothing is downloaded."""

from __future__ import annotations

import csv
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from tiny import llama_model, save_tiny

ROOT = Path(__file__).resolve().parents[1]
# What the wheel is not built from: at the top, git, virtual environments, build outputs,
# caches and run folders; anywhere, compiled files.
TOP_LEVEL_SKIPS = shutil.ignore_patterns(".git", ".venv", "venv", "build", "dist", "*.egg-info",
                                         ".*cache", "reports")
# Repetitive prompts, so the n-gram drafter finds something to propose on a random model.
# Six, so that the search holds two out and measures its finalist on them.
PROMPTS = "".join(f"t{i} t{i + 1} t{i + 2} " * 3 + "\n" for i in range(1, 7))


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False,
                          **kwargs)
    assert done.returncode == 0, (f"{cmd} exited {done.returncode}\nstdout:\n"
                                  f"{done.stdout[-3000:]}\nstderr:\n{done.stderr[-5000:]}")
    return done


def _source_files() -> set[str]:
    """Every file of the package in the source tree, as a path inside the wheel."""
    return {path.relative_to(ROOT).as_posix() for path in (ROOT / "autotune").rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
            and not path.name.startswith(".") and path.suffix != ".pyc"}


def _packages(files: set[str]) -> set[str]:
    return {name.rsplit("/", 1)[0].replace("/", ".") for name in files
            if name.endswith("/__init__.py")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built without isolation (offline) from a copy of the source tree: a build
    in place would write build/ and *.egg-info into the checkout, and a stale build/lib
    there would slip removed modules into the wheel."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"

    def skip(folder: str, names: list[str]) -> set[str]:
        skipped = {name for name in names if name == "__pycache__" or name.endswith(".pyc")}
        return skipped | (TOP_LEVEL_SKIPS(folder, names) if Path(folder) == ROOT else set())

    shutil.copytree(ROOT, source, ignore=skip, symlinks=True)
    out = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "--disable-pip-version-check", "-q", "-w", str(out), str(source)])
    [built] = out.glob("autotune-*.whl")
    return built


def test_the_wheel_holds_every_package_and_data_file(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = {name for name in archive.namelist() if name.startswith("autotune/")}
        entry_points = next(name for name in archive.namelist()
                            if name.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    source = _source_files()
    missing = sorted(_packages(source) - _packages(names))
    assert not missing, f"packages left out of the wheel: {missing}"
    missing = sorted(source - names)
    assert not missing, f"files of the source tree left out of the wheel: {missing}"
    extra = sorted(names - source)
    assert not extra, f"files in the wheel that the source tree does not have: {extra}"
    data = {name for name in source if not name.endswith(".py")}
    # The spaces and objectives (*.yaml), the schemas (*.json) and the built-in prompts
    # (*.jsonl) are data files: the pattern that ships them must reach each kind.
    for suffix in (".yaml", ".json", ".jsonl"):
        assert any(name.endswith(suffix) for name in data), suffix
    assert "autotune = autotune.cli.main:main" in scripts


def _site_dirs() -> list[Path]:
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"]]
    return list(dict.fromkeys(Path(d).resolve() for d in dirs if Path(d).is_dir()))


def _ours() -> set[str]:
    """Top-level names in site-packages that belong to this environment's autotune (an
    editable install's finder and .pth, its dist-info, or a copied package)."""
    try:
        files = metadata.distribution("autotune").files or []
    except metadata.PackageNotFoundError:
        return set()
    return {file.parts[0] for file in files if file.parts and file.parts[0] != ".."}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A fresh venv (no pip of its own) that sees this environment's dependencies but
    not its autotune, and the environment its commands run in."""
    tmp = tmp_path_factory.mktemp("venv")
    home = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(home)])
    bin_dir = home / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / ("python.exe" if os.name == "nt" else "python")
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV",
                          "PYTHONSAFEPATH") and not key.startswith("PIP_")}
    env.update(VIRTUAL_ENV=str(home), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
               PYTHONNOUSERSITE="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", AUTOTUNE_CACHE=str(tmp / "cache"))
    # Links to everything installed here but our autotune; .pth files are left out, and a
    # folder named by a .pth line has none of its own .pth files run.
    ours = _ours()
    lines = []
    for number, directory in enumerate(_site_dirs()):
        deps = tmp / f"deps{number}"
        deps.mkdir()
        for entry in directory.iterdir():
            if entry.name in ours or entry.suffix == ".pth" or entry.name == "__pycache__":
                continue
            (deps / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        lines.append(str(deps))
    purelib = _run([str(python), "-c",
                    "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   env=env, cwd=tmp).stdout.strip()
    Path(purelib, "_outer_dependencies.pth").write_text("\n".join(lines) + "\n")
    return home, env


def test_the_installed_wheel_runs_from_outside_the_source_tree(wheel, venv, tmp_path):
    home, env = venv
    bin_dir = home / ("Scripts" if os.name == "nt" else "bin")
    python = str(bin_dir / ("python.exe" if os.name == "nt" else "python"))
    work = tmp_path / "elsewhere"
    work.mkdir()
    assert ROOT not in work.resolve().parents

    def run(*cmd: str) -> subprocess.CompletedProcess[str]:
        return _run(list(cmd), env=env, cwd=work)

    # Before the install the venv has its dependencies but no autotune.
    run(python, "-c", "import torch, transformers, optuna")
    before = subprocess.run([python, "-c", "import autotune"], capture_output=True, text=True,
                            env=env, cwd=work, timeout=120, check=False)
    assert before.returncode != 0 and "No module named 'autotune'" in before.stderr, before

    run(python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel))
    located = Path(run(python, "-c", "import autotune; print(autotune.__file__)").stdout.strip())
    assert located.resolve().is_relative_to(home.resolve()), located
    assert not located.resolve().is_relative_to(ROOT), located
    command = shutil.which("autotune", path=str(bin_dir))
    assert command and Path(command).resolve().is_relative_to(home.resolve())

    assert "search" in run(command, "--help").stdout

    save_tiny(llama_model(seed=5, layers=4, scale=4.0), work / "model")
    (work / "prompts.txt").write_text(PROMPTS)
    common = ["--model", "model", "--device", "cpu", "--workload", "prompts.txt"]

    measured = run(command, "measure", *common, "--prompts", "1", "--max-new-tokens", "6",
                   "--set", "method=ngram", "--json")
    summary = json.loads(measured.stdout)
    assert summary["prompts"] == 1 and summary["tokens_generated"] == 6

    searched = run(command, "search", *common, "--fidelity", "multi", "--space", "ngram",
                   "--screen", "4", "--trials", "2", "--prompts", "2",
                   "--validation-prompts", "2", "--finalists", "1", "--max-new-tokens", "8",
                   "--no-prune", "--out", "run")
    run_folder = work / "run"
    written = sorted(path.name for path in run_folder.iterdir())
    for name in ("best.json", "run.json", "trials.csv", "screen.csv", "report.html"):
        assert name in written, (name, written, searched.stderr[-3000:])
    with open(run_folder / "screen.csv", newline="") as screen:
        assert len(list(csv.DictReader(screen))) == 4          # the replay screen ran
    assert json.loads((run_folder / "best.json").read_text())
    run(command, "validate", str(run_folder / "best.json"))    # against the shipped schema
