"""What a light command imports: `autotune --help`, argument errors and `autotune validate`
of a space must not load torch or transformers (seconds of start-up for nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "transformers")
ROOT = Path(__file__).resolve().parents[1]


def _imported(code: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """Top-level modules that `python -X importtime -c code` imported, and the process."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "autotune" in names, done.stderr[-2000:]
    return names, done


def test_importing_the_cli_loads_no_model_library():
    names, done = _imported("import autotune.cli.main")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not names & set(HEAVY), sorted(names & set(HEAVY))


@pytest.mark.parametrize("path,kind", [("autotune/space/presets/joint.yaml", "search space"),
                                       ("autotune/space/presets/tree.yaml", "search space"),
                                       ("autotune/records/objective_presets/latency_memory.yaml", "objective")])
def test_validating_a_space_or_objective_loads_no_model_library(path, kind):
    names, done = _imported("import sys; from autotune.cli.main import main; "
                            f"sys.exit(main(['validate', {str(ROOT / path)!r}]))")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"valid {kind}" in done.stdout
    assert not names & set(HEAVY), sorted(names & set(HEAVY))


def test_help_loads_no_model_library():
    names, done = _imported("import sys; from autotune.cli.main import main; "
                            "sys.exit(main(['search', '--help']))")
    assert done.returncode == 0 and "--sampler" in done.stdout
    assert not names & set(HEAVY), sorted(names & set(HEAVY))


def test_the_public_api_resolves_on_first_use():
    code = ("import sys, autotune; assert 'torch' not in sys.modules; "
            "from autotune import AutotuneError, DecodeConfig, LoadedModel, SpeculativeDecoder, "
            "load_model; assert sorted(autotune.__all__) == sorted(['AutotuneError', "
            "'DecodeConfig', 'LoadedModel', 'SpeculativeDecoder', 'load_model']); "
            "assert autotune.DecodeConfig is DecodeConfig and DecodeConfig().method == 'none'; "
            "print(SpeculativeDecoder.__module__)")
    names, done = _imported(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "autotune.decoding.decoder"
    assert "torch" in names                     # the decoder itself does need it


@pytest.mark.parametrize("package", ["autotune.schema", "autotune.records", "autotune.report",
                                     "autotune.exports"])
def test_the_schema_report_and_exporters_load_no_model_library(package):
    """Every module of the schema, the run's records, the report and the exporters, with
    the method registry filled (each method package's `__init__`): reading a config or a
    run's records, drawing a report or writing an engine's file needs no model library
    (issues 54, 62)."""
    code = ("import importlib, pkgutil; "
            f"package = importlib.import_module({package!r}); "
            "[importlib.import_module(m.name) for m in "
            "pkgutil.walk_packages(package.__path__, package.__name__ + '.')]; "
            "from autotune.schema.methods import all_methods; assert all_methods(); "
            "from autotune.schema.config import DecodeConfig; DecodeConfig(method='ngram')")
    names, done = _imported(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not names & set(HEAVY), sorted(names & set(HEAVY))
