"""Every key autotune exports is a field the engine accepts, as pinned from its source.

tests/engine_fields.py holds the field lists read in each engine's source (file and commit
beside each). Here many configs (each method, exit policy, tree shape and sampling a
format expresses, measured under every engine's rules) are exported to every format, with
--lossy where needed, and every key of every file is checked against that engine's
pinned list; the shipped JSON Schemas may describe nothing outside it either.
"""

from __future__ import annotations

import itertools
import json
import shlex
from collections import Counter
from typing import Any

import engine_fields as pins
import pytest
import yaml
from test_exports import DRAFT, frozen

from autotune.common.errors import AutotuneError
from autotune.schema.engines import ENGINES
from autotune.exports import FORMATS, export, launch, schema
from autotune.exports._common import read_frozen

# ---------------------------------------------------------------- the configs

METHODS: list[tuple[dict | None, dict[str, Any]]] = [
    (None, dict(method="ngram", k=3, ngram_min=1, ngram_max=4)),
    (None, dict(method="ngram", k=5, ngram_min=2, ngram_max=2)),
    (DRAFT, dict(method="draft_model", k=5)),
    (DRAFT, dict(method="draft_model", tree_width=2, tree_depth=3, tree_tokens=6)),
    (DRAFT, dict(method="draft_model", tree_width=1, tree_depth=4)),
    (DRAFT, dict(method="draft_model", tree_choices=[[0], [1], [0, 0], [0, 1], [0, 0, 0]])),
    (None, dict(method="layer_skip", k=4, attn_skip=[1, 3], mlp_skip=[2])),
    (None, dict(method="layer_skip", attn_skip=[2], tree_width=2, tree_depth=2)),
    (None, dict(method="sorted_exit", exits=[10], k=4)),
    (None, dict(method="sorted_exit", exits=[8, 16], thresholds=[0.5])),
    (None, dict(method="llama_ngram", llama_spec_type="ngram-simple", k=16)),
    (None, dict(method="llama_ngram", llama_spec_type="ngram-mod,ngram-map-k4v", k=64,
                llama_ngram_min_hits=2, llama_ngram_mod_n_min=8)),
    (None, dict(method="llama_ngram", llama_spec_type="ngram-cache", k=8)),
    (None, dict(method="llama_ngram", llama_spec_type="ngram-map-k,ngram-simple", k=24,
                llama_ngram_size_n=3)),
    (None, dict(method="llama_draft", exits=[8], k=3, llama_draft_p_min=0.4)),
    (DRAFT, dict(method="llama_draft", k=5, llama_draft_n_min=2)),
]
POLICIES = [dict(exit_policy="fixed"), dict(exit_policy="confidence", gamma=0.5),
            dict(exit_policy="heuristic"),
            dict(exit_policy="adaptive", gamma=0.6, target_acceptance=0.8)]
SAMPLING = [dict(temperature=0.0), dict(temperature=0.7, top_p=0.9)]


def _documents() -> list[dict]:
    docs = []
    for (draft, method), policy, sampling, engine in itertools.product(
            METHODS, POLICIES, SAMPLING, ENGINES):
        doc = frozen(draft, **method, **policy, **sampling, engine=engine)
        try:
            read_frozen(doc)
        except AutotuneError:
            continue                  # a combination DecodeConfig refuses
        docs.append(doc)
    return docs


DOCS = _documents()


def _exports(fmt: str) -> list[tuple[dict, dict[str, str]]]:
    """(document, files) of every config `fmt` can carry, lossily if need be."""
    out = []
    for doc in DOCS:
        try:
            out.append((doc, export(doc, fmt, lossy=True).files))
        except AutotuneError as exc:
            assert " cannot express method=" in str(exc), str(exc)   # only fatal losses
    return out


# ---------------------------------------------------------------- per-format checks


