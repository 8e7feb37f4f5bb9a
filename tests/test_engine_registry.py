"""Engines get one home per layer: each engine is one declared record in each layer's
registry (schema: `ENGINE_RECORDS`, exports: `FORMAT_RECORDS`, backends:
`BACKEND_RECORDS`, search: `TARGET_RECORDS`), and every other table of engine names is
read from them. Here: every engine named anywhere is declared where it must be, and the
derived tables agree with their records, so a new engine touches one place per layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autotune import backends, exports
from autotune.backends import BACKEND_RECORDS
from autotune.cli.parsers import options
from autotune.schema import engines
from autotune.schema.engines import ENGINE_RECORDS, ENGINES, PROVENANCE, RETIRED, RULES
from autotune.schema.methods import method_names
from autotune.exports import FORMAT_RECORDS
from autotune.runs import engine_exports
from autotune.search import targets
from autotune.search.targets import TARGET_RECORDS

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "autotune" / "space" / "presets"


def test_each_layer_declares_every_engine_once() -> None:
    """The decoder's engines are the backends' and the targets' (a backend record with
    no opener says that none measures in it); every engine but ours is answered by
    `--target all` and exported under its own name."""
    assert list(ENGINES) == list(ENGINE_RECORDS)
    assert set(BACKEND_RECORDS) == set(ENGINE_RECORDS)
    assert list(TARGET_RECORDS) == list(ENGINE_RECORDS)      # the summary's order
    for registry in (ENGINE_RECORDS, BACKEND_RECORDS, TARGET_RECORDS, FORMAT_RECORDS):
        assert not set(registry) & set(RETIRED)
    assert set(targets.ANSWERED) <= set(FORMAT_RECORDS)
    assert set(targets.ANSWERED) == set(ENGINES) - {targets.DEFAULT_TARGET}


def test_each_record_is_keyed_by_its_own_name() -> None:
    for name, engine in ENGINE_RECORDS.items():
        assert engine.name == engine.rules.name == name
        assert engine.rules.engine == ""                   # an engine's own rules
        if engine.provenance is not None:
            assert engine.provenance.engine == name
            assert engine.provenance.label == engine.rules.label
    for name, record in BACKEND_RECORDS.items():
        assert record.engine == name
    for name, target in TARGET_RECORDS.items():
        assert target.engine == name
    for name, fmt in FORMAT_RECORDS.items():
        assert fmt.module.NAME == name and fmt.title


def test_rules_and_runners_come_from_the_engine_records() -> None:
    """RULES holds each engine's own rules and its runners' (each naming its engine),
    and `rules_for` picks a runner's rules only on the device its record names."""
    runners = {rules.name: (name, device) for name, engine in ENGINE_RECORDS.items()
               for device, rules in engine.runners}
    assert set(RULES) == set(ENGINES) | set(runners)
    assert not set(ENGINES) & set(runners)
    for runner, (name, device) in runners.items():
        assert RULES[runner].engine == name and RULES[runner].family == name
        assert RULES[runner].runner and RULES[runner].runner != ENGINES[name].runner
        assert engines.rules_for(name, device) == runner
    for name in ENGINES:
        assert engines.rules_for(name, "no such device") == name
    assert engines.rules_for("vllm", "cpu") == "vllm_v1"
    assert engines.rules_for("vllm", "cuda") == "vllm"


def test_provenance_is_every_exported_engines_and_draft_and_verifys() -> None:
    """Every format names what of it was read: an engine's in its record, Draft & Verify's
    (a format, no engine) beside them."""
    declared = {name for name, engine in ENGINE_RECORDS.items() if engine.provenance}
    assert set(PROVENANCE) == set(FORMAT_RECORDS)
    assert set(PROVENANCE) - declared == {"dv"}
    assert ENGINE_RECORDS[targets.DEFAULT_TARGET].provenance is None


def test_formats_run_known_rules_and_their_tables_agree() -> None:
    assert exports.FORMATS == tuple(FORMAT_RECORDS)
    assert set(exports.TITLES) == set(exports.FORMAT_ENGINES) == set(FORMAT_RECORDS)
    for name, fmt in FORMAT_RECORDS.items():
        assert exports.FORMAT_ENGINES[name] == fmt.module.RULES in ENGINES
        assert exports.TITLES[name] == fmt.title
        # An engine's own format runs that engine's rules.
        if name in ENGINES:
            assert fmt.module.RULES == name


def test_backend_tables_agree_with_their_records() -> None:
    openable = [name for name, record in BACKEND_RECORDS.items() if record.opener]
    assert backends.BACKENDS[0] == targets.DEFAULT_TARGET
    assert set(backends.BACKENDS) == set(openable)
    assert backends.ENGINE_BACKENDS == backends.BACKENDS[1:]
    for name, record in BACKEND_RECORDS.items():
        assert backends.measured_methods(name) == record.methods
        assert record.methods is None or set(record.methods) <= set(method_names())
    assert backends.engine_cost("no such engine") == backends.EngineCost()


def test_the_exports_gpu_notes_come_from_the_records() -> None:
    assert engine_exports._GPU_ENGINES == tuple(
        name for name, engine in ENGINE_RECORDS.items() if engine.serves_on_gpu)
    assert set(engine_exports._CPU_BUILDS) == {
        name for name in engine_exports._GPU_ENGINES if BACKEND_RECORDS[name].on_cpu}
    assert engine_exports._CPU_BUILDS == ("vllm",)


def test_the_cli_choices_are_the_registries() -> None:
    assert options.TARGETS == targets.TARGETS == (targets.ALL_TARGETS, *ENGINES)
    assert options.BACKENDS == backends.BACKENDS
    assert options.FORMATS == exports.FORMATS


@pytest.mark.parametrize("engine", list(TARGET_RECORDS))
def test_every_targets_spaces_ship(engine: str) -> None:
    record = TARGET_RECORDS[engine]
    assert (PRESETS / f"{targets.default_space(engine)}.yaml").is_file()
    if record.answered:
        assert (PRESETS / f"{targets.engine_space(engine)}.yaml").is_file()


# The tables that used to restate engine names (backends' ENGINE_BACKENDS and costs,
# exports' FORMATS, _MODULES and TITLES, the CLI's choices, --target all's ANSWERED, the
# exports' GPU engines) are read from the registries now; no module under autotune/
# holds a literal tuple, list, set or dict keyed by two or more engine names, so a new
# engine never has a table to find (a rule naming one engine is no table).
def test_no_module_restates_a_table_of_engines() -> None:
    names = set(ENGINES) | set(FORMAT_RECORDS)
    tables = []
    for path in sorted((ROOT / "autotune").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                items = node.elts
            elif isinstance(node, ast.Dict):
                items = [k for k in node.keys if k is not None]
            else:
                continue
            spelled = [i.value for i in items
                       if isinstance(i, ast.Constant) and i.value in names]
            if len(spelled) > 1:
                tables.append((str(path.relative_to(ROOT)), node.lineno, spelled))
    assert not tables, tables
