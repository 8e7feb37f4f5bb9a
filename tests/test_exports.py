"""Exports: frozen config -> vLLM / SGLang / transformers / TensorRT-LLM / Draft & Verify.

No model is loaded: frozen documents are built by hand. Every valid output is checked
against the format's JSON Schema shipped in autotune/exports/schemas/, and the
transformers output is loaded into a real GenerationConfig and validated strictly.
"""

from __future__ import annotations

import copy
import json
import shlex
from typing import Any

import jsonschema
import pytest
import yaml

from autotune.decoding.config import DecodeConfig
from autotune.decoding.methods import MethodSpec, register_method, unregister_method
from autotune.errors import AutotuneError
from autotune.exports import FORMATS, Export, export, expressible, schema

TARGET = {"id": "SmolLM2-135M-Instruct", "spec": "default", "path": "/models/smollm2-135m",
          "sha256": "0" * 64, "hash_of": "weights", "dtype": "float32", "n_layers": 30,
          "model_type": "llama"}
DRAFT = {"id": "SmolLM2-small", "spec": "HuggingFaceTB/SmolLM2-small", "path": "/models/small",
         "sha256": "1" * 64, "hash_of": "weights", "dtype": "float32", "n_layers": 12,
         "model_type": "llama"}


def frozen(draft: dict | None = None, model: dict | None = None, **params: Any) -> dict:
    """A minimal FrozenConfig document: every canonical key, overridden by `params`."""
    values = DecodeConfig().to_dict()
    values.update(params)
    return {"schema": "autotune.frozen/v1", "params": values, "metrics": {},
            "model": dict(model or TARGET), "draft": dict(draft) if draft else None,
            "workload": {"temperature": values["temperature"], "top_p": values["top_p"]}}


def valid(fmt: str, text: str) -> dict:
    """Parse the primary file and validate it against the repo schema."""
    data = json.loads(text)
    jsonschema.Draft202012Validator(schema(fmt)).validate(data)
    return data


def error_of(fmt: str, doc: dict, lossy: bool = False, **kw: Any) -> str:
    with pytest.raises(AutotuneError) as info:
        export(doc, fmt, lossy=lossy, **kw)
    message = str(info.value)
    assert "\n" not in message
    return message


def load_hf(result: Export, tmp_path) -> Any:
    """Write the HF folder, load it with transformers and validate strictly; also check
    that every written value round-trips."""
    from transformers import GenerationConfig

    data = valid("hf", result.primary())
    config = GenerationConfig.from_dict(copy.deepcopy(data))
    config.validate(strict=True)
    for key, value in data.items():
        assert getattr(config, key) == value, key
    for name, text in result.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    loaded = GenerationConfig.from_pretrained(tmp_path / "hf")
    loaded.validate(strict=True)
    for key, value in data.items():
        assert getattr(loaded, key) == value, key
    return loaded


# ---------------------------------------------------------------- n-gram


def test_ngram_vllm_trtllm_hf(tmp_path) -> None:
    doc = frozen(method="ngram", k=3, ngram_min=1, ngram_max=4)
    assert expressible(doc) == ["vllm", "hf", "trtllm"]

    result = export(doc, "vllm")
    assert list(result.files) == ["vllm.json"] and result.dropped == []
    assert valid("vllm", result.primary()) == {
        "method": "ngram", "num_speculative_tokens": 3,
        "prompt_lookup_max": 4, "prompt_lookup_min": 1}

    result = export(doc, "trtllm")
    assert list(result.files) == ["trtllm.json", "trtllm.yaml"]
    spec = valid("trtllm", result.primary())
    assert spec == {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 4,
                    "is_keep_all": True, "is_use_oldest": False, "is_public_pool": False}
    assert yaml.safe_load(result.files["trtllm.yaml"]) == {"speculative_config": spec}

    config = load_hf(export(doc, "hf"), tmp_path)
    assert config.prompt_lookup_num_tokens == 3 and config.max_matching_ngram_size == 4
    assert config.num_assistant_tokens is None and config.do_sample is False


