"""FrozenConfig (`autotune.frozen/v1`): building, the schema and meaning checks, the
weights hash, `autotune validate`, and `measure --config` / `generate` on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import torch
from tiny import llama_model, one_thread, save_tiny, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.cli.main import main
from autotune.frozen.checks import load_frozen, problems
from autotune.frozen.document import frozen_document
from autotune.frozen.environment import (
    content_hash,
    describe_environment_change,
    hardware_record,
    model_record,
)
from autotune.frozen.schema import SCHEMA
from autotune.runs.folder import best_document
from autotune.search.objectives import load_objective
from autotune.workloads.prompts import load_workload, workload_digest


def _context(n_layers: int = 4) -> dict:
    return {
        "model": {"id": "tiny", "spec": "/models/tiny", "path": "/models/tiny",
                  "sha256": "a" * 64, "hash_of": "weights", "dtype": "float32",
                  "n_layers": n_layers, "model_type": "llama"},
        "draft": None,
        "hardware": hardware_record(torch.device("cpu")),
        "workload": {"source": "builtin", "categories": None, "prompts": 2,
                     "max_new_tokens": 8, "temperature": 0.0, "top_p": 1.0, "seed": 0},
        "provenance": {"space": {"name": "ngram", "file": "ngram.yaml", "sha256": "b" * 64},
                       "objective": {"name": "latency", "file": "latency.yaml"},
                       "sampler": "tpe", "seed": 0, "study": "s"},
    }


def _doc(**params) -> dict:
    return frozen_document({"method": "ngram", "k": 3, **params},
                           metrics={"latency_ms_per_token": 10.0, "speedup": 1.2},
                           context=_context())


def test_a_built_document_is_valid_and_complete():
    doc = _doc()
    assert problems(doc) == []
    assert doc["schema"] == SCHEMA
    # Every canonical knob is written out, so a reader never guesses a default.
    assert set(doc["params"]) >= {"method", "k", "attn_skip", "gamma", "ngram_min", "top_p"}
    assert doc["provenance"]["autotune_version"] and doc["provenance"]["created"]
    assert doc["hardware"]["device"] == "cpu" and doc["hardware"]["torch"] == torch.__version__


def test_a_hand_written_two_key_config_is_valid():
    assert problems({"schema": SCHEMA, "params": {"method": "ngram"}}) == []


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["params"].update(k=0), "params.k: 0 is less than the minimum of 1"),
    (lambda d: d["params"].update(kk=3), "params: unknown key 'kk' (did you mean 'k'?)"),
    (lambda d: d["params"].update(method="hydra"), "params.method: 'hydra' is not one of"),
    (lambda d: d.update(schema="autotune.frozen/v9"), "'autotune.frozen/v9' is not supported"),
    (lambda d: d.pop("params"), "'params' is a required property"),
    (lambda d: d["model"].update(sha256="xyz"), "model.sha256: 'xyz' does not match"),
    (lambda d: d["params"].update(ngram_min=4, ngram_max=2), "params: ngram_min=4, ngram_max=2"),
    (lambda d: d["params"].update(method="layer_skip", attn_skip=[2, 9]),
     "params: attn_skip has layer(s) [9] outside 0..3"),
    (lambda d: d["params"].update(method="draft_model"), "draft: method=draft_model needs"),
])
def test_problems_name_the_key_and_what_is_wrong(mutate, expected):
    doc = _doc()
    mutate(doc)
    found = problems(doc)
    assert found and any(expected in line for line in found), found


def test_every_problem_is_listed_not_just_the_first():
    doc = _doc()
    doc["params"]["k"] = -1
    doc["params"]["gamma"] = 2
    assert len(problems(doc)) == 2


def test_nan_metrics_become_null_so_the_file_is_strict_json():
    doc = frozen_document({"method": "none"}, metrics={"speedup": float("nan"), "x": (1, 2)})
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text)["metrics"] == {"speedup": None, "x": [1, 2]}


def test_content_hash_follows_the_weight_bytes_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    folder = save_tiny(llama_model(seed=0), tmp_path / "m")
    digest, kind = content_hash(str(folder))
    assert kind == "weights" and len(digest) == 64
    assert content_hash(str(folder)) == (digest, "weights")
    assert (tmp_path / "cache" / "weight-hashes.json").is_file()
    other = save_tiny(llama_model(seed=1), tmp_path / "m2")
    assert content_hash(str(other))[0] != digest
    # No weights on disk: the config is what identifies it.
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text("{}")
    assert content_hash(str(tmp_path / "cfg"))[1] == "config"


def test_model_record_of_an_in_memory_model_hashes_its_config():
    record = model_record(tiny_llama(seed=0), "tiny")
    assert record.hash_of == "config" and record.n_layers == 4
    assert record.sha256 != model_record(tiny_llama(seed=0, layers=3), "tiny").sha256


def _study_with_trials(objective_name: str = "latency") -> tuple[optuna.Study, object]:
    objective = load_objective(objective_name)
    study = optuna.create_study(directions=objective.directions)
    dist = optuna.distributions.IntDistribution(1, 8)
    for number, (k, latency) in enumerate([(2, 12.0), (4, 9.5), (6, 11.0)]):
        study.add_trial(optuna.trial.create_trial(
            params={"k": k}, distributions={"k": dist}, values=[latency],
            user_attrs={"config": {"method": "ngram", "k": k},
                        "metrics": {"latency_ms_per_token": latency, "speedup": 20 / latency,
                                    "pos_acc": [0.5, float("nan")]}}))
    return study, objective


def test_best_json_of_a_study_is_a_valid_frozen_config():
    study, objective = _study_with_trials()
    doc = best_document(study, objective, _context())
    assert problems(doc) == []
    assert doc["params"]["k"] == 4 and doc["provenance"]["trial"] == 1
    assert doc["objective"]["values"] == {"latency_ms_per_token": 9.5}
    assert doc["metrics"]["pos_acc"] == [0.5, None]
    assert doc["model"]["id"] == "tiny" and doc["provenance"]["sampler"] == "tpe"


def _write(tmp_path: Path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else data)
    return str(path)


def test_validate_cli_reports_each_kind(tmp_path, capsys):
    frozen = _write(tmp_path, "best.json", _doc())
    plain = _write(tmp_path, "c.json", {"method": "ngram", "k": 2})
    space = _write(tmp_path, "s.yaml", "knobs:\n  k: {type: int, low: 1, high: 4}\n")
    objective = _write(tmp_path, "o.yaml", "metrics: [speedup]\n")
    assert main(["validate", frozen, plain, space, objective]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[1] for line in out] == [
        "valid frozen config", "valid config", "valid search space", "valid objective"]
    assert "ngram k=3" in out[0] and "10.00 ms/token" in out[0]


def test_validate_cli_lists_every_problem_and_fails(tmp_path, capsys):
    doc = _doc()
    doc["params"].update(k=0, exit_policy="sometimes")
    path = _write(tmp_path, "best.json", doc)
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{path}: params.exit_policy: 'sometimes' is not one of 'fixed', "
                   "'confidence', 'adaptive', 'heuristic'",
                   f"{path}: params.k: 0 is less than the minimum of 1",
                   f"{path}: invalid frozen config (2 problems)"]


def test_validate_cli_points_at_the_line_of_a_bad_space(tmp_path, capsys):
    space = _write(tmp_path, "s.yaml", "knobs:\n  k: {type: int, low: 1, high: 4}\n"
                                       "  gama: {type: float, low: 0.1, high: 0.9}\n")
    assert main(["validate", space]) == 2
    err = capsys.readouterr().err
    assert ":3:" in err and "gama" in err and "did you mean 'gamma'" in err


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a mapping, found list"),
])
def test_validate_cli_unreadable_or_foreign_files(tmp_path, capsys, content, message):
    path = tmp_path / "x.json"
    path.write_text(content)
    assert main(["validate", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_load_frozen_is_one_line_with_a_pointer_to_validate(tmp_path):
    doc = _doc()
    doc["params"].update(k=0, gamma=3)
    path = _write(tmp_path, "best.json", doc)
    from autotune.common.errors import AutotuneError
    with pytest.raises(AutotuneError, match=r"params.gamma: 3 is greater.*\(and 1 more; run "
                                            r"autotune validate"):
        load_frozen(path)


# -- consumers of the format on a tiny model ------------------------------------------

@pytest.fixture
def tiny_frozen(tmp_path, monkeypatch):
    """A frozen config whose model is a tiny Llama saved on disk, workload a text file."""
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    model = save_tiny(llama_model(seed=1, layers=4), tmp_path / "llama")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("t1 t2 t3 t4 t1 t2\nt5 t6 t7 t5 t6\n")
    context = _context()
    digest, hash_of = content_hash(str(model))
    context["model"] = {**model_record(tiny_llama(seed=1), str(model)).to_json(),
                        "spec": str(model), "path": str(model), "sha256": digest,
                        "hash_of": hash_of}
    context["workload"].update(source=str(prompts), prompts=2, max_new_tokens=6)
    doc = frozen_document({"method": "layer_skip", "k": 3, "attn_skip": [1, 2]},
                          metrics={"latency_ms_per_token": 1.0, "speedup": 1.0,
                                   "lossless": True},
                          objective={"name": "latency"}, context=context)
    path = tmp_path / "best.json"
    path.write_text(json.dumps(doc))
    return path


def test_measure_config_remeasures_with_the_recorded_model_and_workload(tiny_frozen, capsys):
    assert main(["measure", "--config", str(tiny_frozen), "--device", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["objective"] == "latency"
    assert out["recorded"]["latency_ms_per_token"] == 1.0
    now = out["now"]
    assert now["prompts"] == 2 and now["max_new_tokens"] == 6 and now["lossless"] is True
    assert now["config"]["attn_skip"] == [1, 2]
    # Same weights, same machine, nothing overridden: nothing to warn about.
    assert out["notes"] == []


def test_measure_config_says_when_the_weights_differ(tiny_frozen, capsys):
    doc = json.loads(tiny_frozen.read_text())
    doc["model"]["sha256"] = "0" * 64
    tiny_frozen.write_text(json.dumps(doc))
    assert main(["measure", "--config", str(tiny_frozen), "--device", "cpu", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 1 and notes[0].startswith("model differs: recorded tiny-llama-1 (000000000000), now ")


def _rewrite(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_measure_config_says_when_the_prompts_differ(tiny_frozen, capsys):
    """The recorded workload hash is checked against the prompts measured now."""
    measured = workload_digest(load_workload(str(tiny_frozen.parent / "prompts.txt")))
    _rewrite(tiny_frozen, lambda doc: doc["workload"].update(sha256=measured))
    assert main(["measure", "--config", str(tiny_frozen), "--device", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []

    _rewrite(tiny_frozen, lambda doc: doc["workload"].update(sha256="f" * 16))
    assert main(["measure", "--config", str(tiny_frozen), "--device", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == [
        f"prompts differ: the recorded metrics from the search's 2 prompts (ffffffffffff), "
        f"now 2 prompts ({measured[:12]})"]


def test_measure_config_says_when_the_draft_differs(tiny_frozen, capsys):
    """A draft_model config: the same draft says nothing, other draft weights a line."""
    folder = save_tiny(llama_model(seed=2, layers=2), tiny_frozen.parent / "draft")
    digest, hash_of = content_hash(str(folder))
    record = {**model_record(tiny_llama(seed=2, layers=2), str(folder)).to_json(),
              "spec": str(folder), "path": str(folder), "sha256": digest, "hash_of": hash_of}

    def draft_model(doc):
        doc["params"] = {"method": "draft_model", "k": 2}
        doc["draft"] = record
    _rewrite(tiny_frozen, draft_model)
    assert main(["measure", "--config", str(tiny_frozen), "--device", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["now"]["config"]["method"] == "draft_model" and out["notes"] == []

    _rewrite(tiny_frozen, lambda doc: doc["draft"].update(sha256="0" * 64))
    assert main(["measure", "--config", str(tiny_frozen), "--device", "cpu", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert notes == [f"draft differs: recorded tiny-llama-2 (000000000000), now "
                     f"{folder} ({digest[:12]})"]


def _validated_doc(search_sha: str, validation_sha: str) -> dict:
    doc = _doc()
    doc["workload"]["sha256"] = search_sha
    doc["validation"] = {"source": "40% of builtin held out (seed 0)", "prompts": 3,
                         "workload_sha256": validation_sha, "speedup": 1.1,
                         "ci90": [1.05, 1.15]}
    return doc


def test_prompt_notes_of_a_validated_config_say_where_each_figure_came_from():
    search, held_out, other = "1" * 16, "2" * 16, "3" * 16
    doc = _validated_doc(search, held_out)

    def notes(sha: str) -> list[str]:
        return describe_environment_change(doc, None, None, prompts_sha256=sha, prompts_count=5)

    # The search's own prompts: the table compares like with like.
    assert notes(search) == []
    assert notes(held_out) == [
        "prompts: measured on the validation prompts; compare speedup with the validated "
        "speedup 1.100x [1.050, 1.150] from 3 held-out prompts (40% of builtin held out "
        "(seed 0); 222222222222); the recorded metrics from the search's 2 prompts "
        "(111111111111)"]
    assert notes(other) == [
        "prompts: measured on 5 prompts (333333333333), neither figure's prompts: the "
        "recorded metrics from the search's 2 prompts (111111111111); the validated speedup "
        "1.100x [1.050, 1.150] from 3 held-out prompts (40% of builtin held out (seed 0); "
        "222222222222)"]
    # No "differs": a validated config is expected to be re-measured on other prompts.
    assert not any("differ" in line for line in notes(other) + notes(held_out))


def test_draft_notes_when_a_draft_appears_or_goes():
    doc = _doc()
    draft = {"id": "d", "sha256": "d" * 64}
    assert describe_environment_change(doc, None, None, draft=None) == []
    assert describe_environment_change(doc, None, None, draft=draft) == [
        "draft differs: recorded none, now d (dddddddddddd)"]
    doc["draft"] = draft
    assert describe_environment_change(doc, None, None, draft=draft) == []
    assert describe_environment_change(doc, None, None, draft=None) == [
        "draft differs: recorded d (dddddddddddd), now none"]
    # Without prompts given, none are compared.
    doc["workload"]["sha256"] = "e" * 16
    assert describe_environment_change(doc, None, None, draft=draft) == []


def test_measure_config_table_and_overrides(tiny_frozen, capsys):
    assert main(["measure", "--config", str(tiny_frozen), "--device", "cpu",
                 "--max-new-tokens", "4", "--set", "k=2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["metric", "recorded", "now", "now/recorded"]
    assert "latency_ms_per_token" in out and "speedup" in out
    assert "note: overridden on the command line: --max-new-tokens, --set k" in out


def test_generate_streams_the_same_text_as_plain_decoding(tiny_frozen, capsys):
    assert main(["generate", "--config", str(tiny_frozen), "--prompt", "t1 t2 t3",
                 "--device", "cpu", "--max-new-tokens", "6"]) == 0
    spec = capsys.readouterr()
    assert main(["generate", "--model", str(tiny_frozen.parent / "llama"), "--prompt",
                 "t1 t2 t3", "--device", "cpu", "--max-new-tokens", "6"]) == 0
    plain = capsys.readouterr()
    assert spec.out == plain.out and spec.out.strip()
    assert "6 tokens in" in spec.err and "tau" in spec.err and "ms/token" in spec.err
    assert "tau 1.00" in plain.err


def test_generate_rejects_an_invalid_frozen_config(tiny_frozen, capsys):
    doc = json.loads(tiny_frozen.read_text())
    doc["params"]["k"] = 0
    tiny_frozen.write_text(json.dumps(doc))
    assert main(["generate", "--config", str(tiny_frozen), "--prompt", "x"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "params.k: 0 is less than the minimum of 1" in err[0]
