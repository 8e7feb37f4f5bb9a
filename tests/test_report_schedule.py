"""The report's batch-size panel, drawn from best.json's optional `schedule` section (issue
17): present with its traces, table and stop-paying batch size when a schedule exists;
absent, with the page as before, when not. The run folder is test_report_render's own
small one, with a `schedule` written into its best.json (the report reads best.json as
plain JSON, no frozen-schema check)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_report_render import check_page, make_run, parse

from autotune.common.interval import Interval
from autotune.report import OPTIONAL_PANEL_IDS, PANEL_IDS, build_report, render_report
from autotune.report.panels import batch_size as B
from autotune.report.schedule import read_schedule, schedule_line


def point(b: int, k: int, speedup: float | None, split: str = "search", chosen: bool = False,
          ci: list[float] | None = None, tps: float | None = None, ar: float | None = None,
          tau: float | None = None) -> dict[str, Any]:
    return {"batch_size": b, "k": k, "split": split, "tokens_per_s": tps, "ar_tokens_per_s": ar,
            "speedup": speedup, "ci90": ci, "tau": tau, "chosen": chosen}


# Search: K in {0, 2, 3, 4} at B in {1, 2, 4, 8}; K=4 wins at 1, K=3 at 2, AR from 4 on.
SEARCH_SPEEDUPS = {1: {2: 1.20, 3: 1.28, 4: 1.33}, 2: {2: 1.10, 3: 1.18, 4: 1.12},
                   4: {2: 0.97, 3: 0.93, 4: 0.90}, 8: {2: 0.88, 3: 0.84, 4: 0.80}}
CHOSEN = {1: 4, 2: 3, 4: 0, 8: 0}
AR_TPS = {1: 60.0, 2: 115.0, 4: 220.0, 8: 400.0}


def schedule_doc() -> dict[str, Any]:
    points = []
    for b, by_k in SEARCH_SPEEDUPS.items():
        points.append(point(b, 0, 1.0, chosen=CHOSEN[b] == 0, ci=[1.0, 1.0],
                            tps=AR_TPS[b], ar=AR_TPS[b], tau=1.0))
        for k, s in by_k.items():
            points.append(point(b, k, s, chosen=CHOSEN[b] == k, ci=[s - 0.1, s + 0.1],
                                tps=round(AR_TPS[b] * s, 1), ar=AR_TPS[b], tau=1.0 + k / 2))
    points += [point(1, 4, 1.29, "held_out", True, [1.15, 1.41], 79.0, 61.0, 2.3),
               point(2, 3, 1.11, "held_out", True, [0.98, 1.22], 127.0, 114.4, 2.1),
               point(4, 0, 1.0, "held_out", True, None, 221.0, 221.0, 1.0)]
    return {"method": "ngram", "batch_sizes": [1, 2, 4, 8], "objective": "throughput",
            "ranges": [{"start": 1, "end": 1, "k": 4}, {"start": 2, "end": 3, "k": 3},
                       {"start": 4, "end": 8, "k": 0}],
            "points": points}


def run_with(tmp_path: Path, schedule: Any) -> Path:
    run_dir = make_run(tmp_path)
    best = json.loads((run_dir / "best.json").read_text())
    best["schedule"] = schedule
    (run_dir / "best.json").write_text(json.dumps(best))
    return run_dir


def traces(d: B.BatchSize) -> dict[str, Any]:
    fig = B.figure_of(d)
    names = [t.name for t in fig.data]
    assert len(names) == len(set(names)), names
    return {t.name: t for t in fig.data}


def section_of(page: str, panel: str) -> str:
    start = page.index(f'id="panel-{panel}"')
    return page[start:page.index("</section>", start)]


def test_panel_with_a_schedule(tmp_path: Path) -> None:
    data = build_report(run_with(tmp_path, schedule_doc()))
    d = data.batch_size
    assert isinstance(d, B.BatchSize)
    assert d.batch_sizes == [1, 2, 4, 8] and d.stops_at == 4 and d.pays_again == []
    assert d.stop_text.startswith("Speculation stops paying at B=4:")
    assert d.note is None
    # The table: chosen K per batch size and the figures behind it.
    assert [(r.batch_size, r.k) for r in d.table] == [(1, 4), (2, 3), (4, 0), (8, 0)]
    one, two, four, eight = d.table
    assert one.search_speedup == 1.33 and one.search_tokens_per_s == 79.8
    assert one.search_ar_tokens_per_s == 60.0 and one.tau == 3.0
    assert one.held_out_speedup == 1.29 and one.held_out_interval == Interval(1.15, 1.41)
    assert one.held_out_tokens_per_s == 79.0 and one.held_out_ar_tokens_per_s == 61.0
    assert two.search_speedup == 1.18 and two.held_out_interval == Interval(0.98, 1.22)
    assert four.search_speedup == 1.0 and four.held_out_interval is None
    assert eight.held_out_speedup is None and eight.search_tokens_per_s == 400.0
    assert data.header.schedule == "Batch-size schedule: K=4 at 1, K=3 at 2–3, off from B=4"

    t = traces(d)
    assert list(t) == ["K=2", "K=3", "K=4", B.SCHEDULE_TRACE, B.HELD_OUT_TRACE,
                       "stops paying at B=4"]                  # no K=0 line: it is the 1.0 line
    assert list(t["K=3"].x) == [1, 2, 4, 8]
    assert list(t["K=3"].y) == [1.28, 1.18, 0.93, 0.84]
    sched = t[B.SCHEDULE_TRACE]
    assert list(sched.x) == [1, 2, 4, 8] and list(sched.y) == [1.33, 1.18, 1.0, 1.0]
    assert list(sched.text) == ["K=4", "K=3", "K=0", "K=0"]
    assert sched.line.width > t["K=4"].line.width              # the schedule is the thick line
    held = t[B.HELD_OUT_TRACE]
    assert list(held.x) == [1, 2, 4] and list(held.y) == [1.29, 1.11, 1.0]
    assert held.error_y.array[0] == pytest.approx(0.12)         # 1.41 - 1.29
    assert held.error_y.arrayminus[1] == pytest.approx(0.13)    # 1.11 - 0.98
    assert held.error_y.array[2] is None                         # no interval: no bar
    assert list(t["stops paying at B=4"].x) == [4, 4]
    assert "79.0 tok/s · batched AR 61.0 tok/s" in held.text[0]
    assert "1.29× [1.15, 1.41] (90%)" in held.text[0] and "τ 2.30" in held.text[0]
    fig = B.figure_of(d)
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8]
    assert any(s.y0 == 1.0 and s.y1 == 1.0 for s in fig.layout.shapes)   # the AR line

    page = render_report(data)
    sections = parse(page)
    assert sections.sections == [f"panel-{p}" for p in data.panel_ids]
    assert data.panel_ids == ("header", "finalists", "batch-size", *PANEL_IDS[2:])
    assert sections.figures.get("panel-batch-size") == 1
    assert sections.tables.get("panel-batch-size") == 1
    panel = section_of(page, "batch-size")
    assert "Speculation stops paying at B=4" in panel
    assert "paired ratio" in panel and "one run" in panel and "the figures to trust" in panel
    assert "Batch-size schedule: K=4 at 1, K=3 at 2–3, off from B=4" in section_of(page, "header")


def test_no_schedule_leaves_the_report_as_it_was(tmp_path: Path) -> None:
    data = build_report(make_run(tmp_path))
    assert data.batch_size is None and data.header.schedule is None
    assert data.panel_ids == PANEL_IDS and "batch-size" in OPTIONAL_PANEL_IDS
    page = render_report(data)
    check_page(page)                      # every always-on panel, in order, and nothing else
    assert "panel-batch-size" not in page and "Batch-size schedule" not in page


def test_a_schedule_that_pays_everywhere_has_no_stop(tmp_path: Path) -> None:
    doc = schedule_doc()
    doc["ranges"] = [{"start": 1, "end": 1, "k": 4}, {"start": 2, "end": 8, "k": 2}]
    data = build_report(run_with(tmp_path, doc))
    d = data.batch_size
    assert d.stops_at is None
    assert d.stop_text.startswith("Speculation pays at every tuned batch size (1–8)")
    assert [r.k for r in d.table] == [4, 2, 2, 2]
    t = traces(d)
    assert not any(name.startswith("stops paying") for name in t)
    assert list(t[B.SCHEDULE_TRACE].y) == [1.33, 1.10, 0.97, 0.88]
    assert data.header.schedule == "Batch-size schedule: K=4 at 1, K=2 at 2–8"


def test_schedule_line_in_words() -> None:
    def line(ranges: list[tuple[int, int, int]]) -> str | None:
        doc = {"schedule": {"batch_sizes": sorted({r[0] for r in ranges}),
                            "ranges": [{"start": s, "end": e, "k": k} for s, e, k in ranges],
                            "points": []}}
        return schedule_line(read_schedule(doc))

    assert line([(1, 3, 4), (4, 7, 4), (8, 8, 0)]) == "Batch-size schedule: K=4 at 1–7, off from B=8"
    assert line([(1, 1, 0), (2, 8, 0)]) == ("Batch-size schedule: off at every tuned batch size "
                                            "(1–8): do not speculate")
    assert line([(1, 1, 3), (2, 3, 0), (4, 4, 2)]) == "Batch-size schedule: K=3 at 1, off at 2–3, K=2 at 4"
    assert read_schedule({}) is None and schedule_line(None) is None


def test_non_monotone_schedule_says_it_pays_again() -> None:
    doc = {"schedule": {"batch_sizes": [1, 2, 4], "points": [],
                        "ranges": [{"start": 1, "end": 1, "k": 3}, {"start": 2, "end": 3, "k": 0},
                                   {"start": 4, "end": 4, "k": 2}]}}
    d = B.data(read_schedule(doc))
    assert d is not None and d.stops_at == 2 and d.pays_again == [4]
    assert "chosen again at B=4" in d.stop_text


def test_unreadable_schedule_is_a_note_not_an_error(tmp_path: Path) -> None:
    data = build_report(run_with(tmp_path, "K=4 please"))
    d = data.batch_size
    assert d is not None and d.frame.empty and d.table == []
    assert "not an object" in (d.note or "")
    sections = parse(render_report(data))
    assert "panel-batch-size" in sections.sections
    assert sections.figures.get("panel-batch-size") is None
    assert sections.notes.get("panel-batch-size") == 1
    # Bad entries are left out and counted; the good ones still draw.
    doc = schedule_doc()
    doc["points"].append({"batch_size": "big", "k": 2, "split": "search"})
    d = B.data(read_schedule({"schedule": doc}))
    assert d is not None and len(d.frame) == 19 and "1 of 20 points unreadable" in (d.note or "")