def check_vllm(spec: dict) -> None:
    allowed = set(pins.VLLM_SPECULATIVE_CONFIG) - set(pins.VLLM_INTERNAL) - set(
        pins.VLLM_REJECTED)
    assert set(spec) <= allowed, set(spec) - allowed
    assert spec["method"] in pins.VLLM_METHODS
    if "draft_sample_method" in spec:
        assert spec["draft_sample_method"] in pins.VLLM_DRAFT_SAMPLE_METHODS
    if spec["method"] == "ngram":
        # Both sizes always: unset both would be vLLM's 5/5.
        assert {"prompt_lookup_min", "prompt_lookup_max"} <= set(spec)


def check_llama_server(data: dict) -> None:
    args = data["args"]
    flags, values = args[0::2], args[1::2]
    assert len(flags) == len(values) and set(flags) <= set(pins.LLAMA_SERVER_FLAGS), flags
    assert not set(flags) & set(pins.LLAMA_SERVER_GONE)
    types = values[flags.index("--spec-type")].split(",")
    assert types and set(types) <= set(pins.LLAMA_SERVER_SPEC_TYPES), types
    for flag in flags:
        family = next((t for t in pins.LLAMA_SERVER_SPEC_TYPES
                       if flag.startswith(f"--spec-{t}-")), None)
        # A type's sizes only with the type itself (a flag of another type is inert).
        assert family is None or family in types, flag
        assert flag not in pins.LLAMA_SERVER_DRAFT_FLAGS or "draft-simple" in types, flag
    assert set(data["request"]) <= set(pins.LLAMA_SERVER_REQUEST), data["request"]


def check_sglang_yaml(config: dict) -> None:
    assert set(config) <= set(pins.SGLANG_FLAGS), set(config) - set(pins.SGLANG_FLAGS)
    for key in config:
        assert "_" not in key and key.replace("-", "_") in pins.SGLANG_FIELDS, key
    assert config["speculative-algorithm"] in pins.SGLANG_ALGORITHMS


def check_sglang_flags(line: str) -> None:
    words = shlex.split(line)
    assert words[:3] == ["python", "-m", "sglang.launch_server"]
    flags = words[3::2]
    assert flags and all(f.startswith("--") and f[2:] in pins.SGLANG_FLAGS for f in flags), flags


def check_trtllm(spec: dict, document: dict) -> None:
    assert tuple(document) == pins.TRTLLM_LLM_ARGS
    assert document["speculative_config"] == spec
    fields = pins.TRTLLM_DECODING_TYPES[spec["decoding_type"]]
    assert set(spec) <= set(fields), set(spec) - set(fields)


def check_hf(files: dict[str, dict]) -> None:
    target = files["hf/generation_config.json"]
    assistant = files.get("hf/assistant_generation_config.json")
    assert set(target) <= set(pins.HF_FIELDS)
    if assistant is not None:
        # transformers reads these from the assistant only: written there, not here.
        assert set(assistant) <= set(pins.HF_ASSISTANT), set(assistant)
        assert set(target) <= set(pins.HF_TARGET), set(target) - set(pins.HF_TARGET)
    elif "hf/generate_kwargs.json" not in files:
        assert set(target) <= set(pins.HF_TARGET), set(target) - set(pins.HF_TARGET)
    kwargs = files.get("hf/generate_kwargs.json")
    if kwargs is not None:
        # Early exit: the exit layer is a generate() argument, never on the model's config.
        assert set(kwargs) == {"assistant_early_exit"} <= set(pins.HF_FIELDS)
        assert "assistant_early_exit" not in target
    for data in files.values():
        if "num_assistant_tokens_schedule" in data:
            assert data["num_assistant_tokens_schedule"] in pins.HF_SCHEDULES


def check_dv(data: dict) -> None:
    for entry in data.values():
        assert set(entry) <= set(pins.DV_ENTRY)
        allowed = pins.DV_FUNCTIONS[entry["generate_fn"]]
        assert set(entry["generate_kwargs"]) <= set(allowed), entry["generate_kwargs"]


