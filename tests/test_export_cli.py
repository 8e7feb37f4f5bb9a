"""`autotune export` on the command line and the `exports/` folder of a run."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.exports import schema
from autotune.frozen.document import frozen_document
from autotune.runs.exports_folder import write_exports

jsonschema = pytest.importorskip("jsonschema")

DRAFT = {"id": "tiny-draft", "spec": "org/tiny-draft", "path": "/models/d",
         "sha256": "c" * 64, "hash_of": "weights", "dtype": "float32", "n_layers": 2}
MODEL = {"id": "tiny", "spec": "org/tiny", "path": "/models/t", "sha256": "a" * 64,
         "hash_of": "weights", "dtype": "float32", "n_layers": 4}


def _write(tmp_path, name="best.json", draft=True, **params):
    doc = frozen_document({"method": "draft_model", "k": 4, **params},
                          context={"model": MODEL, "draft": DRAFT if draft else None})
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_export_to_stdout_is_the_engine_config(tmp_path, capsys):
    path = _write(tmp_path)
    assert main(["export", str(path), "--format", "vllm", "--draft-tp", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(out, schema("vllm"))
    assert out == {"method": "draft_model", "model": "org/tiny-draft",
                   "num_speculative_tokens": 4, "draft_sample_method": "greedy",
                   "draft_tensor_parallel_size": 2}


def test_export_to_a_file_writes_siblings(tmp_path, capsys):
    path = _write(tmp_path)
    out = tmp_path / "out" / "sglang.yaml"
    out.parent.mkdir()
    assert main(["export", str(path), "--format", "sglang", "-o", str(out)]) == 0
    args = yaml.safe_load(out.read_text())
    jsonschema.validate(args, schema("sglang"))
    assert args["speculative-algorithm"] == "STANDALONE"
    line = (tmp_path / "out" / "sglang.sh").read_text()
    assert "--speculative-algorithm STANDALONE" in line
    assert "--speculative-draft-model-path org/tiny-draft" in line
    # topk 1: num-draft-tokens = steps + 1.
    assert "--speculative-num-steps 4" in line and "--speculative-num-draft-tokens 5" in line


def test_hf_export_to_a_file_keeps_the_assistants_config(tmp_path, capsys):
    """Both of HF's files end in .json: the assistant's goes next to -o by its own name."""
    path = _write(tmp_path, exit_policy="heuristic", engine="hf")
    out = tmp_path / "out" / "target.json"
    out.parent.mkdir()
    assert main(["export", str(path), "--format", "hf", "-o", str(out)]) == 0
    target = json.loads(out.read_text())
    assistant = json.loads((tmp_path / "out" / "assistant_generation_config.json").read_text())
    assert "num_assistant_tokens" not in target and target["do_sample"] is False
    assert assistant == {"num_assistant_tokens": 4,
                         "num_assistant_tokens_schedule": "heuristic_transient",
                         "assistant_confidence_threshold": 0.0}
    capsys.readouterr()
    # On stdout, stderr names each document in turn.
    assert main(["export", str(path), "--format", "hf"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["autotune: hf/generation_config.json:",
                                         "autotune: hf/assistant_generation_config.json:"]


def test_what_a_format_cannot_express_is_an_error_unless_lossy(tmp_path, capsys):
    path = _write(tmp_path, exit_policy="adaptive")
    assert main(["export", str(path), "--format", "vllm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exit_policy=adaptive" in err[0] and "--lossy" in err[0]
    assert main(["export", str(path), "--format", "vllm", "--lossy"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["num_speculative_tokens"] == 4
    warnings = captured.err.strip().splitlines()
    assert warnings and all(w.startswith("autotune: warning: dropped ") for w in warnings)
    assert any("target_acceptance" in w for w in warnings)


@pytest.mark.parametrize("argv, message", [
    (["--format", "vlm"], "did you mean 'vllm'"),
    (["--format", "vllm", "--draft-tp", "0"], "draft_tensor_parallel_size=0"),
    (["--format", "llama_cpp"], "llama_cpp (llama-cpp-python) was retired: use llama_server"),
])
def test_bad_export_arguments_are_one_line(tmp_path, capsys, argv, message):
    path = _write(tmp_path)
    assert main(["export", str(path), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_export_of_a_non_frozen_file_is_refused(tmp_path, capsys):
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"method": "ngram"}))
    assert main(["export", str(path), "--format", "vllm"]) == 2
    assert "not a frozen config" in capsys.readouterr().err


@pytest.mark.parametrize("version", ["autotune.frozen/v3", "autotune.frozen/v4"])
def test_a_best_json_tuned_for_the_retired_llama_cpp_is_one_line(tmp_path, capsys, version):
    """v3 files could record `engine: llama_cpp` (frozen-v3's schema keeps it, as
    written); reading one, in any version, names the retirement, not a schema enum."""
    doc = frozen_document({"method": "ngram", "k": 10, "ngram_min": 1, "ngram_max": 2},
                          context={"model": MODEL})
    doc["schema"] = version
    doc["params"]["engine"] = "llama_cpp"
    path = tmp_path / "best.json"
    path.write_text(json.dumps(doc))
    retired = "llama_cpp (llama-cpp-python) was retired: use llama_server"
    assert main(["export", str(path), "--format", "llama_server"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"autotune: error: {path}: params.engine: ")
    assert retired in err[0] and "python -m autotune.backends.llama_server_install" in err[0]
    assert main(["validate", str(path)]) != 0
    assert retired in capsys.readouterr().err
    # The library's reader (exports, measure --config, the report) says the same.
    from autotune.frozen.checks import read_parts
    with pytest.raises(AutotuneError, match="retired: use llama_server"):
        read_parts(doc)


def test_run_exports_replace_a_previous_best(tmp_path):
    out = tmp_path / "exports"
    names = write_exports(_write(tmp_path, method="ngram", engine="vllm", draft=False), out)
    # Measured under vLLM's rules: TensorRT-LLM's pool drafts otherwise.
    assert names == ["vllm.json", "launch.md"]
    assert {p.name for p in out.iterdir()} == {"vllm.json", "launch.md", "README.txt"}
    names = write_exports(_write(tmp_path, method="layer_skip", attn_skip=[1, 2], draft=False),
                          out)
    assert names == ["dv.json", "launch.md"]
    assert {p.name for p in out.iterdir()} == {"dv.json", "launch.md", "README.txt"}
    readme = (out / "README.txt").read_text()
    assert "vllm: not written: vllm cannot express method=layer_skip" in readme
    # Nothing left over beside it from the swap.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.json", "exports"]


def test_report_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("autotune: error: ")
    assert not (tmp_path / "nowhere").exists()


def _trial_doc(number: int, value: float, speedup: float = 1.1, **params) -> dict:
    doc = frozen_document({"method": "ngram", "k": 4, **params}, metrics={"speedup": speedup},
                          objective={"name": "latency", "values": {"latency_ms_per_token": value}},
                          context={"model": MODEL, "draft": None}, trial={"trial": number})
    return doc


def test_a_format_that_cannot_express_the_best_gets_the_best_it_can(tmp_path):
    # A run searched with --target vllm: every trial measured with vLLM's rules.
    best = _trial_doc(14, 17.7, ngram_min=3, ngram_max=4, exit_policy="heuristic",
                      engine="vllm")
    best_path = tmp_path / "best.json"
    best_path.write_text(json.dumps(best))
    slow_mask = _trial_doc(2, 33.0, speedup=0.65, engine="vllm")
    slow_mask["params"].update(method="layer_skip", attn_skip=[1])
    slow_mask["metrics"]["speedup"] = 0.65
    fallbacks = [best, _trial_doc(7, 21.1, ngram_min=1, ngram_max=4, engine="vllm"),
                 _trial_doc(9, 25.0, ngram_min=1, ngram_max=2, engine="vllm"), slow_mask]
    out = tmp_path / "exports"
    names = write_exports(best_path, out, fallbacks)
    # TensorRT-LLM's n-gram pool drafts otherwise than vLLM: no trial is exact for it.
    assert names == ["vllm.json", "launch.md"]
    # The fastest fallback the format expresses exactly: trial 7, not 9.
    assert json.loads((out / "vllm.json").read_text())["prompt_lookup_max"] == 4
    readme = (out / "README.txt").read_text()
    assert "best trial #14 (ngram k=4 n=3..4 heuristic; latency_ms_per_token 17.7)" in readme
    assert ("vllm: vllm.json: trial #7 (ngram k=4 n=1..4; latency_ms_per_token 21.1), the best "
            "trial vllm expresses exactly (for the best trial: vllm cannot express "
            "exit_policy=heuristic") in readme
    # transformers cuts n-gram drafts at EOS: no trial measured with vLLM's rules is exact.
    assert ("hf: not written: hf cannot express ngram_min=3, exit_policy=heuristic, "
            "engine=vllm: use --lossy; search with --target hf to measure it as HF "
            "transformers runs it; no other trial it expresses beat the AR baseline") in readme
    assert ("trtllm: not written: trtllm cannot express exit_policy=heuristic, ngram_min=3, "
            "engine=vllm: use --lossy; search with --target trtllm to measure it as "
            "TensorRT-LLM runs it; no other trial it expresses beat the AR baseline") in readme
    # The layer-skip trial is slower than AR: no advice, even for the one format for it.
    assert "dv.json" not in names
    assert "dv: not written: dv cannot express method=ngram" in readme
    assert "launch.md: how to start each engine with its files" in readme
    launch = (out / "launch.md").read_text()
    sections = [line for line in launch.splitlines() if line.startswith("## ")]
    assert sections == ["## vLLM (vllm.json)"]
    line = next(l for l in launch.splitlines() if l.startswith("vllm serve "))
    assert json.loads(shlex.split(line)[4]) == json.loads((out / "vllm.json").read_text())
    assert "trtllm-serve" not in launch and not (out / "trtllm.json").exists()


def test_run_exports_of_a_config_measured_with_our_rules(tmp_path):
    # Searched without --target: our n-gram rule (latest occurrence) is no engine's.
    out = tmp_path / "exports"
    names = write_exports(_write(tmp_path, method="ngram", ngram_min=1, draft=False), out)
    readme = (out / "README.txt").read_text()
    assert names == []
    assert ("vllm: not written: vllm cannot express engine=autotune: use --lossy; search "
            "with --target vllm to measure it as vLLM runs it") in readme
    assert "sglang: not written: sglang cannot express ngram_max=3: use --lossy" in readme
    assert not (out / "launch.md").exists()


def test_run_exports_note_an_approximate_measurement(tmp_path):
    out = tmp_path / "exports"
    names = write_exports(_write(tmp_path, method="ngram", ngram_min=1, engine="sglang",
                                 draft=False), out)
    assert names == ["sglang/sglang.yaml", "sglang/sglang.sh", "launch.md"]
    readme = (out / "README.txt").read_text().splitlines()
    at = readme.index("sglang: sglang/sglang.yaml, sglang/sglang.sh")
    assert readme[at + 1].startswith("  measured approximately: SGLang drafts n-grams from a "
                                     "trie shared by all requests")
    launch = (out / "launch.md").read_text()
    assert "\nmeasured approximately: SGLang drafts n-grams from a trie" in launch


def test_run_exports_launch_every_format_of_a_draft_model(tmp_path):
    out = tmp_path / "exports"
    names = write_exports(_write(tmp_path, temperature=0.0), out)
    assert names == ["vllm.json", "sglang/sglang.yaml", "sglang/sglang.sh",
                     "hf/generation_config.json", "hf/assistant_generation_config.json",
                     "trtllm.json", "trtllm.yaml", "launch.md"]
    assert json.loads((out / "hf" / "assistant_generation_config.json").read_text()) == {
        "num_assistant_tokens": 4, "num_assistant_tokens_schedule": "constant",
        "assistant_confidence_threshold": 0.0}
    launch = (out / "launch.md").read_text()
    assert [line for line in launch.splitlines() if line.startswith("## ")] == [
        "## vLLM (vllm.json)", "## SGLang (sglang/sglang.yaml, sglang/sglang.sh)",
        "## Hugging Face transformers (hf/generation_config.json, "
        "hf/assistant_generation_config.json)",
        "## TensorRT-LLM (trtllm.json, trtllm.yaml)"]
    assert ("assistant_model.generation_config.update(**tuned("
            "'assistant_generation_config.json'))") in launch
    assert "model.generate(**inputs, assistant_model=assistant_model" in launch
    assert launch.count('Requests: greedy: temperature 0') == 3
