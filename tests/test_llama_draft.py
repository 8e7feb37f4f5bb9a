"""llama-server's draft-simple (`llama_draft`): the truncated-layer GGUF draft autotune
writes, the server drafting with it (lossless, its own counts, its settings as it reports
them), the export (its flags, the draft beside it, the script that writes a missing one)
and the refusals.

The server tests start real servers on the default model's GGUF and skip where no
llama-server binary is found, except in CI (`AUTOTUNE_REQUIRE_LLAMA_SERVER=1`)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from test_exports import frozen
from test_llama_server import CODE, PROSE, _gguf, backend, needs_server  # noqa: F401

from autotune.backends.llama_server import LlamaServerBackend, find_server
from autotune.backends.llama_server_process import ServerProcess
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.exports import engine_losses, export
from autotune.models import gguf_draft

LAYERS = 8


@pytest.fixture(scope="module")
def truncated(tmp_path_factory) -> Path:
    return gguf_draft.write_truncated(_gguf(), LAYERS,
                                      tmp_path_factory.mktemp("draft") / "first8.gguf")


def test_the_truncated_draft_is_the_targets_first_blocks_byte_for_byte(truncated):
    from gguf import GGUFReader
    source, draft = GGUFReader(_gguf()), GGUFReader(truncated)
    assert gguf_draft.block_count(truncated) == LAYERS
    assert gguf_draft.block_count(_gguf()) == 30
    kept = {t.name: t for t in source.tensors
            if not t.name.startswith("blk.") or int(t.name.split(".")[1]) < LAYERS}
    assert sorted(t.name for t in draft.tensors) == sorted(kept)
    for tensor in draft.tensors:
        theirs = kept[tensor.name]
        assert tensor.tensor_type == theirs.tensor_type           # no re-quantisation
        assert np.array_equal(tensor.data, theirs.data)
    # Every other key as it was (the tokenizer: the server checks the vocabularies match).
    for key, field in source.fields.items():
        if key.startswith("GGUF.") or key == "llama.block_count":
            continue
        assert str(draft.fields[key].contents()) == str(field.contents()), key


def test_truncation_refuses_bad_depths_and_files_in_one_line(tmp_path, capsys):
    with pytest.raises(AutotuneError, match="at least 1 block"):
        gguf_draft.write_truncated(_gguf(), 0, tmp_path / "x.gguf")
    with pytest.raises(AutotuneError, match="keeps 1..29 of") as caught:
        gguf_draft.write_truncated(_gguf(), 30, tmp_path / "x.gguf")
    assert "\n" not in str(caught.value)
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file at all")
    with pytest.raises(AutotuneError, match="cannot read"):
        gguf_draft.write_truncated(bogus, 4, tmp_path / "y.gguf")
    assert not list(tmp_path.glob("*.partial")) and not (tmp_path / "y.gguf").exists()
    assert gguf_draft.main([str(tmp_path / "none.gguf"), "4", str(tmp_path / "z.gguf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: GGUF file not found") and err.count("\n") == 1


def test_the_cache_writes_once_per_file_and_depth(tmp_path, monkeypatch):
    calls = []
    real = gguf_draft.write_truncated
    monkeypatch.setattr(gguf_draft, "write_truncated",
                        lambda *a: calls.append(a) or real(*a))
    first = gguf_draft.cached_truncated(_gguf(), 2, tmp_path)
    again = gguf_draft.cached_truncated(_gguf(), 2, tmp_path)
    assert first == again and len(calls) == 1 and gguf_draft.block_count(first) == 2


def test_configs_and_exports_check_the_draft(tmp_path):
    with pytest.raises(AutotuneError, match="one depth"):
        DecodeConfig(method="llama_draft", exits=(4, 8)).validate()
    with pytest.raises(AutotuneError, match="exit_policy=fixed"):
        DecodeConfig(method="llama_draft", exits=(4,), exit_policy="confidence").validate()
    with pytest.raises(AutotuneError, match="llama_draft_p_min"):
        DecodeConfig(method="llama_draft", exits=(4,), llama_draft_p_min=1.5).validate()
    with pytest.raises(AutotuneError, match="llama-server only"):
        from autotune.methods.llama_draft.drafter import LlamaDraftDrafter
        LlamaDraftDrafter.build(None)
    # No exits and no --draft: nothing to draft with.
    config = DecodeConfig(method="llama_draft", engine="llama_server").validate()
    assert engine_losses(config, "llama_server", has_draft=False)
    assert engine_losses(config, "llama_server", has_draft=True) == []
    assert engine_losses(DecodeConfig(method="llama_draft", exits=(4,)), "llama_server",
                         has_draft=False) == []
    # Only llama-server runs it.
    assert engine_losses(DecodeConfig(method="llama_draft", exits=(4,)), "vllm", False)


def test_a_draft_that_is_not_gguf_is_refused_in_one_line(tmp_path):
    from autotune.backends.base import BackendUnavailable
    from autotune.backends.llama_server import draft_gguf_for
    with pytest.raises(BackendUnavailable, match="give --draft FILE.gguf"):
        draft_gguf_for(str(tmp_path))


def _draft_config(**knobs) -> DecodeConfig:
    values = dict(method="llama_draft", exits=(LAYERS,), k=4, llama_draft_n_min=0,
                  llama_draft_p_min=0.5, engine="llama_server")
    return DecodeConfig(**{**values, **knobs}).validate()


@needs_server
def test_draft_simple_is_lossless_and_its_flags_take_effect(backend, tmp_path, monkeypatch):
    """Greedy draft-simple with the target's first 8 layers gives the same tokens as the
    same server without speculation and drafts (its own counts, the type it reports in
    /slots). The server reports no draft limits, so they are checked by their effect on
    its counts: n_max 1 with p_min 0 drafts exactly one token a round, n_max 4 up to
    four, and p_min 0.9 stops most drafts."""
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    plain = backend.runner(DecodeConfig())
    try:
        status, answer = plain.server.request("POST", "/tokenize", {"content": PROSE})
        prose = answer["tokens"]
        status, answer = plain.server.request("POST", "/tokenize", {"content": CODE})
        code = answer["tokens"]
        wants = [plain.generate(p, 48, time.perf_counter).tokens for p in (code, prose)]
    finally:
        plain.close()
    counts = {}
    for k, p_min in ((1, 0.0), (4, 0.0), (4, 0.9)):
        runner = backend.runner(_draft_config(k=k, llama_draft_p_min=p_min))
        try:
            draft = Path(runner.args[runner.args.index("-md") + 1])
            assert draft.parent == tmp_path / "gguf-drafts" and draft.is_file()
            got = [runner.generate(p, 48, time.perf_counter) for p in (code, prose)]
            assert [g.tokens for g in got] == wants                  # lossless
            drafted, accepted = (sum(g.draft_totals[i] for g in got) for i in (0, 1))
            rounds = sum(len(g.tokens) - 1 - g.draft_totals[1] for g in got)
            counts[k, p_min] = drafted, accepted, rounds
            assert runner.slots()[0]["params"]["speculative.types"] == "none,draft-simple"
        finally:
            runner.close()
    drafted, accepted, rounds = counts[1, 0.0]
    # One token every round (the last round of a prompt that reaches its budget drafts
    # nothing: the server drafts at most the tokens left minus one).
    assert rounds - 2 <= drafted <= rounds and 0 < accepted <= drafted
    drafted, accepted, rounds = counts[4, 0.0]
    assert 3 * rounds < drafted <= 4 * rounds                     # up to n_max
    assert counts[4, 0.9][0] < counts[4, 0.0][0] / 4              # p_min stops drafts


@needs_server
def test_the_exported_script_writes_its_draft_and_the_export_reproduces_the_drafts(
        backend, tmp_path, monkeypatch):
    """The export names the draft beside it; its script writes a missing draft, and
    the exported flags draft and accept exactly what the backend measured."""
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    knobs = dict(method="llama_draft", exits=[LAYERS], k=3, llama_draft_n_min=1,
                 llama_draft_p_min=0.3, engine="llama_server")
    files = export(frozen(**knobs), "llama_server").files
    data = json.loads(files["llama_server/llama_server.json"])
    assert data["draft"] == {"file": f"llama_server/draft-first{LAYERS}.gguf",
                             "from": data["args"][1], "layers": LAYERS}
    args = data["args"]
    assert args[args.index("--spec-type") + 1] == "draft-simple"
    assert args[args.index("-md") + 1] == data["draft"]["file"]
    assert [args[args.index(f) + 1] for f in ("--spec-draft-n-max", "--spec-draft-n-min",
                                              "--spec-draft-p-min")] == ["3", "1", "0.3"]
    # The script, with the frozen doc's placeholder model swapped for the real file.
    folder = tmp_path / "exports"
    script = folder / "llama_server" / "run-llama-server.sh"
    script.parent.mkdir(parents=True)
    script.write_text(files["llama_server/run-llama-server.sh"].replace(
        data["args"][1], str(_gguf())))
    env = {**os.environ, "PATH": f"{find_server().parent}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", str(script), "--version"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    written = folder / data["draft"]["file"]
    assert gguf_draft.block_count(written) == LAYERS

    measured = backend.runner(DecodeConfig(**{**knobs, "exits": (LAYERS,)}))
    try:
        status, answer = measured.server.request("POST", "/tokenize", {"content": PROSE})
        prompt = answer["tokens"]
        want = measured.generate(prompt, 48, time.perf_counter)
    finally:
        measured.close()
    args = [str(_gguf()) if a == data["args"][1] else str(written) if a == data["draft"]["file"]
            else a for a in args]
    with ServerProcess(find_server(), args + ["-t", "1", "-c", "1024"]) as server:
        answer = server.post("/completion", {**data["request"], "prompt": prompt,
                                             "n_predict": 48, "cache_prompt": False,
                                             "return_tokens": True})
    timings = answer["timings"]
    assert timings["draft_n"] > 0
    assert (timings["draft_n"], timings["draft_n_accepted"]) == want.draft_totals
    assert answer["tokens"] == want.tokens


@needs_server
def test_measure_in_the_server_from_the_cli(tmp_path, monkeypatch, capsys):
    """`measure --in llama_server` runs llama_draft with the target's first layers; our
    decoder and a draft that is not GGUF are refused in one line."""
    from autotune.cli.main import main
    from autotune.models.loading import cache_root

    # A private cache for the drafts written, sharing the real cache's models/: the
    # default model's converted copy is made once per machine, not by each CLI call here
    # (dequantising the GGUF took 16 s a call, most of this test).
    models = cache_root() / "models"
    models.mkdir(parents=True, exist_ok=True)
    (tmp_path / "models").symlink_to(models, target_is_directory=True)
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    common = ["--workload", "copy_edit", "--prompts", "2", "--max-new-tokens", "8", "--json"]
    assert main(["measure", "--in", "llama_server", "--set", "method=llama_draft",
                 "--set", "exits=4", "--set", "k=2", *common]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["measured_by"] == "llama_server" and summary["drafted_tokens"] > 0
    assert main(["measure", "--in", "llama_server", "--draft", str(tmp_path),
                 "--set", "method=llama_draft", *common]) == 2
    err = capsys.readouterr().err.strip()
    assert "give --draft FILE.gguf" in err and "\n" not in err
    assert main(["measure", "--set", "method=llama_draft", "--set", "exits=4", *common]) == 2
    err = capsys.readouterr().err.strip()
    assert "llama-server only" in err and "\n" not in err


def test_the_run_exports_folder_holds_the_draft_beside_the_command(tmp_path):
    """A run's exports/ holds the truncated draft the command names (made from the
    model's GGUF), and its README lists it."""
    from autotune.frozen.document import frozen_document
    from autotune.runs.exports_folder import write_exports
    model = {"id": "SmolLM2-135M-Instruct", "spec": "default", "path": "/models/smollm2",
             "sha256": "a" * 64, "hash_of": "weights", "dtype": "float32", "n_layers": 30}
    doc = frozen_document({"method": "llama_draft", "exits": [4], "k": 2,
                           "engine": "llama_server"}, context={"model": model})
    best = tmp_path / "best.json"
    best.write_text(json.dumps(doc))
    out = tmp_path / "exports"
    names = write_exports(best, out)
    assert names[:3] == ["llama_server/llama_server.json", "llama_server/run-llama-server.sh",
                         "llama_server/draft-first4.gguf"]
    assert gguf_draft.block_count(out / "llama_server" / "draft-first4.gguf") == 4
    assert "llama_server/draft-first4.gguf" in (out / "README.txt").read_text()
    assert "draft-first4.gguf" in (out / "launch.md").read_text()


@needs_server
def test_a_gguf_draft_drafts_whole_or_truncated(backend, truncated, tmp_path, monkeypatch):
    """With --draft FILE.gguf, no exits drafts with the whole file and exits=[L] with its
    first L layers (the draft's depth, not the target's)."""
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    with_draft = LlamaServerBackend.for_model("default", None, None, [[1, 2, 3]], 16,
                                              draft_spec=str(truncated))
    whole = _draft_config(exits=(), k=2)
    assert with_draft.draft_for(whole) == truncated
    assert gguf_draft.block_count(with_draft.draft_for(_draft_config(exits=(3,)))) == 3
    assert with_draft.draft_for(_draft_config(exits=(LAYERS,))) == truncated
    runner = with_draft.runner(whole)
    try:
        status, answer = runner.server.request("POST", "/tokenize", {"content": PROSE})
        generation = runner.generate(answer["tokens"], 16, time.perf_counter)
        assert runner.args[runner.args.index("-md") + 1] == str(truncated)
        assert generation.draft_totals[0] > 0
    finally:
        runner.close()
    with pytest.raises(AutotuneError, match="none was given"):
        backend.draft_for(whole)
