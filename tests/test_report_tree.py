"""The report's draft-tree and hardware-profile panels: data on hand-built studies and
profiles with known answers, the run folder's profile read without ever failing the
report, and the two panels' figures (or notes) on the page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.storages.journal import JournalFileBackend
from test_report_data import LATENCY, add, baseline, config, new_study, ngram
from test_report_render import STUDY, check_page, make_run

from autotune.schema.shape import CHAIN, DYNAMIC, STATIC, DraftShape
from autotune.report import build_report, render_report
from autotune.report import panels as P
from autotune.report import trials

optuna.logging.set_verbosity(optuna.logging.WARNING)

TREE_METHODS = CategoricalDistribution(("ngram", "layer_skip", "draft_model"))


def tree(study: optuna.Study, speedup: float | None, width: int = 0, depth: int = 0, tokens: int = 0,
         method: str = "layer_skip", k: int = 4, choices: list[list[int]] | None = None,
         params: dict[str, Any] | None = None, dists: dict[str, Any] | None = None,
         **metrics: Any) -> None:
    """One complete trial drafting a tree (width > 0 or choices) or a chain (neither);
    its latency is 20 ms / speedup, the objective of LATENCY."""
    cfg = config(method, k=k, attn_skip=[1] if method == "layer_skip" else [], tree_width=width,
                 tree_depth=depth, tree_tokens=tokens, tree_choices=choices or [])
    measured = {"latency_ms_per_token": 20.0 / (speedup or 1.0), **metrics}
    if speedup is not None:
        measured["speedup"] = speedup
    add(study, 20.0 / (speedup or 1.0), cfg, measured,
        params=params or {"method": method}, dists=dists or {"method": TREE_METHODS})


def cell_map(panel: P.tree.TreePanel) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["column"], r["depth"]): r for r in panel.cells.to_dict("records")}


# ------------------------------------------------------------------ tree shapes
def shape_of(stored: dict[str, Any]) -> DraftShape | None:
    """The draft shape of a config as a trial stores it."""
    return trials.shape_of(stored, stored.get("method", "none"))


def test_tree_shape_of_chains_dynamic_and_static_trees() -> None:
    chain = shape_of(config("ngram", k=5))          # an old config: no tree keys at all
    assert chain == DraftShape(CHAIN, k=5) and (chain.levels, chain.nodes) == (5, 5)
    # width 4, depth 5: 4 nodes at level 1, then 4 × 4 at each of the 4 later levels.
    full = shape_of(config("layer_skip", tree_width=4, tree_depth=5, tree_tokens=0))
    assert full == DraftShape(DYNAMIC, k=4, width=4, depth=5, tokens=0) and full.nodes == 68
    assert shape_of(config("layer_skip", tree_width=4, tree_depth=5, tree_tokens=30)).nodes == 30
    assert shape_of(config("layer_skip", tree_width=2, tree_depth=2, tree_tokens=50)).nodes == 6
    static = shape_of(config("draft_model", tree_choices=[[0], [1], [0, 0], [0, 0, 1]]))
    assert static.kind == STATIC and (static.width, static.tokens) == (0, 0)
    assert (static.levels, static.nodes) == (3, 4)          # depth: the deepest path
    assert shape_of(config()) is None                                   # the AR baseline
    assert shape_of({}) is None
    assert shape_of(config("layer_skip", tree_width="wide")) is None    # unparseable: no shape


# ------------------------------------------------------------------ tree panel
def test_tree_cells_keep_the_best_budget_per_width_and_depth() -> None:
    study = new_study()
    baseline(study)                                      # 0
    tree(study, 1.5, width=2, depth=3, tokens=0)         # 1
    tree(study, 1.8, width=2, depth=3, tokens=10)        # 2: the best of its cell
    tree(study, 1.2, width=2, depth=3, tokens=6)         # 3
    tree(study, 2.2, width=4, depth=3, tokens=20)        # 4: the best cell
    tree(study, 2.0, width=4, depth=5, tokens=30)        # 5
    tree(study, 1.4, k=3)                                # 6: layer_skip chains at depth k = 3
    tree(study, 1.6, k=3)                                # 7
    ngram(study, 20.0 / 3.0, k=3)                        # 8: 3×, but ngram drafted no tree
    panel = P.tree.data(study, LATENCY)
    assert panel.metric == "speedup" and panel.higher_better
    assert panel.columns == ["chain", "2", "4"]
    cells = cell_map(panel)
    assert set(cells) == {("chain", 3), ("2", 3), ("4", 3), ("4", 5)}
    assert cells[("2", 3)]["number"] == 2 and cells[("2", 3)]["tokens"] == 10
    assert cells[("2", 3)]["value"] == pytest.approx(1.8)
    assert cells[("2", 3)]["budgets"] == "6, 10, all" and cells[("2", 3)]["n_trials"] == 3
    assert cells[("2", 3)]["nodes"] == 10
    assert cells[("chain", 3)]["number"] == 7 and cells[("chain", 3)]["n_trials"] == 2
    assert 8 not in set(panel.cells["number"])
    assert panel.cells[panel.cells["is_best"]]["number"].tolist() == [4]
    assert "Best tree: #4 layer_skip tree w4 d3 t=20" in panel.note
    assert "best chain of the same drafters: #7 layer_skip chain k=3" in panel.note
    assert "depth = k" in panel.note


def test_tree_cells_follow_the_objective_without_speedup() -> None:
    """Lower latency wins when no trial measured a speedup (the cell's best is #1)."""
    study = new_study()
    for latency, tokens in ((12.0, 10), (9.0, 20), (15.0, 0)):
        add(study, latency, config("draft_model", tree_width=3, tree_depth=4, tree_tokens=tokens),
            {"latency_ms_per_token": latency})
    panel = P.tree.data(study, LATENCY)
    assert panel.metric == "latency_ms_per_token" and not panel.higher_better
    (row,) = panel.cells.to_dict("records")
    assert (row["number"], row["tokens"], row["value"]) == (1, 20, 9.0)


def test_static_trees_get_their_own_column_and_are_listed_in_the_note() -> None:
    study = new_study()
    tree(study, 1.7, width=2, depth=2, method="draft_model")
    tree(study, 1.9, method="draft_model", choices=[[0], [1], [0, 0], [0, 0, 0]])
    panel = P.tree.data(study, LATENCY)
    assert panel.columns == ["2", "static"]
    cells = cell_map(panel)
    assert cells[("static", 3)]["nodes"] == 4 and cells[("static", 3)]["budgets"] == ""
    assert cells[("static", 3)]["is_best"] and not cells[("2", 2)]["is_best"]
    assert "#1 draft_model 4 nodes to depth 3: 1.9×" in panel.note


def test_no_tree_is_a_note_not_an_empty_plot() -> None:
    study = new_study()
    baseline(study)
    ngram(study, 10.0, k=3)
    tree(study, 1.5, k=4)                                # a layer_skip chain
    panel = P.tree.data(study, LATENCY)
    assert panel.cells.empty and panel.columns == []
    assert "No trial drafted a tree" in panel.note
    assert "No trial has completed" in P.tree.data(new_study(), LATENCY).note


def test_trees_without_the_metric_leave_no_chain_only_plot() -> None:
    study = new_study()
    tree(study, 1.5, k=4)                                 # a measured chain
    add(study, 12.0, config("layer_skip", tree_width=2, tree_depth=2), {"speedup": None,
                                                                        "lossless": True})
    add(study, 12.0, config("layer_skip"), {"speedup": 1.2})
    panel = P.tree.data(study, LATENCY)
    assert panel.cells.empty
    assert "No tree trial measured speedup" in panel.note and "#1" in panel.note


def test_depth_acceptance_of_the_best_tree_and_best_chain() -> None:
    study = new_study()
    tree(study, 2.0, width=3, depth=3, tokens=12, depth_acceptance=[0.9, 0.6, 0.3])
    tree(study, 1.8, width=3, depth=3, tokens=8, depth_acceptance=[0.1, 0.1, 0.1])   # not best
    tree(study, 1.5, k=2, depth_acceptance=[0.8, 0.5])
    panel = P.tree.data(study, LATENCY)
    acc = panel.depth_acc
    assert acc.groupby("role")["number"].first().to_dict() == {"best tree": 0, "best chain": 2}
    assert acc[acc["role"] == "best tree"]["share"].tolist() == [0.9, 0.6, 0.3]
    assert acc[acc["role"] == "best tree"]["depth"].tolist() == [1, 2, 3]
    study = new_study()
    tree(study, 2.0, width=3, depth=3)
    assert P.tree.data(study, LATENCY).depth_acc.empty
    assert "No depth acceptance" in P.tree.data(study, LATENCY).note


# ------------------------------------------------------------------ tree knobs elsewhere
def test_tree_knobs_join_the_knob_and_parallel_panels() -> None:
    study = new_study()
    ngram(study, 10.0, k=3)
    tree(study, 1.5, k=4)                                     # a chain: no tree knobs
    tree(study, 2.0, width=2, depth=3, tokens=0)
    tree(study, 1.8, width=4, depth=5, tokens=30)
    knobs = {k.name: k for k in P.knobs.data(study, LATENCY).knobs}
    tree_knobs = [name for name in knobs if ".tree_" in name]
    assert tree_knobs == ["layer_skip.tree_width", "layer_skip.tree_depth", "layer_skip.tree_nodes"]
    assert knobs["layer_skip.tree_width"].frame["x"].tolist() == [2, 4]
    assert knobs["layer_skip.tree_nodes"].frame["x"].tolist() == [10, 30]    # 2 + 2 × 2 × 2; budget 30
    assert knobs["layer_skip.tree_width"].derived and knobs["layer_skip.tree_width"].integer
    par = P.parallel.data(study, LATENCY)
    width = next(d for d in par.dimensions if d.label == "tree_width")
    assert width.ticktext[0] == "n/a" and width.values[2:] == [2.0, 4.0]
    assert width.values[0] == width.values[1] == width.tickvals[0]     # chains: n/a


def test_a_searched_tree_knob_is_not_repeated_as_a_derived_one() -> None:
    study = new_study()
    dists = {"method": TREE_METHODS, "layer_skip.tree_width": IntDistribution(0, 8)}
    for width, speedup in ((2, 1.5), (4, 1.7)):
        tree(study, speedup, width=width, depth=3,
             params={"method": "layer_skip", "layer_skip.tree_width": width}, dists=dists)
    names = [k.name for k in P.knobs.data(study, LATENCY).knobs]
    assert names.count("layer_skip.tree_width") == 1
    assert "layer_skip.tree_depth" in names


def test_header_shows_a_trees_shape_instead_of_k_and_policy() -> None:
    study = new_study()
    tree(study, 2.0, width=4, depth=5, tokens=30)
    head = P.header.data(study, LATENCY)
    assert head.best_params == {"method": "layer_skip", "attn_skip": [1], "mlp_skip": [],
                                "tree_width": 4, "tree_depth": 5, "tree_tokens": 30}
    study = new_study()
    tree(study, 2.0, method="draft_model", choices=[[0], [1], [0, 0]])
    assert P.header.data(study, LATENCY).best_params == {"method": "draft_model",
                                                    "tree_choices": "3 paths, depth 2"}


# ------------------------------------------------------------------ hardware profile
def curve(free: int = 16, slope: float = 0.5, top: int = 128) -> dict[str, Any]:
    """A profile flat at 10 ms up to `free` tokens (with a bump at 8), then linear."""
    points = []
    for n in range(1, top + 1):
        ms = 10.0 + (0.4 if n == 8 else 0.0) + max(0, n - free) * slope
        points.append({"tokens": n, "ms": ms, "ms_min": ms - 0.2})
    return {"model": "m", "device": "NVIDIA H100", "dtype": "bfloat16", "context_tokens": 512,
            "repeats": 20, "points": points}


def test_free_up_to_on_a_known_curve() -> None:
    hw = P.hardware.data(curve())
    # 10 % of 10 ms: up to 11 ms, reached at 16 + 2 tokens; from there 0.5 ms per token.
    assert hw.free_up_to == 18 and hw.base_ms == 10.0
    assert hw.extra_ms_per_token == pytest.approx(0.5)
    assert len(hw.frame) == 128 and hw.frame["ms_per_token"].iloc[1] == pytest.approx(5.0)
    assert hw.note.startswith("Verifying up to 18 tokens costs about as much as one")
    assert "each extra token costs ~0.5 ms" in hw.note
    assert hw.info == {"model": "m", "device": "NVIDIA H100", "dtype": "bfloat16",
                       "context_tokens": "512", "repeats": "20"}
    assert P.hardware.data(curve(slope=2.0)).free_up_to == 16
    assert P.hardware.free_up_to(pd.DataFrame({"tokens": [1, 2, 4, 8], "ms": [10.0, 12.0, 10.5, 30.0]})) == 4


def test_a_cpu_like_profile_says_verifying_is_not_free() -> None:
    doc = curve()
    doc["points"] = [{"tokens": n, "ms": 20.0 + 8.0 * (n - 1) ** 0.8, "ms_min": 19.0 + n}
                     for n in (1, 2, 4, 8, 16)]
    hw = P.hardware.data(doc)
    assert hw.free_up_to == 1
    assert hw.note.startswith("Verifying is not free on this hardware: already 2 tokens "
                              "cost 1.40x one (20 ms)")


def test_a_flat_profile_is_free_everywhere_and_a_missing_one_token_point_is_said() -> None:
    hw = P.hardware.data(curve(free=200, top=64))
    assert hw.free_up_to == 64 and hw.extra_ms_per_token is None
    assert "every size measured" in hw.note
    doc = curve()
    doc["points"] = doc["points"][1:]
    hw = P.hardware.data(doc)
    assert hw.free_up_to is None and "no 1-token point" in hw.note and len(hw.frame) == 127


def test_missing_or_malformed_profiles_are_notes() -> None:
    missing = P.hardware.data(None)
    assert missing.frame.empty and "No hardware_profile.json" in missing.note
    assert "autotune search" in missing.note
    unreadable = P.hardware.data(None, problem="Expecting value: line 1 column 1 (char 0)")
    assert unreadable.frame.empty and "Cannot read hardware_profile.json" in unreadable.note
    for doc, says in (([1, 2], "is not a JSON object"), ({"points": "many"}, "no list of points"),
                      ({"points": [{"tokens": 0, "ms": 1.0}, {"tokens": 2, "ms": "fast"},
                                   {"tokens": True, "ms": 1.0}, "x"]}, "no valid point")):
        hw = P.hardware.data(doc)
        assert hw.frame.empty and says in hw.note, doc
    doc = curve(top=8)
    doc["points"] += [{"tokens": 3, "ms": 99.0}, {"tokens": 9, "ms": float("nan")}, None]
    hw = P.hardware.data(doc)
    assert len(hw.frame) == 8 and "3 malformed points left out" in hw.note
    assert hw.frame.set_index("tokens")["ms"][3] == 10.0        # the repeat is the one left out


def test_the_best_trials_verified_tokens_are_marked() -> None:
    study = new_study()
    baseline(study, 30.0)
    tree(study, 2.0, width=4, depth=5, tokens=30, mean_verified_tokens=24.5)
    tree(study, 1.5, k=4, mean_verified_tokens=5.0)
    hw = P.hardware.data(curve(), study, LATENCY)
    assert (hw.verified, hw.verified_number) == (24.5, 1)
    assert "#1, verifies 24.5 tokens per pass on average (past the free range)" in hw.note
    study = new_study()
    tree(study, 1.5, k=4)                                    # an old run: no verified tokens
    assert P.hardware.data(curve(), study, LATENCY).verified is None


# ------------------------------------------------------------------ run folder and page
def add_tree_trials(run_dir: Path) -> None:
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(run_dir / "study.journal")))
    study = optuna.load_study(study_name=STUDY, storage=storage)
    tree(study, 2.5, width=2, depth=3, tokens=8, depth_acceptance=[0.9, 0.7, 0.4],
         mean_verified_tokens=9.0)
    tree(study, 2.2, width=4, depth=3, tokens=0)
    tree(study, 1.9, method="layer_skip", choices=[[0], [1], [0, 0]])


