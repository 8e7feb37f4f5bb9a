"""The report in a real browser: a search on a tiny model writes `report.html`; headless
Chromium opens it with the network off; every panel must render (a plot, a table, or
its note saying why there is no data), the page must log no script error and fetch
nothing. The screenshot is kept in the test's temporary folder (path printed)."""

from __future__ import annotations

import json
import os

import pytest
from browser import check_page, find_browser
from tiny import llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)

from autotune.cli.main import main
from autotune.frozen.checks import problems

REQUIRED = os.environ.get("AUTOTUNE_REQUIRE_BROWSER") == "1"


@pytest.fixture(scope="module")
def browser():
    if find_browser() is None:
        if REQUIRED:
            pytest.fail("AUTOTUNE_REQUIRE_BROWSER=1 but chromium/chromedriver are missing")
        pytest.skip("chromium and chromedriver not installed (Debian: chromium chromium-driver)")
    pytest.importorskip("selenium")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished search on the joint space (tiny Llama, 4 layers): every method's
    trials, presets, pruning, finalists re-measured on a held-out prompt file, and the
    files written at its end."""
    root = tmp_path_factory.mktemp("report")
    model = save_tiny(llama_model(seed=3, layers=4, scale=4.0), root / "llama")
    prompts = root / "prompts.txt"
    prompts.write_text("t1 t2 t3 t4 t1 t2 t3\nt5 t6 t7 t5 t6 t7\nt8 t9 t8 t9 t8\n")
    held_out = root / "held_out.txt"
    held_out.write_text("t2 t3 t4 t2 t3 t4\nt6 t7 t8 t6 t7\nt9 t1 t9 t1 t9\n")
    out = root / "run"
    code = main(["search", "--model", str(model), "--device", "cpu", "--workload", str(prompts),
                 "--validation", str(held_out), "--max-new-tokens", "8", "--trials", "12",
                 "--no-prune", "--out", str(out), "--seed", "1", "--fidelity", "measure"])
    assert code == 0
    return out


def test_search_leaves_report_exports_and_a_valid_best_json(run_dir):
    names = {p.name for p in run_dir.iterdir()}
    assert {"best.json", "report.html", "exports", "run.json", "trials.csv"} <= names
    best = json.loads((run_dir / "best.json").read_text())
    assert problems(best) == []
    assert best["validation"]["prompts"] == 3        # the held-out file, re-measured
    readme = (run_dir / "exports" / "README.txt").read_text()
    # Every format is either written or says why not.
    for fmt in ("vllm", "sglang", "hf", "trtllm", "dv"):
        assert f"{fmt}:" in readme


def test_report_renders_every_panel_offline_without_script_errors(browser, run_dir):
    shot = run_dir / "report.png"
    page = check_page(run_dir / "report.html", shot)
    print(f"\nscreenshot: {shot} ({page.height}px)")
    assert page.errors == []
    assert [url for url in page.fetched if not url.startswith("file:")] == []
    assert page.panels and "empty" not in page.panels.values(), page.panels
    # The panels that have data in any finished search must be plots, not notes.
    for panel in ("panel-history", "panel-knobs", "panel-parallel", "panel-finalists"):
        assert page.panels.get(panel) == "plot", (panel, page.panels)
    assert shot.stat().st_size > 50_000


def test_a_broken_page_is_caught(browser, tmp_path):
    """The check itself can fail: a script error and an empty panel are both seen."""
    html = tmp_path / "broken.html"
    html.write_text("<html><body><section class='panel' id='panel-x'><h2>x</h2></section>"
                    "<script>notDefined()</script></body></html>")
    page = check_page(html, tmp_path / "broken.png", settle_s=2)
    assert page.panels == {"panel-x": "empty"}
    assert any("notDefined" in e for e in page.errors)
