"""Exports: frozen config -> vLLM / SGLang / transformers / TensorRT-LLM / Draft & Verify /
llama-server (its own tests are in tests/test_llama_server.py).

No model is loaded (except the tiny ones that run the launch snippet of transformers):
frozen documents are built by hand. Every valid output is checked against the format's
JSON Schema shipped in autotune/exports/schemas/, and the transformers output is loaded
into real GenerationConfigs and validated strictly.
"""

from __future__ import annotations

import copy
import json
import shlex
from typing import Any

import jsonschema
import pytest
import yaml

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.schema.methods import MethodSpec, register_method, unregister_method
from autotune.exports import (
    FORMATS,
    Export,
    approximation,
    engine_losses,
    export,
    expressible,
    launch,
    schema,
)

TARGET = {"id": "SmolLM2-135M-Instruct", "spec": "default", "path": "/models/smollm2-135m",
          "sha256": "0" * 64, "hash_of": "weights", "dtype": "float32", "n_layers": 30,
          "model_type": "llama"}
DRAFT = {"id": "SmolLM2-small", "spec": "HuggingFaceTB/SmolLM2-small", "path": "/models/small",
         "sha256": "1" * 64, "hash_of": "weights", "dtype": "float32", "n_layers": 12,
         "model_type": "llama"}
# The fields transformers reads from the assistant's generation config (the target's for
# early exit, where the assistant is the target).
HF_ASSISTANT_FIELDS = ("num_assistant_tokens", "num_assistant_tokens_schedule",
                       "assistant_confidence_threshold")


def frozen(draft: dict | None = None, model: dict | None = None, **params: Any) -> dict:
    """A minimal FrozenConfig document: every canonical key, overridden by `params`."""
    values = DecodeConfig().to_dict()
    values.update(params)
    return {"schema": "autotune.frozen/v3", "params": values, "metrics": {},
            "model": dict(model or TARGET), "draft": dict(draft) if draft else None,
            "workload": {"temperature": values["temperature"], "top_p": values["top_p"]}}


def parse(fmt: str, text: str) -> Any:
    """A format's file as data: SGLang's is YAML, the others JSON."""
    return yaml.safe_load(text) if fmt == "sglang" else json.loads(text)


def valid(fmt: str, text: str) -> dict:
    """Parse the primary file and validate it against the repo schema."""
    data = parse(fmt, text)
    jsonschema.Draft202012Validator(schema(fmt)).validate(data)
    return data


def error_of(fmt: str, doc: dict, lossy: bool = False, **kw: Any) -> str:
    with pytest.raises(AutotuneError) as info:
        export(doc, fmt, lossy=lossy, **kw)
    message = str(info.value)
    assert "\n" not in message
    return message


def rules_error(fmt: str, measured: str, label: str, what: str | None = None) -> str:
    """The error line of a config measured under `measured`'s rules, exported to `fmt`."""
    what = what or f"engine={measured}"
    return (f"{fmt} cannot express {what}: use --lossy; search with --target {fmt} to "
            f"measure it as {label} runs it")


class HFConfigs:
    """The loaded generation configs of an hf export; attribute access reads a field
    from the config transformers reads it from: the assistant fields from the
    assistant's file when there is one, everything else from the target's."""

    def __init__(self, target: Any, assistant: Any | None,
                 kwargs: dict[str, Any] | None = None) -> None:
        self.target = target
        self.assistant = assistant
        self.kwargs = kwargs or {}        # arguments of the generate() call

    def __getattr__(self, name: str) -> Any:
        if name in self.kwargs:
            return self.kwargs[name]
        if name in HF_ASSISTANT_FIELDS and self.assistant is not None:
            return getattr(self.assistant, name)
        return getattr(self.target, name)


def load_hf(result: Export, tmp_path) -> HFConfigs:
    """Write the HF folder, load each file with transformers and validate strictly; also
    check that every written value round-trips."""
    from transformers import GenerationConfig

    assert list(result.files)[0] == "hf/generation_config.json"
    assert set(result.files) <= {"hf/generation_config.json",
                                 "hf/assistant_generation_config.json",
                                 "hf/generate_kwargs.json"}
    loaded = {}
    kwargs = json.loads(result.files.get("hf/generate_kwargs.json", "{}"))
    # generate()'s arguments are generation-config fields too: they must load as one.
    GenerationConfig.from_dict(copy.deepcopy(kwargs)).validate(strict=True)
    for name, text in result.files.items():
        if name == "hf/generate_kwargs.json":
            continue
        data = valid("hf", text)
        config = GenerationConfig.from_dict(copy.deepcopy(data))
        config.validate(strict=True)
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        read = GenerationConfig.from_pretrained(tmp_path / "hf",
                                                config_file_name=path.name)
        read.validate(strict=True)
        for key, value in data.items():
            assert getattr(config, key) == value, key
            assert getattr(read, key) == value, key
        loaded[path.name] = read
    return HFConfigs(loaded["generation_config.json"],
                     loaded.get("assistant_generation_config.json"), kwargs)


def hf_files(result: Export) -> dict[str, dict]:
    """hf file name -> its JSON."""
    return {name: json.loads(text) for name, text in result.files.items()}


# ---------------------------------------------------------------- n-gram