def test_ngram_sglang_needs_lossy() -> None:
    doc = frozen(method="ngram", k=3, ngram_min=1, ngram_max=4)
    assert error_of("sglang", doc) == (
        "sglang cannot express ngram_max=4: use --format vllm, hf or trtllm, or --lossy")
    result = export(doc, "sglang", lossy=True)
    assert list(result.files) == ["sglang.json", "sglang.sh"]
    args = valid("sglang", result.primary())
    assert args == {"model_path": "/models/smollm2-135m", "speculative_algorithm": "NGRAM",
                    "speculative_num_draft_tokens": 4,
                    "speculative_ngram_min_bfs_breadth": 1,
                    "speculative_ngram_max_bfs_breadth": 1,
                    "speculative_ngram_max_trie_depth": 7}
    assert len(result.dropped) == 1 and result.dropped[0].startswith("ngram_max=4: ")


def test_ngram_min_is_lossy_where_engines_have_no_minimum() -> None:
    doc = frozen(method="ngram", k=2, ngram_min=2, ngram_max=3)
    assert expressible(doc) == ["vllm"]
    assert valid("vllm", export(doc, "vllm").primary())["prompt_lookup_min"] == 2
    assert error_of("hf", doc) == "hf cannot express ngram_min=2: use --format vllm, or --lossy"
    assert error_of("trtllm", doc) == (
        "trtllm cannot express ngram_min=2: use --format vllm, or --lossy")
    assert error_of("sglang", doc) == (
        "sglang cannot express ngram_min=2, ngram_max=3: use --format vllm, or --lossy")
    result = export(doc, "hf", lossy=True)
    assert result.dropped[0].startswith("ngram_min=2: ")
    assert valid("hf", result.primary())["max_matching_ngram_size"] == 3


def test_ngram_policies() -> None:
    # Draft confidence of n-grams is always 1: a confidence threshold never stops them.
    inert = frozen(method="ngram", exit_policy="confidence", gamma=0.9)
    assert expressible(inert) == ["vllm", "hf", "trtllm"]
    schedule = frozen(method="ngram", exit_policy="heuristic", k=2)
    assert expressible(schedule) == []
    assert error_of("hf", schedule) == "hf cannot express exit_policy=heuristic: use --lossy"
    result = export(schedule, "hf", lossy=True)
    assert result.dropped == ["exit_policy=heuristic: transformers' prompt lookup always "
                              "proposes prompt_lookup_num_tokens; exported as fixed k=2"]
    assert valid("hf", result.primary())["prompt_lookup_num_tokens"] == 2


def test_ngram_is_not_a_dv_config_even_lossy() -> None:
    doc = frozen(method="ngram")
    expected = ("dv cannot express method=ngram (ngram_min, ngram_max): "
                "use --format vllm, hf or trtllm")
    assert error_of("dv", doc) == expected
    assert error_of("dv", doc, lossy=True) == expected


# ---------------------------------------------------------------- draft model


def test_draft_model_fixed_everywhere(tmp_path) -> None:
    doc = frozen(DRAFT, method="draft_model", k=5)
    assert expressible(doc) == ["vllm", "sglang", "hf", "trtllm"]

    spec = valid("vllm", export(doc, "vllm").primary())
    assert spec == {"method": "draft_model", "model": "HuggingFaceTB/SmolLM2-small",
                    "num_speculative_tokens": 5}
    spec = valid("vllm", export(doc, "vllm", options={"draft_tensor_parallel_size": 2}).primary())
    assert spec["draft_tensor_parallel_size"] == 2

    result = export(doc, "sglang")
    args = valid("sglang", result.primary())
    assert args == {"model_path": "/models/smollm2-135m",
                    "speculative_algorithm": "STANDALONE",
                    "speculative_draft_model_path": "HuggingFaceTB/SmolLM2-small",
                    "speculative_num_steps": 5, "speculative_eagle_topk": 1,
                    "speculative_num_draft_tokens": 6}
    # SGLang's rule: topk 1 forces num_draft_tokens = num_steps + 1.
    assert args["speculative_num_draft_tokens"] == args["speculative_num_steps"] + 1
    words = shlex.split(result.files["sglang.sh"])
    assert words[:5] == ["python", "-m", "sglang.launch_server", "--model-path",
                         "/models/smollm2-135m"]
    assert dict(zip(words[3::2], words[4::2])) == {
        "--" + key.replace("_", "-"): str(value) for key, value in args.items()}

    spec = valid("trtllm", export(doc, "trtllm").primary())
    assert spec == {"decoding_type": "Draft_Target", "max_draft_len": 5,
                    "speculative_model": "HuggingFaceTB/SmolLM2-small"}

    config = load_hf(export(doc, "hf"), tmp_path)
    assert config.num_assistant_tokens == 5
    assert config.num_assistant_tokens_schedule == "constant"
    assert config.assistant_confidence_threshold is None

    assert error_of("dv", doc) == (
        "dv cannot express method=draft_model (draft): use --format vllm, sglang, hf or trtllm")