def _gone(text: str) -> None:
    for name in (*pins.SGLANG_GONE, *pins.TRTLLM_GONE, "speculative_token_tree"):
        assert name not in text and name.replace("_", "-") not in text, name


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_exported_key_is_a_pinned_field(fmt: str) -> None:
    exported = _exports(fmt)
    kinds: Counter = Counter()
    for doc, files in exported:
        for text in files.values():
            _gone(text)
        if fmt == "vllm":
            spec = json.loads(files["vllm.json"])
            check_vllm(spec)
            line = next(l for l in launch(doc, fmt, files).splitlines()
                        if l.startswith("vllm serve "))
            assert json.loads(shlex.split(line)[4]) == spec
            kinds[spec["method"]] += 1
        elif fmt == "sglang":
            config = yaml.safe_load(files["sglang/sglang.yaml"])
            check_sglang_yaml(config)
            check_sglang_flags(files["sglang/sglang.sh"])
            kinds[config["speculative-algorithm"]] += 1
        elif fmt == "trtllm":
            spec = json.loads(files["trtllm.json"])
            check_trtllm(spec, yaml.safe_load(files["trtllm.yaml"]))
            kinds[spec["decoding_type"]] += 1
        elif fmt == "hf":
            data = {name: json.loads(text) for name, text in files.items()}
            check_hf(data)
            kinds[tuple(sorted(data))] += 1
        elif fmt == "llama_server":
            data = json.loads(files["llama_server/llama_server.json"])
            check_llama_server(data)
            script = files["llama_server/run-llama-server.sh"]
            # The script names a truncated draft from its own folder ($ROOT).
            draft = (data.get("draft") or {}).get("file")
            assert [w.replace("$ROOT/", "") for w in
                    shlex.split(script.splitlines()[-1])[2:-1]] == data["args"]
            assert draft is None or f'"$ROOT/{draft}"' in script.splitlines()[-1]
            kinds[data["args"][3]] += 1
        else:
            data = json.loads(files["dv.json"])
            check_dv(data)
            kinds[next(iter(data.values()))["generate_fn"]] += 1
    # Not vacuous: every kind of file the format writes was checked, many times.
    expected = {"vllm": {"draft_model", "ngram"}, "sglang": {"STANDALONE", "NGRAM"},
                "trtllm": {"Draft_Target", "NGram"},
                "hf": {("hf/generation_config.json",),
                       ("hf/assistant_generation_config.json", "hf/generation_config.json"),
                       ("hf/generate_kwargs.json", "hf/generation_config.json")},
                "dv": {"essg", "sss"},
                "llama_server": {"ngram-simple", "ngram-map-k4v,ngram-mod", "ngram-cache",
                                 "ngram-simple,ngram-map-k", "draft-simple"}}[fmt]
    assert set(kinds) == expected
    # (llama_server carries the fewest: its own methods' configs, under every engine's rules.)
    assert min(kinds.values()) >= 10 and len(exported) >= 50


def test_the_checks_fail_on_a_field_the_engine_does_not_have() -> None:
    with pytest.raises(AssertionError):
        check_vllm({"method": "draft_model", "model": "d", "num_speculative_tokens": 2,
                    "speculative_token_tree": "[[0]]"})
    with pytest.raises(AssertionError):
        check_vllm({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3})
    with pytest.raises(AssertionError):
        check_sglang_yaml({"model_path": "m", "speculative-algorithm": "NGRAM"})
    with pytest.raises(AssertionError):
        check_sglang_yaml({"model-path": "m", "speculative-algorithm": "NGRAM",
                           "speculative-ngram-max-match-window-size": 3})
    with pytest.raises(AssertionError):
        check_sglang_yaml({"model-path": "m", "speculative-algorithm": "NGRAM",
                           "speculative-boundary-reduction": "rs"})      # no flag
    with pytest.raises(AssertionError):
        check_trtllm({"decoding_type": "Draft_Target", "max_draft_len": 2,
                      "speculative_model": "d", "is_use_oldest": True},
                     {"speculative_config": {"decoding_type": "Draft_Target",
                                             "max_draft_len": 2, "speculative_model": "d",
                                             "is_use_oldest": True}})
    with pytest.raises(AssertionError):
        check_hf({"hf/generation_config.json": {"do_sample": False, "num_assistant_tokens": 3},
                  "hf/assistant_generation_config.json": {"num_assistant_tokens": 3}})
    with pytest.raises(AssertionError):
        check_dv({"m": {"attention": [], "mlp": [], "generate_fn": "essg",
                        "generate_kwargs": {"th_random_draft": 1.0}}})


