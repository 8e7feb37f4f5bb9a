"""Golden outputs: the files a run writes stay byte-identical on the same study.

`tests/golden/<case>/run/` is a finished `--target all` run folder on the tiny
random-weight Llama (its study journal, gzipped; run.json; the hardware profile; no
weights), made once by `tests/golden/make_golden.py`: `all-engines`, where every answer
speculates (HF raced in itself, a K schedule), and `no-gain`, where the answers are "do
not speculate" and "undecided". Every output is re-rendered from it here with the real
writers (`tests/golden/render.py`: `write_run_files`, `print_summary`, `write_report`,
`write_engine_exports`, `write_exports` with `ranked_documents`, `autotune export` for
every format) and compared with `tests/golden/<case>/expected/`, made by the code of the
time. A refactor of the records between the study and best.json (issue 54) must leave
every one of them as it was.

Normalised before comparing, and only this (render.py says how):
- best.json: each answer's `provenance.created` is the wall-clock second the document
  was built (frozen/document.py), so a render's own; it is checked to be ISO seconds in
  UTC and replaced by a marker. The validation's `created` (from the study) stays.
- report.html: plotly.js's inlined source (4.6 MB of the installed plotly's library, not
  autotune's output) is replaced by a marker. The figures' data and layout JSON, the
  panels' text and the dates shown (the study's and run.json's, stored in the fixture)
  are compared as written.
- trials.csv: not normalised, but rendered with TZ=UTC: its `started` column is the
  trial's start in the reading machine's local time (Optuna hands the journal's UTC
  stamp back as naive local time), so another zone would give another file.
- summary.txt: print_summary's stdout without its timing: the stderr line (this run's
  seconds) is not captured and the outcome has no stages or budget lines; the last line's
  run folder and file list are fixed placeholders (the pipeline's bookkeeping).
Nothing else varies: a render writes no path of its own (`autotune export` runs inside
the run folder on `best.json`).

A failure here means an output changed. If the change is intended, regenerate with
`python tests/golden/make_golden.py --expected-only` and say so in the commit; if not,
the refactor broke compatibility with files the previous release wrote or read.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from golden.render import CASES, expected_outputs, fixture_run, output_files, render_outputs

# (case, file) for every expected file: one test each, so a failure names the file.
FILES = [(case, name) for case in CASES for name in output_files(expected_outputs(case))]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each case's outputs, rendered once for the module (a few seconds each)."""
    return {case: render_outputs(fixture_run(case), tmp_path_factory.mktemp(case) / "work")
            for case in CASES}


def _difference(name: str, expected: bytes, got: bytes) -> str:
    """Where the two first differ (with the text around it on both sides: the report's
    figure JSON sits on lines of many kB), then a short unified diff of the lines."""
    at = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b),
              min(len(expected), len(got)))
    try:
        old, new = expected.decode("utf-8"), got.decode("utf-8")
    except UnicodeDecodeError:
        return f"{name}: bytes differ from offset {at}"
    line = expected.count(b"\n", 0, at) + 1
    window = slice(max(0, at - 150), at + 150)
    head = (f"{name}: first difference at byte {at} (line {line}):\n"
            f"  expected: ...{expected[window].decode('utf-8', 'replace')!r}...\n"
            f"  rendered: ...{got[window].decode('utf-8', 'replace')!r}...")
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(),
                                      f"expected/{name}", f"rendered/{name}", lineterm="", n=1))
    shown = [text if len(text) < 300 else text[:300] + " ..." for text in lines[:40]]
    return "\n".join([head, *shown]) + ("\n..." if len(lines) > 40 else "")


@pytest.mark.parametrize("case", CASES)
def test_the_fixture_is_small_and_holds_no_weights(case: str):
    files = list(fixture_run(case).iterdir())
    assert {f.name for f in files} >= {"run.json", "study.journal.gz"}
    assert not any(f.suffix in (".safetensors", ".bin", ".gguf", ".pt") for f in files)
    assert sum(f.stat().st_size for f in files) < 1_000_000


@pytest.mark.parametrize("case", CASES)
def test_the_same_files_are_written(rendered: dict[str, Path], case: str):
    assert output_files(rendered[case]) == output_files(expected_outputs(case))


@pytest.mark.parametrize(("case", "name"), FILES, ids=[f"{c}/{n}" for c, n in FILES])
def test_each_file_is_byte_identical(rendered: dict[str, Path], case: str, name: str):
    expected = (expected_outputs(case) / name).read_bytes()
    got = (rendered[case] / name).read_bytes()
    assert got == expected, _difference(f"{case}/{name}", expected, got)
