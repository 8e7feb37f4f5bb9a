"""The HTML report: one self-contained page, every panel present, figures or notes.

The main test builds its own small run folder (journal storage + run.json + best.json) so
it runs anywhere; one more renders the real run folder when it is beside the code.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend
from plotly.offline import get_plotlyjs
from test_report_data import add, baseline, config, layer_skip, ngram

from autotune.common.errors import AutotuneError
from autotune.report import PANEL_IDS, build_report, render_report, write_report

optuna.logging.set_verbosity(optuna.logging.WARNING)

STUDY = "tiny-joint-latency"


def make_run(tmp_path: Path, directions: list[str] | None = None, trials: bool = True) -> Path:
    """A run folder as `autotune search` leaves it: journal, run.json, best.json."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(run_dir / "study.journal")))
    study = optuna.create_study(study_name=STUDY, storage=storage,
                                directions=directions or ["minimize"])
    multi = directions is not None and len(directions) > 1
    if trials and not multi:
        baseline(study)
        ngram(study, 10.0, k=3, policy="heuristic", pos_acc=[0.9, 0.8, 0.6], acceptance_alpha=0.8,
              acceptance_rate=0.7, cost_ratio=0.05, mean_drafted_tokens=2.6, draft_ms_per_token=1.0,
              verify_ms_per_token=7.0, other_ms_per_token=2.0, baseline_verify_ms_per_token=18.0,
              baseline_other_ms_per_token=2.0, mean_accepted_tokens=2.1, lossless=True)
        for i in range(6):
            ngram(study, 11.0 + i, k=1 + i % 5, policy="fixed" if i % 2 else "heuristic",
                  pos_acc=[0.8, 0.7])
            layer_skip(study, 14.0 + 2 * i, attn=list(range(1, 2 + i)), mlp=[i % 5 + 1], k=2 + i % 3)
        add(study, None, None, params={"method": "ngram"}, state=optuna.trial.TrialState.PRUNED,
            dists={"method": optuna.distributions.CategoricalDistribution(("ngram", "layer_skip"))},
            infeasible="ngram_min=3, ngram_max=2")
    elif trials:
        for lat, mem in ((10.0, 500.0), (12.0, 400.0), (13.0, 450.0), (9.0, 600.0)):
            add(study, [lat, mem], config("ngram", k=2),
                {"latency_ms_per_token": lat, "peak_memory_mb": mem, "speedup": 20 / lat})
    objective = ("latency_memory", ["latency_ms_per_token", "peak_memory_mb"]) if multi else (
        "latency", ["latency_ms_per_token"])
    run = {"study": STUDY, "storage": str(run_dir / "study.journal"), "sampler": "tpe",
           "objective": objective[0], "model": "tiny", "device_type": "cpu", "n_layers": 6,
           "workload": "builtin", "prompts": 2, "max_new_tokens": 8}
    (run_dir / "run.json").write_text(json.dumps(run))
    if trials:
        best = {"objective": {"name": objective[0], "metrics": objective[1],
                              "directions": directions or ["minimize"]},
                "model": {"id": "tiny", "n_layers": 6, "dtype": "float32"},
                "hardware": {"device": "cpu", "threads": 2},
                "workload": {"source": "builtin", "prompts": 2, "max_new_tokens": 8}}
        (run_dir / "best.json").write_text(json.dumps(best))
    return run_dir