def test_ngram_measured_with_our_rules_is_exact_nowhere() -> None:
    # autotune drafts what it finds, up to the budget; vLLM pads its drafts to k and
    # drafts past the budget; transformers and TensorRT-LLM take the earliest occurrence
    # (and transformers cuts at EOS): the measured figures are not theirs.
    doc = frozen(method="ngram", k=3, ngram_min=1, ngram_max=4)
    assert expressible(doc) == []
    assert error_of("vllm", doc) == rules_error("vllm", "autotune", "vLLM")
    assert error_of("trtllm", doc) == rules_error("trtllm", "autotune", "TensorRT-LLM")
    assert error_of("hf", doc) == rules_error("hf", "autotune", "HF transformers")
    result = export(doc, "vllm", lossy=True)
    # vLLM's default runner matches as we do, but drafts its full K every step (padded,
    # and in every step, a request's last included: issue 61).
    assert result.dropped == [
        "engine=autotune: measured with autotune's rules: autotune drafts no more n-gram "
        "tokens than are left to generate; vLLM drafts all k n-gram tokens even when fewer "
        "are left to generate; autotune drafts only the n-gram tokens it finds; vLLM pads "
        "an n-gram draft to k tokens with the last token (k drafts verified every step); "
        "autotune stops drafting when one token is left; vLLM drafts n-gram tokens even "
        "when one token is left to generate; "
        "search with --target vllm to measure it as vLLM runs it"]
    assert valid("vllm", result.primary()) == {
        "method": "ngram", "num_speculative_tokens": 3,
        "prompt_lookup_max": 4, "prompt_lookup_min": 1}
    hf = export(doc, "hf", lossy=True).dropped
    assert hf == [
        "engine=autotune: measured with autotune's rules: autotune takes the most recent "
        "occurrence of the matched n-gram; HF transformers takes the earliest occurrence of "
        "the matched n-gram; autotune keeps EOS tokens in an n-gram draft; HF transformers "
        "cuts an n-gram draft before its first EOS token; autotune drafts no more n-gram "
        "tokens than are left to generate; HF transformers drafts all k n-gram tokens even "
        "when fewer are left to generate; search with --target hf to measure it as HF "
        "transformers runs it"]


def test_ngram_measured_as_vllm(tmp_path) -> None:
    doc = frozen(method="ngram", engine="vllm", k=3, ngram_min=1, ngram_max=4)
    # TensorRT-LLM takes the earliest occurrence (is_use_oldest) from its pool of
    # continuations filed when first seen; vLLM the most recent from the sequence.
    assert expressible(doc) == ["vllm"]

    result = export(doc, "vllm")
    assert list(result.files) == ["vllm.json"] and result.dropped == []
    assert valid("vllm", result.primary()) == {
        "method": "ngram", "num_speculative_tokens": 3,
        "prompt_lookup_max": 4, "prompt_lookup_min": 1}

    assert error_of("trtllm", doc) == (
        "trtllm cannot express engine=vllm: use --format vllm, or --lossy; search with "
        "--target trtllm to measure it as TensorRT-LLM runs it")
    result = export(doc, "trtllm", lossy=True)
    assert list(result.files) == ["trtllm.json", "trtllm.yaml"]
    assert result.dropped == [
        "engine=vllm: measured with vLLM's rules: vLLM takes the most recent occurrence of "
        "the matched n-gram; TensorRT-LLM takes the earliest occurrence of the matched "
        "n-gram; vLLM looks n-grams up in the sequence itself; TensorRT-LLM looks n-grams up "
        "in a per-request pool of continuations filed when first seen; vLLM drafts all k "
        "n-gram tokens even when fewer are left to generate; TensorRT-LLM drafts no more "
        "n-gram tokens than are left to generate; vLLM pads an n-gram draft to k tokens "
        "with the last token (k drafts verified every step); TensorRT-LLM drafts only the "
        "n-gram tokens it finds; vLLM drafts n-gram tokens even when one token is left to "
        "generate; TensorRT-LLM stops drafting when one token is left; search with "
        "--target trtllm to measure it as TensorRT-LLM runs it"]
    spec = valid("trtllm", result.primary())
    assert spec == {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 4,
                    "is_keep_all": True, "is_use_oldest": True, "is_public_pool": False}
    assert yaml.safe_load(result.files["trtllm.yaml"]) == {"speculative_config": spec}
    # transformers cuts an n-gram draft at EOS, vLLM does not.
    assert error_of("hf", doc) == (
        "hf cannot express engine=vllm: use --format vllm, or --lossy; search "
        "with --target hf to measure it as HF transformers runs it")
    assert approximation(doc, "vllm") is None
    # TensorRT-LLM's n-gram pool is reproduced exactly: no approximation note.
    assert approximation(doc, "trtllm") is None


