"""A new drafting method is one registration and one space file: a toy drafter ("repeat
the last token"), registered here and nowhere else, goes through `measure`, `search`,
`best.json`, `validate`, every exporter's refusal and the report, with no other module
touched."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from tiny import llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)
from toy_drafter import TOY, toy  # noqa: F401  (fixture)

from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.exports import FORMATS, export
from autotune.frozen.checks import problems
from autotune.report import build_report
from autotune.runs.folder import ranked_documents
from autotune.search.objectives import load_objective
from autotune.search.storage import storage_from_url


@pytest.fixture
def files(tmp_path):
    model = save_tiny(llama_model(seed=5, layers=2, scale=4.0), tmp_path / "model")
    prompts = tmp_path / "prompts.txt"
    # Repeated tokens, so repeating the last one is sometimes right.
    prompts.write_text("t1 t1 t1 t1 t2 t2 t2 t2\nt3 t3 t3 t4 t4 t4 t4\n")
    space = tmp_path / f"{TOY}.yaml"
    space.write_text(f"description: the toy drafter's K\nfixed:\n  method: {TOY}\n"
                     "knobs:\n  k:\n    type: int\n    low: 1\n    high: 4\n")
    return model, prompts, space


def test_a_registered_toy_method_runs_through_every_command(toy, files, tmp_path, capsys):
    model, prompts, space = files
    common = ["--model", str(model), "--workload", str(prompts), "--prompts", "2",
              "--max-new-tokens", "12"]
    assert main(["measure", *common, "--set", f"method={TOY}", "--set", "k=3", "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert measured["config"]["method"] == TOY and measured["lossless"] is True
    assert measured["mean_drafted_tokens"] > 0

    assert main(["validate", str(space), "--layers", "2"]) == 0
    run = tmp_path / "run"
    assert main(["search", *common, "--space", str(space), "--trials", "4", "--no-prune",
                 "--out", str(run), "--fidelity", "measure"]) == 0
    capsys.readouterr()
    frame = pd.read_csv(run / "trials.csv")
    toy_rows = frame[frame.label.str.startswith(f"{TOY} k=", na=False)]
    assert len(toy_rows) == 3 and set(toy_rows.state) == {"COMPLETE"}

    # best.json (whatever won) and a toy trial's own frozen config are valid documents.
    assert problems(json.loads((run / "best.json").read_text())) == []
    record = json.loads((run / "run.json").read_text())
    storage = storage_from_url(str(run / "study.journal"))
    import optuna
    study = optuna.load_study(study_name=record["study"], storage=storage)
    documents = ranked_documents(study, load_objective("latency"), record["frozen"])
    toy_doc = next(d for d in documents if d["params"]["method"] == TOY)
    assert problems(toy_doc) == []
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(toy_doc))
    assert main(["validate", str(path)]) == 0
    capsys.readouterr()

    # No engine carries it: every format refuses with a line that names the method.
    for fmt in FORMATS:
        with pytest.raises(AutotuneError, match=f"method={TOY}"):
            export(toy_doc, fmt, lossy=True)
    # The CLI refuses a config measured slower than the baseline before it looks at the
    # method; how fast the toy ran depends on the machine, so the CLI is shown a copy
    # whose search figure is faster.
    faster = tmp_path / "toy-faster.json"
    faster.write_text(json.dumps({**toy_doc, "metrics": {**toy_doc["metrics"], "speedup": 1.5}}))
    assert main(["export", str(faster), "--format", "vllm"]) == 2
    assert f"method={TOY}" in capsys.readouterr().err

    # The report draws the toy's trials under its registered label.
    data = build_report(run)
    top = data.top.frame
    assert any(str(label).startswith(f"{TOY} k=") for label in top["label"])
    html = (run / "report.html").read_text()
    assert "repeat last" in html
