"""The batched verify pass (B rows x n tokens per row) outside a search: `autotune profile
--batch-sizes` (its table, its -o document, its refusals) and the report's hardware panel
drawing the profile's "batch" entry.

Tiny random models on the CPU; timings are only checked to be what was printed and
written, never for speed (a shared machine)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_report_render import check_page, make_run
from test_report_tree import curve
from tiny import gpt2_model, llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)

import autotune.cli.profile as profile_cli
import autotune.models.loading as loading
from autotune.cli.main import main
from autotune.cli.profile import format_batch_profile, parse_batch_sizes
from autotune.measure.profile import DEFAULT_ROW_SIZES, DEFAULT_SIZES, PROFILE_FILE
from autotune.report import build_report, render_report
from autotune.report import panels as P

BATCH_KEYS = {"model", "device", "dtype", "context_tokens", "repeats", "batch_points"}


def batch_doc(ms: dict[tuple[int, int], float], context: int = 64) -> dict[str, Any]:
    """A "batch" entry as batch_forward_profile returns it, from {(B, n): ms}."""
    return {"model": "m", "device": "cpu", "dtype": "float32", "context_tokens": context,
            "repeats": 3,
            "batch_points": [{"batch_size": b, "tokens": n, "ms": v, "ms_min": v * 0.9}
                             for (b, n), v in sorted(ms.items())]}


def _cells(line: str) -> list[str]:
    return line.split()


# ------------------------------------------------------------------ the table

def test_batch_table_on_known_values() -> None:
    doc = batch_doc({(1, 1): 10.0, (2, 1): 11.0, (4, 1): 16.0,
                     (1, 4): 12.0, (2, 4): 14.0, (4, 4): 30.0})
    lines = format_batch_profile(doc).splitlines()
    assert _cells(lines[0]) == ["tokens/row", "B=1", "B=2", "B=4"]
    assert _cells(lines[1]) == ["1", "10.00", "11.00", "16.00"]
    assert _cells(lines[2]) == ["4", "12.00", "14.00", "30.00"]
    assert "after 64 context tokens, median of 3" in lines[4]
    # ms(B,1) / ms(1,1) and B / ms(B,1) * 1000: 1.00x 100, 1.10x 182, 1.60x 250.
    assert [line.strip() for line in lines[5:]] == [
        "1 row  cost 1.00x one row at 1 token; tokens/s ceiling of batched AR 100",
        "2 rows cost 1.10x one row at 1 token; tokens/s ceiling of batched AR 182",
        "4 rows cost 1.60x one row at 1 token; tokens/s ceiling of batched AR 250"]


def test_batch_table_without_the_one_row_point_says_so() -> None:
    doc = batch_doc({(2, 1): 11.0, (4, 1): 16.0, (4, 2): 20.0})
    lines = format_batch_profile(doc).splitlines()
    assert _cells(lines[2]) == ["2", "-", "20.00"]              # (2, 2) was not measured
    assert lines[-1] == "no 1-row, 1-token point: no batch size is compared with one row"
    assert "x one row" not in format_batch_profile(doc)


@pytest.mark.parametrize("text, expected", [("4,1,16", (1, 4, 16)), (" 2 , 8 ,", (2, 8))])
def test_batch_sizes_parse_sorted(text: str, expected: tuple[int, ...]) -> None:
    assert parse_batch_sizes(text) == expected


# ------------------------------------------------------------------ the CLI

@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    save_tiny(llama_model(seed=5, layers=2, scale=4.0), folder / "model")
    save_tiny(gpt2_model(seed=2, layers=1), folder / "gpt2")
    return folder


def test_cli_prints_the_batch_table_and_writes_it_under_batch(tiny_dir, tmp_path, capsys):
    out = tmp_path / "profile.json"
    model = str(tiny_dir / "model")
    assert main(["profile", "--model", model, "--device", "cpu", "--sizes", "2,1",
                 "--batch-sizes", "3,2", "--repeats", "1", "--context", "8", "-o", str(out)]) == 0
    printed = capsys.readouterr()
    assert "timing the batched verify pass for batch sizes 1,2,3 x 1..2 tokens per row" \
        in printed.err
    doc = json.loads(out.read_text())
    # The single-row curve is as without --batch-sizes; the batch part sits beside it.
    assert [p["tokens"] for p in doc["points"]] == [1, 2]
    batch = doc["batch"]
    assert set(batch) == BATCH_KEYS
    assert batch["model"] == model and batch["context_tokens"] == 8 and batch["repeats"] == 1
    # Batch size 1 is added as the reference; every (B, n) pair, by B then n.
    assert [(p["batch_size"], p["tokens"]) for p in batch["batch_points"]] == [
        (1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]
    for point in batch["batch_points"]:
        assert set(point) == {"batch_size", "tokens", "ms", "ms_min"}
        assert 0 < point["ms_min"] <= point["ms"] < 60_000
    # What was printed is the table of what was written, after the single-row table.
    table = format_batch_profile(batch)
    assert printed.out.endswith(table + "\n")
    assert printed.out.index("ms/token") < printed.out.index("tokens/row")
    ms = {(p["batch_size"], p["tokens"]): p["ms"] for p in batch["batch_points"]}
    row = next(line for line in printed.out.splitlines() if line.strip().startswith("3 rows"))
    assert f"cost {ms[(3, 1)] / ms[(1, 1)]:.2f}x one row" in row
    assert row.endswith(f"batched AR {3 / ms[(3, 1)] * 1000:.0f}")
    lines = printed.out.splitlines()
    head = next(i for i, line in enumerate(lines) if "tokens/row" in line)
    assert _cells(lines[head]) == ["tokens/row", "B=1", "B=2", "B=3"]
    for i, n in ((head + 1, 1), (head + 2, 2)):
        assert _cells(lines[i]) == [str(n), *(f"{ms[(b, n)]:.2f}" for b in (1, 2, 3))]

    # The same document in a run folder: the report draws the batch figures from it.
    run_dir = make_run(tmp_path)
    shutil.copy(out, run_dir / PROFILE_FILE)
    page = render_report(build_report(run_dir))
    assert check_page(page).figures["panel-hardware"] == 4
    assert "bare forward after 8 context tokens" in page


def test_cli_default_row_sizes_for_the_batch_part(tiny_dir, capsys, monkeypatch):
    """Without --sizes the batch part times DEFAULT_ROW_SIZES, not the 1..128 curve."""
    calls: dict[str, tuple] = {}

    def forward(target, sizes, context_tokens, repeats):
        calls["forward"] = (tuple(sizes), context_tokens, repeats)
        return {"model": target.name, "device": "cpu", "dtype": "float32",
                "context_tokens": context_tokens, "repeats": repeats,
                "points": [{"tokens": 1, "ms": 1.0, "ms_min": 1.0}]}

    def batched(target, batch_sizes, sizes, context_tokens, repeats):
        calls["batch"] = (tuple(batch_sizes), tuple(sizes), context_tokens, repeats)
        return batch_doc({(1, 1): 2.0, (4, 1): 4.0}, context_tokens)

    monkeypatch.setattr(profile_cli, "forward_cost_profile", forward)
    monkeypatch.setattr(profile_cli, "batch_forward_profile", batched)
    assert main(["profile", "--model", str(tiny_dir / "model"), "--device", "cpu",
                 "--batch-sizes", "4"]) == 0
    assert calls["forward"] == (DEFAULT_SIZES, 128, 3)
    assert calls["batch"] == ((1, 4), DEFAULT_ROW_SIZES, 128, 3)
    out = capsys.readouterr().out
    assert "4 rows cost 2.00x one row at 1 token; tokens/s ceiling of batched AR 1000" in out


def test_cli_refuses_a_model_on_hfs_forward_in_one_line(tiny_dir, tmp_path, capsys):
    out = tmp_path / "profile.json"
    model = str(tiny_dir / "gpt2")
    assert main(["profile", "--model", model, "--device", "cpu", "--sizes", "1,2",
                 "--batch-sizes", "2", "--repeats", "1", "--context", "8", "-o", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == ("autotune: error: the batch profile needs the compact Llama-family "
                       f"forward; {model} runs on HF's own forward")
    assert not out.exists()


@pytest.fixture
def no_loading(monkeypatch):
    def spy(*args, **kwargs):
        raise AssertionError(f"load_model reached with {args}")
    monkeypatch.setattr(loading, "load_model", spy)


@pytest.mark.parametrize("value, message", [
    ("1,x", "--batch-sizes '1,x' is not a comma-separated list of batch sizes"),
    ("1.5", "is not a comma-separated list of batch sizes"),
    ("0,2", "--batch-sizes: batch size 0 is not >= 1"),
    ("-3", "--batch-sizes: batch size -3 is not >= 1"),
    ("2,2", "--batch-sizes '2,2' lists a batch size twice"),
    (",", "--batch-sizes ',' lists no batch size"),
])
def test_cli_bad_batch_sizes_are_one_line_before_loading(value, message, capsys, no_loading):
    assert main(["profile", "--model", "any", "--sizes", "1,2", f"--batch-sizes={value}"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: ") and captured.out == ""
    assert message in lines[0]


# ------------------------------------------------------------------ the report panel

def with_batch(batch: Any) -> dict[str, Any]:
    doc = curve(top=16)
    doc["batch"] = batch
    return doc


def test_panel_reads_the_batch_points_and_says_where_batching_stops_amortising() -> None:
    # At 1 token: 10, 11, 12, 40 ms for 1, 2, 4, 8 rows: per row 10, 5.5, 3, 5 ms.
    ms = {(1, 1): 10.0, (2, 1): 11.0, (4, 1): 12.0, (8, 1): 40.0,
          (1, 4): 12.0, (2, 4): 13.0, (4, 4): 20.0, (8, 4): 80.0}
    hw = P.hardware.data(with_batch(batch_doc(ms)))
    assert hw.batch is not None and len(hw.batch) == 8
    assert list(hw.batch["batch_size"]) == [1, 1, 2, 2, 4, 4, 8, 8]
    assert list(hw.batch["tokens"]) == [1, 4] * 4
    assert list(hw.batch["ms_per_row"]) == pytest.approx([10, 12, 5.5, 6.5, 3, 5, 5, 10])
    assert hw.batch_info["context_tokens"] == "64"
    assert hw.batch_note == (
        "At 1 token per row, one pass over 2 / 4 / 8 rows costs 1.10x / 1.20x / 4.00x one "
        "row's (0.55x / 0.30x / 0.50x per row). From 4 to 8 rows the per-row cost falls by "
        "less than 10%: batching stops amortising there.")
    # The single-row part is what it is without "batch".
    plain = P.hardware.data(curve(top=16))
    assert hw.note == plain.note and hw.frame.equals(plain.frame)

    still = P.hardware.data(with_batch(batch_doc({(1, 1): 10.0, (2, 1): 11.0, (4, 1): 14.0})))
    assert still.batch_note.endswith("The per-row cost still falls at every step up to 4 rows.")


def test_panel_with_a_malformed_batch_entry_has_a_note_and_no_batch_figure() -> None:
    hw = P.hardware.data(with_batch({"batch_points": "many"}))
    assert hw.batch is not None and hw.batch.empty
    assert "has a \"batch\" entry with no valid point" in hw.batch_note
    html = P.hardware.render(hw)
    assert "fig-hardware-batch" not in html and "no valid point" in html
    doc = batch_doc({(1, 1): 10.0, (2, 1): 11.0})
    doc["batch_points"] += [{"batch_size": 0, "tokens": 1, "ms": 1.0},
                            {"batch_size": 2, "tokens": 1, "ms": 99.0},     # a repeat
                            {"batch_size": True, "tokens": 1, "ms": 1.0}, None]
    hw = P.hardware.data(with_batch(doc))
    assert len(hw.batch) == 2 and "4 malformed batch points left out" in hw.batch_note
    assert hw.batch.set_index("batch_size")["ms"][2] == 11.0


def test_panel_without_batch_is_drawn_as_before() -> None:
    plain = P.hardware.data(curve(top=16))
    assert plain.batch is None and plain.batch_note is None
    batched = P.hardware.data(with_batch(batch_doc({(1, 1): 10.0, (2, 1): 11.0})))
    before, after = P.hardware.render(plain), P.hardware.render(batched)
    assert "fig-hardware-batch" not in before and "Batched verify pass" not in before
    # With "batch" the section gains the batch block after the single-row note, nothing else.
    assert after == before.replace("\n</section>",
                                   P.hardware._batch_figures(batched) + "\n</section>")


def test_page_draws_the_batch_figures_only_with_batch(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    (run_dir / PROFILE_FILE).write_text(json.dumps(curve()))
    page = render_report(build_report(run_dir))
    assert check_page(page).figures["panel-hardware"] == 2
    assert 'id="fig-hardware-batch"' not in page and "Batched verify pass" not in page

    ms = {(b, n): 10.0 + b * n for b in (1, 2, 4) for n in (1, 2, 3)}
    (run_dir / PROFILE_FILE).write_text(json.dumps(with_batch(batch_doc(ms, context=96))))
    page = render_report(build_report(run_dir))
    assert check_page(page).figures["panel-hardware"] == 4
    for div in ('id="fig-hardware"', 'id="fig-hardware-per-token"', 'id="fig-hardware-batch"',
                'id="fig-hardware-batch-per-row"'):
        assert div in page
    assert ("one batched target pass over B rows x n tokens, bare forward after 96 context "
            "tokens; the batched decoder adds each row&#x27;s drafting and bookkeeping") in page
    assert '"name":"B=4"' in page and "ms per row (ms / B)" in page