def test_ngram_measured_as_hf(tmp_path) -> None:
    doc = frozen(method="ngram", engine="hf", k=3, ngram_min=1, ngram_max=4)
    assert expressible(doc) == ["hf"]
    result = export(doc, "hf")
    assert hf_files(result) == {"hf/generation_config.json": {
        "do_sample": False, "prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 4}}
    config = load_hf(result, tmp_path)
    assert config.prompt_lookup_num_tokens == 3 and config.max_matching_ngram_size == 4
    assert config.num_assistant_tokens is None and config.do_sample is False
    assert config.assistant is None


def test_ngram_measured_as_trtllm_is_exact_under_its_own_rules() -> None:
    doc = frozen(method="ngram", engine="trtllm", k=3, ngram_max=2)
    # Our decoder reproduces TensorRT-LLM's pool: exact there, and only there.
    assert expressible(doc) == ["trtllm"]
    assert approximation(doc, "trtllm") is None
    assert approximation(doc, "vllm") is None
    assert valid("trtllm", export(doc, "trtllm").primary()) == {
        "decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 2,
        "is_keep_all": True, "is_use_oldest": True, "is_public_pool": False}
    assert error_of("vllm", doc) == (
        "vllm cannot express engine=trtllm: use --format trtllm, or --lossy; search with "
        "--target vllm to measure it as vLLM runs it")


def test_ngram_sglang() -> None:
    doc = frozen(method="ngram", k=3, ngram_min=1, ngram_max=4)
    # Measured with our rules: the matching window is a loss (SGLang's trie has none).
    assert error_of("sglang", doc) == "sglang cannot express ngram_max=4: use --lossy"
    result = export(doc, "sglang", lossy=True)
    assert list(result.files) == ["sglang/sglang.yaml", "sglang/sglang.sh"]
    args = valid("sglang", result.primary())
    assert args == {"model-path": "/models/smollm2-135m", "speculative-algorithm": "NGRAM",
                    "speculative-num-draft-tokens": 4,
                    "speculative-ngram-min-bfs-breadth": 1,
                    "speculative-ngram-max-bfs-breadth": 1,
                    "speculative-ngram-max-trie-depth": 7}
    assert len(result.dropped) == 1 and result.dropped[0].startswith("ngram_max=4: ")
    assert approximation(doc, "sglang").startswith("SGLang drafts n-grams from a trie")

    # Measured as SGLang runs it: exact (with the engine's approximation note), the same
    # trie depth and breadth.
    doc = frozen(method="ngram", engine="sglang", k=3, ngram_min=1, ngram_max=4)
    assert expressible(doc) == ["sglang"]
    assert valid("sglang", export(doc, "sglang").primary()) == args
    assert approximation(doc, "sglang").startswith(
        "SGLang drafts n-grams from a trie shared by all requests")
    # A minimum stays a loss: the trie matches down to one token.
    doc = frozen(method="ngram", engine="sglang", k=3, ngram_min=2, ngram_max=4)
    assert error_of("sglang", doc) == "sglang cannot express ngram_min=2: use --lossy"


def test_ngram_min_is_lossy_where_engines_have_no_minimum() -> None:
    doc = frozen(method="ngram", engine="vllm", k=2, ngram_min=2, ngram_max=3)
    assert expressible(doc) == ["vllm"]
    assert valid("vllm", export(doc, "vllm").primary())["prompt_lookup_min"] == 2
    assert error_of("trtllm", doc) == (
        "trtllm cannot express ngram_min=2, engine=vllm: use --format vllm, or --lossy; "
        "search with --target trtllm to measure it as TensorRT-LLM runs it")
    assert error_of("sglang", doc) == (
        "sglang cannot express ngram_min=2, ngram_max=3, engine=vllm: use --format vllm, or "
        "--lossy; search with --target sglang to measure it as SGLang runs it")
    hf_doc = frozen(method="ngram", engine="hf", k=2, ngram_min=2, ngram_max=3)
    assert error_of("hf", hf_doc) == "hf cannot express ngram_min=2: use --lossy"
    result = export(hf_doc, "hf", lossy=True)
    assert result.dropped[0].startswith("ngram_min=2: ")
    assert valid("hf", result.primary())["max_matching_ngram_size"] == 3


def test_ngram_policies() -> None:
    # Draft confidence of n-grams is always 1: a confidence threshold never stops them.
    inert = frozen(method="ngram", engine="vllm", exit_policy="confidence", gamma=0.9)
    assert expressible(inert) == ["vllm"]
    inert_trtllm = frozen(method="ngram", engine="trtllm", exit_policy="confidence", gamma=0.9)
    assert expressible(inert_trtllm) == ["trtllm"]
    schedule = frozen(method="ngram", engine="hf", exit_policy="heuristic", k=2)
    assert expressible(schedule) == []
    assert error_of("hf", schedule) == "hf cannot express exit_policy=heuristic: use --lossy"
    result = export(schedule, "hf", lossy=True)
    assert result.dropped == ["exit_policy=heuristic: transformers' prompt lookup always "
                              "proposes prompt_lookup_num_tokens; exported as fixed k=2"]
    assert valid("hf", result.primary())["prompt_lookup_num_tokens"] == 2


def test_ngram_is_not_a_dv_config_even_lossy() -> None:
    doc = frozen(method="ngram", engine="vllm")
    expected = ("dv cannot express method=ngram (ngram_min, ngram_max, ngram_pool): "
                "use --format vllm")
    assert error_of("dv", doc) == expected
    assert error_of("dv", doc, lossy=True) == expected


# ---------------------------------------------------------------- draft model


def test_draft_model_fixed_everywhere(tmp_path) -> None:
    # Greedy: the engines' sampling rules do not apply, so our measurement is theirs.
    doc = frozen(DRAFT, method="draft_model", k=5)
    assert expressible(doc) == ["vllm", "sglang", "hf", "trtllm"]

    spec = valid("vllm", export(doc, "vllm").primary())
    assert spec == {"method": "draft_model", "model": "HuggingFaceTB/SmolLM2-small",
                    "num_speculative_tokens": 5, "draft_sample_method": "greedy"}
    spec = valid("vllm", export(doc, "vllm", options={"draft_tensor_parallel_size": 2}).primary())
    assert spec["draft_tensor_parallel_size"] == 2

    result = export(doc, "sglang")
    args = valid("sglang", result.primary())
    assert args == {"model-path": "/models/smollm2-135m",
                    "speculative-algorithm": "STANDALONE",
                    "speculative-draft-model-path": "HuggingFaceTB/SmolLM2-small",
                    "speculative-num-steps": 5, "speculative-eagle-topk": 1,
                    "speculative-num-draft-tokens": 6}
    assert list(args)[0] == "model-path"
    # SGLang's rule: topk 1 forces num_draft_tokens = num_steps + 1.
    assert args["speculative-num-draft-tokens"] == args["speculative-num-steps"] + 1
    words = shlex.split(result.files["sglang/sglang.sh"])
    assert words[:5] == ["python", "-m", "sglang.launch_server", "--model-path",
                         "/models/smollm2-135m"]
    assert dict(zip(words[3::2], words[4::2])) == {
        "--" + key: str(value) for key, value in args.items()}

    spec = valid("trtllm", export(doc, "trtllm").primary())
    assert spec == {"decoding_type": "Draft_Target", "max_draft_len": 5,
                    "speculative_model": "HuggingFaceTB/SmolLM2-small"}

    result = export(doc, "hf")
    assert hf_files(result) == {
        "hf/generation_config.json": {"do_sample": False},
        "hf/assistant_generation_config.json": {
            "num_assistant_tokens": 5, "num_assistant_tokens_schedule": "constant",
            # Unset would be transformers' 0.4: confidence stopping and ROC re-tuning.
            "assistant_confidence_threshold": 0.0}}
    config = load_hf(result, tmp_path)
    assert config.num_assistant_tokens == 5
    assert config.num_assistant_tokens_schedule == "constant"
    assert config.assistant_confidence_threshold == 0.0
    assert config.target.num_assistant_tokens is None

    assert error_of("dv", doc) == (
        "dv cannot express method=draft_model (draft): use --format vllm, sglang, hf or trtllm")


def test_draft_model_confidence_needs_hf_rules(tmp_path) -> None:
    # Our fixed threshold is not transformers': it re-tunes an assistant's threshold.
    doc = frozen(DRAFT, method="draft_model", k=6, exit_policy="confidence", gamma=0.4)
    assert expressible(doc) == []
    assert error_of("hf", doc) == rules_error("hf", "autotune", "HF transformers")
    assert export(doc, "hf", lossy=True).dropped == [
        "engine=autotune: measured with autotune's rules: autotune keeps the confidence "
        "threshold fixed; HF transformers re-tunes the draft model's confidence threshold "
        "every round (ROC curve); search with --target hf to measure it as HF transformers "
        "runs it"]
    for fmt in ("vllm", "sglang", "trtllm"):
        assert error_of(fmt, doc) == (
            f"{fmt} cannot express exit_policy=confidence (gamma): use --lossy")

    doc = frozen(DRAFT, method="draft_model", engine="hf", k=6, exit_policy="confidence",
                 gamma=0.4)
    assert expressible(doc) == ["hf"]
    # Measured with transformers' re-tuned threshold: a fixed-K engine differs in that
    # rule as well.
    for fmt, label in (("vllm", "vLLM"), ("sglang", "SGLang"), ("trtllm", "TensorRT-LLM")):
        assert error_of(fmt, doc) == (
            f"{fmt} cannot express exit_policy=confidence (gamma), engine=hf: use --format "
            f"hf, or --lossy; search with --target {fmt} to measure it as {label} runs it")
    result = export(doc, "hf")
    assert hf_files(result)["hf/assistant_generation_config.json"] == {
        "num_assistant_tokens": 6, "num_assistant_tokens_schedule": "constant",
        "assistant_confidence_threshold": 0.4}
    config = load_hf(result, tmp_path)
    assert config.assistant_confidence_threshold == 0.4
    assert config.target.assistant_confidence_threshold is None

    result = export(doc, "vllm", lossy=True)
    assert result.dropped[:2] == [
        "exit_policy=confidence: vLLM drafts a fixed number of tokens every round; exported "
        "as fixed k=6",
        "gamma=0.4: dropped with exit_policy=confidence"]
    assert result.dropped[2].startswith("engine=hf: measured with HF transformers's rules: "
                                        "HF transformers re-tunes")
    assert len(result.dropped) == 3
    assert valid("vllm", result.primary())["num_speculative_tokens"] == 6


def test_draft_model_heuristic(tmp_path) -> None:
    doc = frozen(DRAFT, method="draft_model", k=3, exit_policy="heuristic")
    assert expressible(doc) == ["hf"]
    config = load_hf(export(doc, "hf"), tmp_path)
    # Our schedule restarts from k for every prompt, as "heuristic_transient" does.
    assert config.num_assistant_tokens_schedule == "heuristic_transient"
    assert config.assistant_confidence_threshold == 0.0
    result = export(doc, "trtllm", lossy=True)
    assert result.dropped == ["exit_policy=heuristic: TensorRT-LLM drafts a fixed number of "
                              "tokens every round; exported as fixed k=3"]
    assert valid("trtllm", result.primary())["max_draft_len"] == 3


def test_draft_model_adaptive_is_lossy_everywhere(tmp_path) -> None:
    ours = frozen(DRAFT, method="draft_model", exit_policy="adaptive", gamma=0.5)
    doc = frozen(DRAFT, method="draft_model", engine="hf", exit_policy="adaptive", gamma=0.5)
    assert expressible(ours) == [] and expressible(doc) == []
    assert error_of("vllm", ours) == (
        "vllm cannot express exit_policy=adaptive (gamma, target_acceptance, epsilon, beta1, "
        "beta2): use --lossy")
    assert error_of("hf", doc) == (
        "hf cannot express exit_policy=adaptive (target_acceptance, epsilon, beta1, beta2): "
        "use --lossy")
    # Measured with our fixed-threshold rules, the ROC re-tuning is a loss as well.
    assert error_of("hf", ours) == rules_error(
        "hf", "autotune", "HF transformers",
        "exit_policy=adaptive (target_acceptance, epsilon, beta1, beta2), engine=autotune")
    result = export(doc, "hf", lossy=True)
    assert [line.split(":")[0] for line in result.dropped] == [
        "exit_policy=adaptive", "target_acceptance=0.85", "epsilon=0.01", "beta1=0.5",
        "beta2=0.9"]
    assert result.dropped[0] == (
        "exit_policy=adaptive: transformers has no adaptive γ rule; exported as the starting "
        "confidence threshold assistant_confidence_threshold=0.5 (γ0), which transformers "
        "re-tunes from an ROC curve after every round (with scikit-learn installed)")
    config = load_hf(result, tmp_path)
    assert config.assistant_confidence_threshold == 0.5
    for fmt in ("vllm", "sglang", "trtllm"):
        result = export(ours, fmt, lossy=True)
        valid(fmt, result.primary())
        assert len(result.dropped) == 6 and result.dropped[1] == (
            "gamma=0.5: dropped with exit_policy=adaptive")


def test_sampling_follows_the_engines_rules(tmp_path) -> None:
    # Sampling settings are request parameters, never lost; how the engine drafts and
    # verifies under sampling is: vLLM and SGLang draft the argmax and verify it as a
    # one-hot draft, TensorRT-LLM also accepts only drafts equal to its own sample.
    ours = frozen(DRAFT, method="draft_model", temperature=0.7, top_p=0.9)
    assert expressible(ours) == ["hf"]
    assert error_of("vllm", ours) == (
        "vllm cannot express engine=autotune: use --format hf, or --lossy; search with "
        "--target vllm to measure it as vLLM runs it")
    assert export(ours, "vllm", lossy=True).dropped == [
        "engine=autotune: measured with autotune's rules: autotune samples the draft model's "
        "tokens when sampling; vLLM drafts the draft model's argmax when sampling; search "
        "with --target vllm to measure it as vLLM runs it"]
    result = export(ours, "hf")
    assert hf_files(result)["hf/generation_config.json"] == {
        "do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 0}
    config = load_hf(result, tmp_path)
    assert (config.do_sample, config.temperature, config.top_p, config.top_k) == (
        True, 0.7, 0.9, 0)

    assert expressible(frozen(DRAFT, method="draft_model", engine="vllm", temperature=0.7,
                              top_p=0.9)) == ["vllm", "sglang"]
    trt = frozen(DRAFT, method="draft_model", engine="trtllm", temperature=0.7, top_p=0.9)
    assert expressible(trt) == ["trtllm"]
    assert export(trt, "vllm", lossy=True).dropped == [
        "engine=trtllm: measured with TensorRT-LLM's rules: TensorRT-LLM accepts sampled "
        "drafts only where they equal the target's sample; vLLM verifies sampled drafts by "
        "rejection sampling; search with --target vllm to measure it as vLLM runs it"]
    assert "temperature" not in export(trt, "trtllm").primary()


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


def test_layer_skip_dv_follows_our_rules() -> None:
    # The repository samples its drafts and verifies them by rejection sampling, as we do;
    # a config measured with an engine's greedy drafts is not what it runs.
    sampled = dict(method="layer_skip", attn_skip=[1], temperature=0.8, top_p=0.95)
    assert expressible(frozen(**sampled)) == ["dv"]
    doc = frozen(engine="sglang", **sampled)
    assert expressible(doc) == []
    assert error_of("dv", doc) == rules_error("dv", "sglang", "autotune").replace(
        "--target dv", "--target autotune")
    # Greedy: no sampling rule applies, so any engine's measurement is exact.
    assert expressible(frozen(method="layer_skip", attn_skip=[1], engine="sglang")) == ["dv"]


# ---------------------------------------------------------------- sorted exit


def test_sorted_exit_one_exit_is_hf_early_exit(tmp_path) -> None:
    doc = frozen(method="sorted_exit", exits=[10], thresholds=[0.3], k=4)
    assert expressible(doc) == ["hf"]
    result = export(doc, "hf")
    # The assistant is the target itself: its draft-length fields in the target's file;
    # the exit layer is an argument of generate() (on the model's config it would nest).
    assert hf_files(result) == {
        "hf/generation_config.json": {
            "do_sample": False, "num_assistant_tokens": 4,
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0},
        "hf/generate_kwargs.json": {"assistant_early_exit": 10}}
    config = load_hf(result, tmp_path)
    assert config.assistant_early_exit == 10 and config.num_assistant_tokens == 4
    assert error_of("vllm", doc) == (
        "vllm cannot express method=sorted_exit (exits, thresholds): use --format hf")


def test_sorted_exit_confidence_is_exact_in_hf(tmp_path) -> None:
    # Early exit never re-tunes its threshold (no ROC): our fixed threshold is exact, with
    # any engine's rules.
    for engine in ("autotune", "hf", "vllm"):
        doc = frozen(method="sorted_exit", exits=[10], k=4, exit_policy="confidence",
                     gamma=0.7, engine=engine)
        assert expressible(doc) == ["hf"], engine
    config = load_hf(export(doc, "hf"), tmp_path)
    assert config.assistant is None and config.assistant_confidence_threshold == 0.7
    adaptive = frozen(method="sorted_exit", exits=[10], exit_policy="adaptive", gamma=0.6)
    assert export(adaptive, "hf", lossy=True).dropped[0] == (
        "exit_policy=adaptive: transformers has no adaptive γ rule; exported as a confidence "
        "threshold fixed at γ0 (assistant_confidence_threshold=0.6)")


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


# ---------------------------------------------------------------- engine checks


def test_engine_losses_of_a_bare_config() -> None:
    ngram = DecodeConfig(method="ngram", k=3, ngram_min=1, ngram_max=4)
    assert engine_losses(ngram, "vllm", has_draft=False) == ["engine=autotune"]
    vllm_ngram = DecodeConfig(method="ngram", engine="vllm", k=3, ngram_min=2, ngram_max=4)
    assert engine_losses(vllm_ngram, "vllm", has_draft=False) == []
    assert engine_losses(vllm_ngram, "trtllm", has_draft=False) == [
        "ngram_min=2", "engine=vllm"]
    trtllm_ngram = DecodeConfig(method="ngram", engine="trtllm", k=3, ngram_max=4)
    assert engine_losses(trtllm_ngram, "trtllm", has_draft=False) == []
    assert engine_losses(trtllm_ngram, "vllm", has_draft=False) == ["engine=trtllm"]
    assert engine_losses(vllm_ngram, "sglang", has_draft=False) == [
        "ngram_min=2", "ngram_max=4", "engine=vllm"]
    assert engine_losses(vllm_ngram, "dv", has_draft=False) == [
        "method=ngram (ngram_min, ngram_max, ngram_pool)", "engine=vllm"]
    confidence = DecodeConfig(method="draft_model", engine="hf", exit_policy="confidence")
    assert engine_losses(confidence, "hf", has_draft=True) == []
    assert engine_losses(confidence, "vllm", has_draft=True) == [
        "exit_policy=confidence (gamma)", "engine=hf"]
    greedy = DecodeConfig(method="draft_model", engine="vllm")
    assert engine_losses(greedy, "vllm", has_draft=True) == []
    sampled = DecodeConfig(method="draft_model", engine="vllm", temperature=0.6)
    assert engine_losses(sampled, "vllm", has_draft=True) == []
    assert engine_losses(sampled, "trtllm", has_draft=True) == ["engine=vllm"]
    tree = DecodeConfig(method="draft_model", engine="sglang", tree_width=2, tree_depth=3)
    assert engine_losses(tree, "sglang", has_draft=True) == []
    assert engine_losses(tree, "vllm", has_draft=True) == ["tree_width=2 (tree_depth)"]
    # Early exit over a separate draft: transformers cannot run it at all.
    exits = DecodeConfig(method="sorted_exit", exits=(4,))
    assert engine_losses(exits, "hf", has_draft=False) == []
    assert engine_losses(exits, "hf", has_draft=True) == [
        "method=sorted_exit (exits, thresholds, draft)"]
    # Plain decoding runs everywhere.
    assert engine_losses(DecodeConfig(method="none"), "trtllm", has_draft=False) == []
    with pytest.raises(AutotuneError, match="unknown export format 'vlm'"):
        engine_losses(ngram, "vlm", has_draft=False)


def test_approximation_is_the_formats_engines_whatever_measured_it() -> None:
    sglang = DecodeConfig(method="ngram", engine="sglang")
    assert approximation(sglang, "sglang").startswith("SGLang drafts n-grams from a trie")
    assert approximation(sglang, "vllm") is None
    assert approximation(DecodeConfig(method="ngram"), "sglang").startswith("SGLang drafts")
    # A greedy draft model has no approximation note in SGLang; a sampled one has.
    assert approximation(DecodeConfig(method="draft_model", engine="sglang"), "sglang") is None
    sampled = DecodeConfig(method="draft_model", engine="sglang", temperature=0.7)
    assert "target-only tree kernel" in approximation(sampled, "sglang")
    # vLLM drafts a model's full K in every step, the last included (issue 61), which
    # autotune does not reproduce for a model drafter.
    assert approximation(sampled, "vllm").startswith("vLLM drafts the full K in every "
                                                     "step, a request's last included")
    assert approximation(DecodeConfig(method="ngram", engine="vllm"), "vllm") is None
    # TensorRT-LLM's n-gram pool is reproduced exactly: no note, whatever measured it.
    assert approximation(frozen(method="ngram", engine="trtllm"), "trtllm") is None
    assert approximation(DecodeConfig(method="ngram"), "trtllm") is None


def test_suffix_measured_as_vllm_exports_its_fields_and_runs_nowhere_else() -> None:
    from test_engine_fields import check_vllm

    doc = frozen(method="suffix", engine="vllm", k=12, suffix_max_tree_depth=32,
                 suffix_max_cached_requests=0, suffix_max_spec_factor=2.5,
                 suffix_min_token_prob=0.2)
    assert expressible(doc) == ["vllm"]
    result = export(doc, "vllm")
    assert list(result.files) == ["vllm.json"] and result.dropped == []
    spec = valid("vllm", result.primary())
    check_vllm(spec)
    assert spec == {"method": "suffix", "num_speculative_tokens": 12,
                    "suffix_decoding_max_tree_depth": 32,
                    "suffix_decoding_max_cached_requests": 0,
                    "suffix_decoding_max_spec_factor": 2.5,
                    "suffix_decoding_min_token_prob": 0.2}
    text = launch(doc, "vllm", result.files)
    assert "Model Runner V1" in text and "arctic-inference" in text
    # No other engine runs suffix decoding: a fatal loss naming the method.
    for fmt in ("sglang", "trtllm", "hf", "llama_server", "dv"):
        assert "method=suffix" in error_of(fmt, doc, lossy=True)


def test_a_suffix_schedule_is_dropped_on_vllm_as_a_named_loss() -> None:
    doc = frozen(method="suffix", engine="vllm", k=8)
    doc["schedule"] = {"method": "suffix", "batch_sizes": [1, 2, 4],
                       "objective": "throughput",
                       "ranges": [{"start": 1, "end": 1, "k": 8},
                                  {"start": 2, "end": 4, "k": 0}],
                       "points": [{"batch_size": 1, "k": 8, "split": "held_out",
                                   "speedup": 1.3, "ci90": [1.1, 1.4], "tokens_per_s": 80.0,
                                   "ar_tokens_per_s": 61.0, "tau": 2.3, "chosen": True}]}
    assert "schedule" in error_of("vllm", doc)
    result = export(doc, "vllm", lossy=True)
    spec = valid("vllm", result.primary())
    assert spec["num_speculative_tokens"] == 8
    assert "num_speculative_tokens_per_batch_size" not in spec
    assert any(line.startswith("schedule: vLLM runs suffix decoding on Model Runner V1")
               for line in result.dropped)


# ---------------------------------------------------------------- launch commands


def test_launch_vllm_is_one_shell_line() -> None:
    doc = frozen(DRAFT, method="draft_model", k=4, temperature=0.7, top_p=0.9, engine="vllm")
    result = export(doc, "vllm", options={"draft_tensor_parallel_size": 2})
    text = launch(doc, "vllm", result.files)
    assert text.startswith("## vLLM (vllm.json)\n")
    line = next(l for l in text.splitlines() if l.startswith("vllm serve "))
    words = shlex.split(line)
    assert words[:4] == ["vllm", "serve", "/models/smollm2-135m", "--speculative-config"]
    assert len(words) == 5 and json.loads(words[4]) == json.loads(result.primary())
    assert line.endswith("'" + words[4] + "'")        # single-quoted JSON
    assert 'Requests: the tuned sampling, `{"temperature": 0.7, "top_p": 0.9}`' in text
    greedy = frozen(method="ngram", engine="vllm")
    assert ('Requests: greedy: temperature 0 (`{"temperature": 0}`'
            in launch(greedy, "vllm", export(greedy, "vllm").files))


def test_launch_sglang_trtllm_and_dv() -> None:
    doc = frozen(method="ngram", engine="sglang", k=3, ngram_max=2)
    result = export(doc, "sglang")
    text = launch(doc, "sglang", result.files)
    assert "python -m sglang.launch_server --config sglang/sglang.yaml\n" in text
    assert result.files["sglang/sglang.sh"].strip() in text
    assert text.rstrip().endswith("measured approximately: " + approximation(doc, "sglang")
                                  + ".")

    doc = frozen(DRAFT, method="draft_model", k=4)
    text = launch(doc, "trtllm", export(doc, "trtllm").files)
    assert "trtllm-serve /models/smollm2-135m --backend pytorch --config trtllm.yaml\n" in text
    assert "measured approximately" not in text

    doc = frozen(method="layer_skip", attn_skip=[1, 3], mlp_skip=[2])
    text = launch(doc, "dv", export(doc, "dv").files)
    assert "json.load(open('dv.json'))['SmolLM2-135M-Instruct']" in text
    assert 'model.set_skip_layers(entry["attention"], entry["mlp"])' in text
    assert '**entry["generate_kwargs"])' in text


@pytest.mark.parametrize("params", [
    dict(method="draft_model", k=3, exit_policy="heuristic"),
    dict(method="draft_model", k=5, exit_policy="confidence", gamma=0.45, engine="hf",
         temperature=0.8, top_p=0.9),
    dict(method="sorted_exit", exits=[2], k=3, exit_policy="confidence", gamma=0.3),
    dict(method="ngram", engine="hf", k=2, ngram_max=2),
])
def test_launch_hf_snippet_runs_and_transformers_reads_the_tuned_fields(
        tmp_path, monkeypatch, params) -> None:
    """Run the launch.md Python of transformers on tiny saved models and record what
    transformers' candidate generator actually read: each field from its file."""
    from tiny import llama_model, save_tiny
    from transformers.generation import candidate_generator as cg

    target_dir = save_tiny(llama_model(seed=0, layers=3, vocab=64), tmp_path / "target")
    draft_dir = save_tiny(llama_model(seed=1, layers=1, vocab=64), tmp_path / "draft")
    has_draft = params["method"] == "draft_model"
    doc = frozen(dict(DRAFT, spec=str(draft_dir)) if has_draft else None,
                 model=dict(TARGET, spec=str(target_dir)), **params)
    result = export(doc, "hf")
    out = tmp_path / "exports"
    for name, text in result.files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    section = launch(doc, "hf", result.files)
    code = section.split("```python\n")[1].split("```")[0]

    seen: dict[str, Any] = {}
    init = cg.AssistedCandidateGenerator.__init__
    lookup = cg.PromptLookupCandidateGenerator.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        seen.update(kind=type(self).__name__, k=self.num_assistant_tokens,
                    gamma=self.assistant_confidence_threshold,
                    schedule=self.assistant_generation_config.num_assistant_tokens_schedule,
                    do_sample=self.generation_config.do_sample,
                    top_k=self.generation_config.top_k)

    def spy_lookup(self, *args, **kwargs):
        lookup(self, *args, **kwargs)
        seen.update(kind=type(self).__name__, k=self.num_output_tokens,
                    n=self.max_matching_ngram_size)

    monkeypatch.setattr(cg.AssistedCandidateGenerator, "__init__", spy)
    monkeypatch.setattr(cg.PromptLookupCandidateGenerator, "__init__", spy_lookup)
    monkeypatch.chdir(out)
    code = code.replace("max_new_tokens=128", "max_new_tokens=6")
    exec(compile(code, "launch.md", "exec"), {"__name__": "launch"})

    cfg = DecodeConfig(**{k: v for k, v in doc["params"].items()})
    if cfg.method == "ngram":
        assert seen == {"kind": "PromptLookupCandidateGenerator", "k": cfg.k, "n": cfg.ngram_max}
        return
    policy = cfg.exit_policy
    assert seen["kind"] == ("EarlyExitCandidateGenerator" if cfg.method == "sorted_exit"
                            else "AssistedCandidateGenerator")
    assert seen["k"] == cfg.k
    assert seen["gamma"] == (cfg.gamma if policy == "confidence" else 0.0)
    assert seen["schedule"] == ("heuristic_transient" if policy == "heuristic" else "constant")
    assert seen["do_sample"] is (not cfg.greedy)
    if not cfg.greedy:
        assert seen["top_k"] == 0


# ---------------------------------------------------------------- general


@pytest.mark.parametrize("fmt", FORMATS)
def test_baseline_has_nothing_to_export(fmt: str) -> None:
    doc = frozen(method="none")
    assert expressible(doc) == []
    assert error_of(fmt, doc, lossy=True) == (
        "the best config is plain autoregressive decoding; there is nothing to export")


def test_a_method_no_engine_knows_is_refused_by_every_format() -> None:
    register_method(MethodSpec("toy", label="toy", color="#000000", drafter=lambda: object))
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
        "trtllm, dv, llama_server")
    # The retired engine's format: its line names the replacement, not "unknown".
    assert error_of("llama_cpp", doc) == (
        "export format llama_cpp (llama-cpp-python) was retired: use llama_server "
        "(llama.cpp's llama-server; install it with python -m "
        "autotune.backends.llama_server_install)")
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
    assert args["model-path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_paths_are_shell_quoted() -> None:
    spaced = dict(TARGET, path="/models/my model")
    result = export(frozen(DRAFT, model=spaced, method="draft_model"), "sglang")
    assert "'/models/my model'" in result.files["sglang/sglang.sh"]
    assert shlex.split(result.files["sglang/sglang.sh"])[4] == "/models/my model"
    assert yaml.safe_load(result.primary())["model-path"] == "/models/my model"
    text = launch(frozen(DRAFT, model=spaced, method="draft_model"), "vllm",
                  export(frozen(DRAFT, model=spaced, method="draft_model"), "vllm").files)
    assert "vllm serve '/models/my model' --speculative-config '{" in text


# ---------------------------------------------------------------- schemas


SAMPLES = {
    "vllm": frozen(method="ngram", engine="vllm"),
    "sglang": frozen(DRAFT, method="draft_model"),
    "hf": frozen(DRAFT, method="draft_model"),
    "trtllm": frozen(DRAFT, method="draft_model"),
    "dv": frozen(method="layer_skip", attn_skip=[2]),
    "llama_server": frozen(method="llama_ngram", k=16, engine="llama_server"),
}
REQUIRED = {"vllm": "num_speculative_tokens", "sglang": "speculative-algorithm",
            "hf": "do_sample", "trtllm": "max_draft_len", "llama_server": "args"}


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
                              "prompt_lookup_max": 3, "prompt_lookup_min": 1})
    # Both lookup sizes, always (unset both would be vLLM's 5/5).
    assert not vllm.is_valid({"method": "ngram", "num_speculative_tokens": 2,
                              "prompt_lookup_max": 3})
    assert not vllm.is_valid({"method": "draft_model", "model": "d",
                              "num_speculative_tokens": 2, "speculative_token_tree": "[]"})
    assert not vllm.is_valid({"method": "draft_model", "model": "d",
                              "num_speculative_tokens": 2, "draft_sample_method": "sampled"})
    assert not vllm.is_valid({"method": "medusa", "num_speculative_tokens": 2})
    trtllm = jsonschema.Draft202012Validator(schema("trtllm"))
    assert not trtllm.is_valid({"decoding_type": "Draft_Target", "max_draft_len": 3})
    assert trtllm.is_valid({"decoding_type": "DraftTarget", "max_draft_len": 3,
                            "speculative_model_dir": "/d"})
    assert not trtllm.is_valid({"decoding_type": "NGram", "max_draft_len": 3,
                                "use_rejection_sampling": True})
    assert not trtllm.is_valid({"decoding_type": "NGram", "max_draft_len": 3,
                                "acceptance_window": 8})
    hf = jsonschema.Draft202012Validator(schema("hf"))
    assert not hf.is_valid({"do_sample": False, "temperature": 0.7, "num_assistant_tokens": 3,
                            "num_assistant_tokens_schedule": "constant"})
    assert not hf.is_valid({"do_sample": False, "num_assistant_tokens": 3,
                            "num_assistant_tokens_schedule": "sometimes",
                            "assistant_confidence_threshold": 0.0})
    # The assistant fields always come with a threshold (unset would be 0.4).
    assert not hf.is_valid({"num_assistant_tokens": 3,
                            "num_assistant_tokens_schedule": "constant"})
    assert hf.is_valid({"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "constant",
                        "assistant_confidence_threshold": 0.0})
    assert not hf.is_valid({"do_sample": False, "top_k": 0})
    assert not hf.is_valid({})
    sglang = jsonschema.Draft202012Validator(schema("sglang"))
    assert not sglang.is_valid({"model-path": "m", "speculative-algorithm": "STANDALONE",
                                "speculative-num-steps": 3})
    # Underscored keys would be unknown flags to `--config`.
    assert not sglang.is_valid({"model_path": "m", "speculative_algorithm": "NGRAM",
                                "speculative_num_draft_tokens": 4})
    assert sglang.is_valid({"model-path": "m", "speculative-algorithm": "NGRAM",
                            "speculative-num-draft-tokens": 4})
    dv = jsonschema.Draft202012Validator(schema("dv"))
    assert not dv.is_valid({})
    assert not dv.is_valid({"m": {"attention": [1, 1], "mlp": []}})
    assert not dv.is_valid({"m": {"attention": [], "mlp": [], "generate_kwargs": {
        "max_step_draft": 4, "th_stop_draft": 0.5, "auto_th_stop_draft": True}}})


def test_medusa_is_a_named_loss_on_vllm_0_33() -> None:
    """vLLM 0.33.0 lists no "medusa" method: the export refuses it and names the last
    vLLM that loads the head folder train-draft writes."""
    doc = frozen(method="medusa", k=3, draft={"spec": "/heads", "path": "/heads"})
    message = error_of("vllm", doc)
    assert message.startswith("vllm cannot express method=medusa")
    assert "vLLM 0.33.0 has no Medusa" in message and "vLLM 0.32.0 was the last" in message
    with pytest.raises(AutotuneError):
        export(doc, "vllm", lossy=True)                 # fatal: nothing to fall back to
    assert "vllm" not in expressible(doc)


def test_suffix_measured_with_our_rules_names_vllms_last_round_rules() -> None:
    """The decoder applies the last rounds' rules to every model-free drafter (suffix
    trees as n-grams): a suffix config measured with autotune's rules is not vLLM's
    figure, and the loss names the difference (before, only `ngram` listed them)."""
    doc = frozen(method="suffix", k=12)
    assert "vllm" not in expressible(doc)
    result = export(doc, "vllm", lossy=True)
    assert result.dropped == [
        "engine=autotune: measured with autotune's rules: autotune drafts no more n-gram "
        "tokens than are left to generate; vLLM drafts all k n-gram tokens even when fewer "
        "are left to generate; autotune stops drafting when one token is left; vLLM drafts "
        "n-gram tokens even when one token is left to generate; search with --target vllm "
        "to measure it as vLLM runs it"]