def test_draft_model_confidence_only_hf(tmp_path) -> None:
    doc = frozen(DRAFT, method="draft_model", k=6, exit_policy="confidence", gamma=0.4)
    assert expressible(doc) == ["hf"]
    for fmt in ("vllm", "sglang", "trtllm"):
        assert error_of(fmt, doc) == (
            f"{fmt} cannot express exit_policy=confidence (gamma): use --format hf, or --lossy")
    config = load_hf(export(doc, "hf"), tmp_path)
    assert config.assistant_confidence_threshold == 0.4
    assert config.num_assistant_tokens == 6

    result = export(doc, "vllm", lossy=True)
    assert result.dropped == [
        "exit_policy=confidence: vLLM drafts a fixed number of tokens every round; exported "
        "as fixed k=6",
        "gamma=0.4: dropped with exit_policy=confidence"]
    assert valid("vllm", result.primary())["num_speculative_tokens"] == 6


def test_draft_model_heuristic(tmp_path) -> None:
    doc = frozen(DRAFT, method="draft_model", k=3, exit_policy="heuristic")
    assert expressible(doc) == ["hf"]
    config = load_hf(export(doc, "hf"), tmp_path)
    # Our schedule restarts from k for every prompt, as "heuristic_transient" does.
    assert config.num_assistant_tokens_schedule == "heuristic_transient"
    result = export(doc, "trtllm", lossy=True)
    assert result.dropped == ["exit_policy=heuristic: TensorRT-LLM drafts a fixed number of "
                              "tokens every round; exported as fixed k=3"]
    assert valid("trtllm", result.primary())["max_draft_len"] == 3


def test_draft_model_adaptive_is_lossy_everywhere(tmp_path) -> None:
    doc = frozen(DRAFT, method="draft_model", exit_policy="adaptive", gamma=0.5)
    assert expressible(doc) == []
    assert error_of("vllm", doc) == (
        "vllm cannot express exit_policy=adaptive (gamma, target_acceptance, epsilon, beta1, "
        "beta2): use --lossy")
    assert error_of("hf", doc) == (
        "hf cannot express exit_policy=adaptive (target_acceptance, epsilon, beta1, beta2): "
        "use --lossy")
    result = export(doc, "hf", lossy=True)
    assert [line.split(":")[0] for line in result.dropped] == [
        "exit_policy=adaptive", "target_acceptance=0.85", "epsilon=0.01", "beta1=0.5",
        "beta2=0.9"]
    config = load_hf(result, tmp_path)
    assert config.assistant_confidence_threshold == 0.5
    for fmt in ("vllm", "sglang", "trtllm"):
        result = export(doc, fmt, lossy=True)
        valid(fmt, result.primary())
        assert len(result.dropped) == 6 and result.dropped[1] == (
            "gamma=0.5: dropped with exit_policy=adaptive")


def test_sampling_is_not_a_loss(tmp_path) -> None:
    doc = frozen(DRAFT, method="draft_model", temperature=0.7, top_p=0.9)
    assert expressible(doc) == ["vllm", "sglang", "hf", "trtllm"]
    config = load_hf(export(doc, "hf"), tmp_path)
    assert (config.do_sample, config.temperature, config.top_p) == (True, 0.7, 0.9)
    assert "temperature" not in export(doc, "vllm").primary()


def test_draft_model_without_draft_is_an_error() -> None:
    # The frozen reader's one message for the rule (autotune validate says the same).
    assert error_of("vllm", frozen(method="draft_model")) == (
        "draft: method=draft_model needs the draft model recorded under 'draft'")


# ---------------------------------------------------------------- layer skip


def test_layer_skip_only_dv() -> None:
    doc = frozen(method="layer_skip", k=6, attn_skip=[5, 3, 12], mlp_skip=[7],
                 exit_policy="confidence", gamma=0.7)
    assert expressible(doc) == ["dv"]
    result = export(doc, "dv")
    assert list(result.files) == ["dv.json"]
    data = valid("dv", result.primary())
    assert data == {"SmolLM2-135M-Instruct": {
        "attention": [3, 5, 12], "mlp": [7], "generate_fn": "essg",
        "generate_kwargs": {"max_step_draft": 6, "th_stop_draft": 0.7,
                            "auto_th_stop_draft": False, "do_sample": False}}}
    for fmt in ("vllm", "sglang", "hf", "trtllm"):
        expected = f"{fmt} cannot express method=layer_skip (attn_skip, mlp_skip): use --format dv"
        assert error_of(fmt, doc) == expected
        assert error_of(fmt, doc, lossy=True) == expected


