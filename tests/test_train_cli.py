"""`autotune train-draft` end to end on a tiny Llama: the folder it writes (drafter.json,
weights, the engines' checkpoints) drafts losslessly through `measure --draft`; a run
killed with SIGKILL resumes from its checkpoint; bad inputs get one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file
from tiny import gpt2_model, llama_model, one_thread, save_tiny  # noqa: F401

from autotune.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny Llama folder and a 12-prompt workload in two categories."""
    root = tmp_path_factory.mktemp("train")
    model = save_tiny(llama_model(seed=3, scale=4.0), root / "llama")
    lines = [json.dumps({"id": f"p{i}", "category": "code" if i % 2 else "chat",
                         "prompt": " ".join(f"t{(7 * i + j) % 60 + 1}" for j in range(6))})
             for i in range(12)]
    workload = root / "prompts.jsonl"
    workload.write_text("\n".join(lines) + "\n")
    return root, model, workload


def _args(model: Path, workload: Path, out: Path, kind: str, minutes: str = "0.05") -> list[str]:
    return ["train-draft", "--model", str(model), "--device", "cpu", "--workload",
            str(workload), "--kind", kind, "--minutes", minutes, "--out", str(out),
            "--max-new-tokens", "16", "--validation", "0.3"]


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_train_draft_writes_a_drafter_that_measure_uses_losslessly(folder, kind, tmp_path,
                                                                    capsys):
    root, model, workload = folder
    out = tmp_path / kind
    assert main(_args(model, workload, out, kind)) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert f"{kind} drafter written to {out}" in err and "held-out top-1" in err
    meta = json.loads((out / "drafter.json").read_text())
    assert meta["kind"] == kind and meta["training"]["steps"] > 0
    # Trained on the search split only: 30% of 12 held out, stratified.
    assert meta["trained_on"]["prompts"] < 12
    assert not (out / "checkpoint.pt").exists()
    vllm = load_file(str(out / "vllm" / "model.safetensors"))
    if kind == "eagle":
        assert "fc.weight" in vllm and "fc.bias" not in vllm
        assert "layers.0.input_layernorm.weight" not in vllm
        assert "fc.bias" in load_file(str(out / "sglang" / "model.safetensors"))
        assert json.loads((out / "sglang" / "config.json").read_text())["architectures"] == [
            "LlamaForCausalLMEagle"]
    else:
        assert "lm_heads.0.weight" in vllm and "blocks.0.layers.0.bias" in vllm
        assert json.loads((out / "vllm" / "config.json").read_text())["num_heads"] == 4
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload",
                 str(workload), "--prompts", "3", "--max-new-tokens", "12", "--json",
                 "--draft", str(out), "--set", f"method={kind}", "--set", "k=3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["lossless"] is True and summary["mean_accepted_tokens"] > 1.0
    # A second run into a finished folder is refused (nothing is overwritten).
    assert main(_args(model, workload, out, kind)) == 2
    assert "already holds a trained drafter" in capsys.readouterr().err


def test_a_killed_run_resumes_from_its_checkpoint(folder, tmp_path):
    root, model, workload = folder
    out = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "autotune.cli.main",
               *_args(model, workload, out, "medusa", minutes="5"), "--checkpoint-every", "0.5"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (out / "checkpoint.pt").is_file():
            assert process.poll() is None, "train-draft ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 5 minutes"
            time.sleep(0.2)
        time.sleep(0.3)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    assert not (out / "drafter.json").exists()          # nothing half-written
    # The same run with a budget of about what its checkpoint has spent: it resumes
    # (the budget is not part of a run's identity) and finishes at once.
    again = [sys.executable, "-m", "autotune.cli.main",
             *_args(model, workload, out, "medusa", minutes="0.01")]
    done = subprocess.run(again, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "drafter.json").read_text())
    assert meta["training"]["resumed"] is True


@pytest.mark.parametrize("extra, message", [
    (["--minutes", "0"], "--minutes must be positive"),
    (["--medusa-heads", "0"], "--medusa-heads must lie in 1..16"),
    (["--prompts", "1"], "--prompts must be at least 2"),
    (["--checkpoint-every", "-1"], "--checkpoint-every must be positive"),
    (["--max-steps", "0"], "--max-steps must be at least 1"),
])
def test_bad_arguments_are_one_line(folder, tmp_path, capsys, extra, message):
    root, model, workload = folder
    assert main(_args(model, workload, tmp_path / "x", "medusa") + extra) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_model_off_the_compact_forward_is_refused(tmp_path, folder, capsys):
    root, _, workload = folder
    model = save_tiny(gpt2_model(seed=1), tmp_path / "gpt2")
    assert main(_args(model, workload, tmp_path / "x", "eagle")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "compact Llama-family forward" in err[-1] and "gpt2" in err[-1]


def test_a_drafter_of_another_model_is_refused(folder, tmp_path, capsys):
    root, model, workload = folder
    out = tmp_path / "eagle"
    assert main(_args(model, workload, out, "eagle")) == 0
    other = save_tiny(llama_model(seed=5, scale=4.0), tmp_path / "other")
    code = main(["measure", "--model", str(other), "--device", "cpu", "--workload",
                 str(workload), "--prompts", "2", "--max-new-tokens", "6", "--draft", str(out),
                 "--set", "method=eagle"])
    assert code == 2
    assert "was trained on" in capsys.readouterr().err
