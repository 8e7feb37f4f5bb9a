"""End to end: `autotune search --space tree` on a tiny Llama measures real trees, and
the run folder's consumers (best.json, the report's tree and hardware panels, the
SGLang export, `measure --config`) all carry the tree."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pandas as pd
import pytest
from tiny import llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)

from autotune.cli.main import main
from autotune.schema.config import config_from_mapping
from autotune.runs.folder import ranked_documents
from autotune.search.objectives import load_objective
from autotune.search.storage import storage_from_url

WORKLOAD = "t1 t2 t3 t4 t5 t1 t2 t3 t4 t5 t1 t2\nt7 t8 t9 t7 t8 t9 t7 t8\n"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-tree")
    save_tiny(llama_model(seed=5, layers=4, scale=4.0), folder / "model")
    (folder / "prompts.txt").write_text(WORKLOAD)
    return folder


def test_tree_search_writes_trees_through_every_output(tmp_path, tiny_dir, capsys):
    out = tmp_path / "run"
    known = tmp_path / "known.json"
    # One known tree first, so the run surely holds a measured dynamic tree of width 2+.
    known.write_text(json.dumps({"method": "layer_skip", "attn_skip": [1], "tree_width": 2,
                                 "tree_depth": 3, "tree_tokens": 8, "exit_policy": "fixed"}))
    assert main(["search", "--model", str(tiny_dir / "model"), "--workload",
                 str(tiny_dir / "prompts.txt"), "--space", "tree", "--trials", "6",
                 "--max-new-tokens", "12", "--no-prune", "--seed", "3",
                 "--enqueue", str(known), "--out", str(out), "--fidelity", "measure"]) == 0
    frame = pd.read_csv(out / "trials.csv")
    complete = frame[frame.state == "COMPLETE"]
    assert len(complete) >= 4
    best = json.loads((out / "best.json").read_text())
    assert best["metrics"]["lossless"] is True
    profile = json.loads((out / "hardware_profile.json").read_text())
    assert profile["points"][0]["tokens"] == 1 and profile["points"][-1]["tokens"] == 128
    html = (out / "report.html").read_text()
    assert 'id="fig-tree"' in html, "the tree panel drew its heatmap"
    assert 'id="fig-hardware' in html and "Verifying " in html     # curve and its note
    # The known tree's own frozen config (the AR baseline may well be best on a tiny
    # model), as the run folder writes it for export fallbacks.
    study = optuna.load_study(study_name=json.loads((out / "run.json").read_text())["study"],
                              storage=storage_from_url(str(out / "study.journal")))
    context = json.loads((out / "run.json").read_text())["frozen"]
    docs = ranked_documents(study, load_objective("latency"), context)
    tree_doc = next(d for d in docs if d["params"]["tree_width"] == 2
                    and d["params"]["tree_tokens"] == 8)
    frozen = tmp_path / "tree.json"
    frozen.write_text(json.dumps(tree_doc))
    capsys.readouterr()
    assert main(["validate", str(frozen)]) == 0
    assert "valid frozen config" in capsys.readouterr().out
    # The frozen tree is re-measured through the same decoder.
    assert main(["measure", "--config", str(frozen), "--json"]) == 0
    now = json.loads(capsys.readouterr().out)["now"]
    assert now["lossless"] is True and now["mean_verified_tokens"] > 1
    assert now["config"] == tree_doc["params"]
    assert config_from_mapping(now["config"]).shape.tree_nodes == 8
    # Draft & Verify's format takes this drafter's mask but not a tree: it names the
    # tree instead of writing something else.
    assert main(["export", str(frozen), "--format", "dv"]) == 2
    assert "tree" in capsys.readouterr().err