def test_layer_skip_dv_policies() -> None:
    fixed = valid("dv", export(frozen(method="layer_skip", attn_skip=[1]), "dv").primary())
    kwargs = fixed["SmolLM2-135M-Instruct"]["generate_kwargs"]
    assert kwargs["th_stop_draft"] == 0.0 and kwargs["auto_th_stop_draft"] is False

    adaptive = frozen(method="layer_skip", attn_skip=[1], exit_policy="adaptive", gamma=0.6,
                      target_acceptance=0.8, epsilon=0.02, beta1=0.4, beta2=0.95,
                      temperature=0.8, top_p=0.95)
    entry = valid("dv", export(adaptive, "dv").primary())["SmolLM2-135M-Instruct"]
    assert entry["generate_fn"] == "sss"
    assert entry["generate_kwargs"] == {
        "max_step_draft": 4, "th_stop_draft": 0.6, "auto_th_stop_draft": True,
        "auto_parameters": [1, 0.4, 0.8, 0.02, 0.95], "do_sample": True,
        "do_sample_draft": True, "temperature": 0.8, "top_p": 0.95, "top_k": 0}

    heuristic = frozen(method="layer_skip", mlp_skip=[2], exit_policy="heuristic", k=3)
    assert expressible(heuristic) == []
    assert error_of("dv", heuristic) == "dv cannot express exit_policy=heuristic: use --lossy"
    result = export(heuristic, "dv", lossy=True)
    assert result.dropped == ["exit_policy=heuristic: Draft & Verify has no K schedule; "
                              "exported as fixed max_step_draft=3"]


# ---------------------------------------------------------------- sorted exit


def test_sorted_exit_one_exit_is_hf_early_exit(tmp_path) -> None:
    doc = frozen(method="sorted_exit", exits=[10], thresholds=[0.3], k=4)
    assert expressible(doc) == ["hf"]
    config = load_hf(export(doc, "hf"), tmp_path)
    assert config.assistant_early_exit == 10 and config.num_assistant_tokens == 4
    assert error_of("vllm", doc) == (
        "vllm cannot express method=sorted_exit (exits, thresholds): use --format hf")


def test_sorted_exit_two_exits_needs_lossy(tmp_path) -> None:
    doc = frozen(method="sorted_exit", exits=[8, 16], thresholds=[0.5])
    assert expressible(doc) == []
    assert error_of("hf", doc) == "hf cannot express exits=[8, 16] (thresholds): use --lossy"
    assert error_of("trtllm", doc, lossy=True) == (
        "trtllm cannot express method=sorted_exit (exits, thresholds): "
        "use --format hf with --lossy")
    result = export(doc, "hf", lossy=True)
    assert result.dropped == [
        "exits=[8, 16]: transformers exits at one layer only; exported "
        "assistant_early_exit=16 (the deepest exit, which always emits)",
        "thresholds=[0.5]: dropped with exits=[8, 16]"]
    assert load_hf(result, tmp_path).assistant_early_exit == 16


def test_sorted_exit_over_a_draft_model_has_no_format() -> None:
    doc = frozen(DRAFT, method="sorted_exit", exits=[4, 12])
    assert expressible(doc) == []
    assert error_of("hf", doc, lossy=True) == (
        "hf cannot express method=sorted_exit (exits, thresholds, draft): "
        "no export format carries it")


# ---------------------------------------------------------------- general


@pytest.mark.parametrize("fmt", FORMATS)
def test_baseline_has_nothing_to_export(fmt: str) -> None:
    doc = frozen(method="none")
    assert expressible(doc) == []
    assert error_of(fmt, doc, lossy=True) == (
        "the best config is plain autoregressive decoding; there is nothing to export")


def test_a_method_no_engine_knows_is_refused_by_every_format() -> None:
    register_method(MethodSpec("toy", label="toy", color="#000000", drafter=object))
    try:
        doc = frozen(method="toy")
        assert expressible(doc) == []
        for fmt in FORMATS:
            expected = f"{fmt} cannot express method=toy: no export format carries it"
            assert error_of(fmt, doc) == expected
            assert error_of(fmt, doc, lossy=True) == expected
    finally:
        unregister_method("toy")