# ---------------------------------------------------------------- the schemas


def _properties(fmt: str) -> set[str]:
    spec = schema(fmt)
    if fmt == "dv":
        return set(spec["$defs"]["entry"]["properties"])
    return set(spec["properties"])


def test_schemas_describe_only_pinned_fields() -> None:
    vllm = schema("vllm")["properties"]
    assert set(vllm) <= (set(pins.VLLM_SPECULATIVE_CONFIG) - set(pins.VLLM_INTERNAL)
                         - set(pins.VLLM_REJECTED))
    assert set(vllm["method"]["anyOf"][0]["enum"]) <= set(pins.VLLM_METHODS)
    assert vllm["draft_sample_method"]["enum"] == list(pins.VLLM_DRAFT_SAMPLE_METHODS)

    sglang = schema("sglang")["properties"]
    assert set(sglang) <= set(pins.SGLANG_FLAGS), set(sglang) - set(pins.SGLANG_FLAGS)
    assert set(sglang["speculative-algorithm"]["enum"]) <= set(pins.SGLANG_ALGORITHMS)

    trtllm = schema("trtllm")["properties"]
    accepted = (set(pins.TRTLLM_DRAFT_TARGET) | set(pins.TRTLLM_NGRAM) | set(pins.TRTLLM_SA)
                | set(pins.TRTLLM_ALIASES))
    assert set(trtllm) <= accepted, set(trtllm) - accepted
    assert set(pins.TRTLLM_DECODING_TYPES) <= set(trtllm["decoding_type"]["enum"])

    hf = schema("hf")["properties"]
    assert set(hf) <= set(pins.HF_FIELDS), set(hf) - set(pins.HF_FIELDS)
    assert hf["num_assistant_tokens_schedule"]["enum"] == list(pins.HF_SCHEDULES)

    dv = schema("dv")["$defs"]
    assert set(dv["entry"]["properties"]) <= set(pins.DV_ENTRY)
    assert set(dv["kwargs"]["properties"]) <= set(pins.DV_ESSG) | set(pins.DV_SSS)
    assert set(dv["entry"]["properties"]["generate_fn"]["enum"]) <= set(pins.DV_FUNCTIONS)

    for fmt in FORMATS:
        assert _properties(fmt)


def test_the_pins_hold_for_the_installed_transformers() -> None:
    """A check of the pin against transformers 5.23.0 as installed (the pin itself is
    written out, not read from here): the fields exist, and the defaults the hf export
    overrides are the ones it was written against."""
    from transformers import GenerationConfig, __version__

    config = GenerationConfig()
    missing = [name for name in pins.HF_TARGET + pins.HF_ASSISTANT if not hasattr(config, name)]
    assert missing == []
    defaults = GenerationConfig._get_default_generation_params()
    if __version__ == "5.23.0":
        assert defaults["assistant_confidence_threshold"] == 0.4
        assert defaults["num_assistant_tokens"] == 20
        assert defaults["top_k"] == 50


def test_the_llama_server_check_fails_on_a_flag_or_type_it_does_not_have() -> None:
    request = {"temperature": 0.0}
    check_llama_server({"args": ["-m", "m.gguf", "--spec-type", "ngram-mod"],
                        "request": request})
    for args in (["-m", "m.gguf", "--spec-type", "ngram-lookup"],            # no such type
                 ["-m", "m.gguf", "--spec-type", "ngram-mod", "--draft-max", "4"],  # removed
                 ["-m", "m.gguf", "--spec-type", "ngram-mod",
                  "--spec-ngram-simple-size-n", "4"]):                     # another type's
        with pytest.raises(AssertionError):
            check_llama_server({"args": args, "request": request})
    with pytest.raises(AssertionError):
        check_llama_server({"args": ["-m", "m.gguf", "--spec-type", "ngram-mod"],
                            "request": {"speculative.n_max": 4}})