def test_run_folder_profile_missing_malformed_or_valid(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    assert "No hardware_profile.json" in build_report(run_dir).hardware.note
    (run_dir / "hardware_profile.json").write_text("{not json")
    data = build_report(run_dir)                              # a bad profile: a note, no error
    assert data.hardware.frame.empty and "Cannot read hardware_profile.json" in data.hardware.note
    (run_dir / "hardware_profile.json").write_text(json.dumps({"points": {"tokens": 1}}))
    assert "no list of points" in build_report(run_dir).hardware.note
    (run_dir / "hardware_profile.json").write_text(json.dumps(curve()))
    data = build_report(run_dir)
    assert data.hardware.free_up_to == 18 and data.hardware.verified is None


def test_page_draws_the_tree_and_hardware_panels(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    add_tree_trials(run_dir)
    (run_dir / "hardware_profile.json").write_text(json.dumps(curve()))
    page = render_report(build_report(run_dir))
    sections = check_page(page)
    assert sections.figures["panel-tree"] == 2 and sections.figures["panel-hardware"] == 2
    for div in ('id="fig-tree"', 'id="fig-tree-depth"', 'id="fig-hardware"',
                'id="fig-hardware-per-token"'):
        assert div in page
    assert "free up to 18" in page and "chain (k)" in page and "t=8" in page
    assert "best #" in page                                   # the verified-tokens marker
    assert "verified (tokens/pass)" in page                   # the top table's new column


def test_page_without_trees_or_profile_has_notes_there(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    page = render_report(build_report(run_dir))
    sections = check_page(page)
    for panel in ("panel-tree", "panel-hardware"):
        assert sections.figures.get(panel, 0) == 0 and sections.notes[panel] == 1, panel
    assert "No trial drafted a tree" in page and "autotune search" in page