class Sections(HTMLParser):
    """Where each plotly figure div and each note sits: inside which panel section."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str | None]] = []       # (tag, panel id)
        self.sections: list[str] = []
        self.figures: dict[str | None, int] = {}
        self.notes: dict[str | None, int] = {}
        self.tables: dict[str | None, int] = {}

    def panel(self) -> str | None:
        return next((pid for _, pid in reversed(self.stack) if pid), None)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        pid = a.get("id") if tag == "section" and "panel" in classes else None
        if pid:
            assert self.panel() is None, "sections do not nest"
            self.sections.append(pid)
        if tag not in ("br", "meta", "img", "input", "hr"):
            self.stack.append((tag, pid))
        if tag == "div" and "plotly-graph-div" in classes:
            self.figures[self.panel()] = self.figures.get(self.panel(), 0) + 1
        if tag == "p" and "note" in classes:
            self.notes[self.panel()] = self.notes.get(self.panel(), 0) + 1
        if tag == "table":
            self.tables[self.panel()] = self.tables.get(self.panel(), 0) + 1

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()[0] == tag:
                break


def parse(page: str) -> Sections:
    # The inlined plotly.js is opaque to an HTML parser check; drop it first.
    parser = Sections()
    parser.feed(page.replace(get_plotlyjs(), ""))
    return parser


def external_urls(page: str) -> list[str]:
    """URLs anywhere in the page except inside the one inlined copy of plotly.js."""
    js = get_plotlyjs()
    assert page.count(js) == 1
    return re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[a-z]{2,}[^\s\"'<>]*", page.replace(js, ""))


def check_page(page: str) -> Sections:
    assert page.startswith("<!DOCTYPE html>")
    assert page.count(get_plotlyjs()) == 1
    assert external_urls(page) == []
    for forbidden in ("http://", "https://", "cdn.plot.ly", "mathjax", "<link", "@import"):
        assert forbidden not in page.replace(get_plotlyjs(), "").lower().replace("mathjaxconfig", ""), forbidden
    sections = parse(page)
    assert sections.sections == [f"panel-{p}" for p in PANEL_IDS]
    assert None not in sections.figures, "every figure sits inside a panel section"
    for pid in sections.sections:
        shown = sections.figures.get(pid, 0) + sections.notes.get(pid, 0) + sections.tables.get(pid, 0)
        assert shown or pid == "panel-header", f"{pid} shows neither a figure nor a note"
    return sections


def test_report_of_a_small_run_folder(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    path = write_report(run_dir)
    assert path == run_dir / "report.html"
    page = path.read_text(encoding="utf-8")
    sections = check_page(page)
    for panel in ("history", "knobs", "parallel", "importance", "layers", "pos-acc",
                  "time-split"):
        assert sections.figures.get(f"panel-{panel}", 0) >= 1, panel
    assert sections.figures.get("panel-pareto", 0) == 0 and sections.notes["panel-pareto"] == 1
    assert sections.tables["panel-top"] == 1
    assert page.count('"displaylogo": false, "responsive": true') == sum(sections.figures.values())
    assert "ngram k=3 n=1..3 heuristic" in page            # the best config's label
    assert not list(run_dir.glob(".report.html.*")), "no temporary file left behind"


def test_report_of_a_multi_objective_run_draws_the_pareto_front(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, directions=["minimize", "minimize"])
    page = render_report(build_report(run_dir))
    sections = check_page(page)
    assert sections.figures["panel-pareto"] == 1
    assert "Pareto front" in page


def test_report_with_no_complete_trial_is_header_and_notes(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, trials=False)
    out = tmp_path / "elsewhere" / "r.html"
    assert write_report(run_dir, out) == out
    sections = check_page(out.read_text(encoding="utf-8"))
    assert sum(sections.figures.values()) == 0
    assert sections.notes.get("panel-header") == 1


def test_errors_are_one_line_autotune_errors(tmp_path: Path) -> None:
    with pytest.raises(AutotuneError, match="run folder not found"):
        build_report(tmp_path / "missing")
    with pytest.raises(AutotuneError, match="no run.json"):
        build_report(tmp_path)
    run_dir = make_run(tmp_path)
    with pytest.raises(AutotuneError, match="no study storage"):
        build_report(run_dir, storage=str(tmp_path / "nope.journal"))
    assert not (tmp_path / "nope.journal").exists(), "a missing journal is not created"
    run = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**run, "study": "other"}))
    with pytest.raises(AutotuneError, match="study 'other' not found"):
        build_report(run_dir)
    (run_dir / "run.json").write_text("{not json")
    with pytest.raises(AutotuneError, match="cannot read"):
        build_report(run_dir)


def test_storage_without_study_name_uses_its_only_study(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    del run["study"]
    (run_dir / "run.json").write_text(json.dumps(run))
    assert build_report(run_dir).header.study == STUDY


def test_render_handles_any_data_shape(tmp_path: Path) -> None:
    """Values a user can put in names (study, presets) are escaped, never markup."""
    run_dir = make_run(tmp_path)
    data = build_report(run_dir)
    data.header.study = "<script>alert(1)</script>"
    page = render_report(data)
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    check_page(page)