def test_unknown_format_and_options() -> None:
    doc = frozen(method="ngram")
    assert error_of("vlm", doc) == (
        "unknown export format 'vlm' (did you mean 'vllm'?); formats: vllm, sglang, hf, "
        "trtllm, dv")
    assert error_of("vllm", doc, options={"draft_tp": 2}).startswith(
        "unknown export option 'draft_tp'")
    assert error_of("vllm", doc, options={"draft_tensor_parallel_size": 0}) == (
        "draft_tensor_parallel_size=0 must be an integer >= 1")


def test_model_references() -> None:
    gguf = dict(DRAFT, spec="/models/small-q8.gguf")
    spec = valid("vllm", export(frozen(gguf, method="draft_model"), "vllm").primary())
    assert spec["model"] == "/models/small"
    hub = dict(TARGET, spec="HuggingFaceTB/SmolLM2-135M-Instruct")
    args = valid("sglang", export(frozen(DRAFT, model=hub, method="draft_model"),
                                  "sglang").primary())
    assert args["model_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_paths_are_shell_quoted() -> None:
    spaced = dict(TARGET, path="/models/my model")
    result = export(frozen(DRAFT, model=spaced, method="draft_model"), "sglang")
    assert "'/models/my model'" in result.files["sglang.sh"]
    assert shlex.split(result.files["sglang.sh"])[4] == "/models/my model"


# ---------------------------------------------------------------- schemas


SAMPLES = {
    "vllm": frozen(method="ngram"),
    "sglang": frozen(DRAFT, method="draft_model"),
    "hf": frozen(DRAFT, method="draft_model"),
    "trtllm": frozen(DRAFT, method="draft_model"),
    "dv": frozen(method="layer_skip", attn_skip=[2]),
}
REQUIRED = {"vllm": "num_speculative_tokens", "sglang": "speculative_algorithm",
            "hf": "do_sample", "trtllm": "max_draft_len"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_schemas_are_not_vacuous(fmt: str) -> None:
    spec = schema(fmt)
    assert spec["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert spec["description"]
    validator = jsonschema.Draft202012Validator(spec)
    data = valid(fmt, export(SAMPLES[fmt], fmt).primary())
    # The object that holds the fields: D&V nests it under the model id.
    holder = data["SmolLM2-135M-Instruct"] if fmt == "dv" else data
    required = "attention" if fmt == "dv" else REQUIRED[fmt]

    missing = copy.deepcopy(data)
    (missing["SmolLM2-135M-Instruct"] if fmt == "dv" else missing).pop(required)
    assert not validator.is_valid(missing)

    extra = copy.deepcopy(data)
    (extra["SmolLM2-135M-Instruct"] if fmt == "dv" else extra)["speculative_bogus"] = 1
    assert not validator.is_valid(extra)

    assert validator.is_valid(data) and required in holder


def test_schema_conditionals() -> None:
    vllm = jsonschema.Draft202012Validator(schema("vllm"))
    assert not vllm.is_valid({"method": "draft_model", "num_speculative_tokens": 3})
    assert not vllm.is_valid({"method": "ngram", "num_speculative_tokens": 0,
                              "prompt_lookup_max": 3})
    trtllm = jsonschema.Draft202012Validator(schema("trtllm"))
    assert not trtllm.is_valid({"decoding_type": "Draft_Target", "max_draft_len": 3})
    assert trtllm.is_valid({"decoding_type": "DraftTarget", "max_draft_len": 3,
                            "speculative_model_dir": "/d"})
    hf = jsonschema.Draft202012Validator(schema("hf"))
    assert not hf.is_valid({"do_sample": False, "temperature": 0.7, "num_assistant_tokens": 3,
                            "num_assistant_tokens_schedule": "constant"})
    assert not hf.is_valid({"do_sample": False, "num_assistant_tokens": 3,
                            "num_assistant_tokens_schedule": "sometimes"})
    sglang = jsonschema.Draft202012Validator(schema("sglang"))
    assert not sglang.is_valid({"model_path": "m", "speculative_algorithm": "STANDALONE",
                                "speculative_num_steps": 3})
    dv = jsonschema.Draft202012Validator(schema("dv"))
    assert not dv.is_valid({})
    assert not dv.is_valid({"m": {"attention": [1, 1], "mlp": []}})
    assert not dv.is_valid({"m": {"attention": [], "mlp": [], "generate_kwargs": {
        "max_step_draft": 4, "th_stop_draft": 0.5, "auto_th_stop_draft": True}}})
