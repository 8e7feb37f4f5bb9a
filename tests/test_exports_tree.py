"""Exports of draft trees: SGLang carries EAGLE-2's dynamic tree, chain-only formats drop a
tree to its best path under --lossy, a static tree has no exact format.

Frozen documents are built by hand (no model is loaded) with test_exports' helpers; every
written file is validated against its format's JSON Schema.
"""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from autotune.cli.main import main
from autotune.exports import export, expressible
from autotune.frozen.document import frozen_document
from autotune.runs.exports_folder import write_exports
from tests.test_exports import DRAFT, error_of, frozen, load_hf, valid

# A dynamic tree: 2 children per node, 3 levels, the best 6 of the 2 + 2*2*2 = 10 drafted.
DYNAMIC = {"tree_width": 2, "tree_depth": 3, "tree_tokens": 6}
# A static tree of 5 nodes, 3 deep, 2 wide at the root and under [0].
STATIC = [[0], [1], [0, 0], [0, 1], [0, 0, 0]]
STATIC_LABEL = "tree_choices=[[0], [1], [0, 0], [0, 1], [0, 0, 0]]"
STATIC_NOTE = ("no export format takes a static tree (tree_choices) for this method: engines "
               "take one only for EAGLE/Medusa heads, e.g. TensorRT-LLM's eagle_choices")


def sglang_args(doc: dict, lossy: bool = False) -> dict:
    """SGLang's args, schema-checked, with the rules the schema cannot state."""
    result = export(doc, "sglang", lossy=lossy)
    dashed = valid("sglang", result.primary())
    # The YAML's keys are the flags; the same as ServerArgs fields for the checks below.
    args = {key.replace("-", "_"): value for key, value in dashed.items()}
    steps, topk = args["speculative_num_steps"], args["speculative_eagle_topk"]
    drafted = topk + (steps - 1) * topk * topk
    # num_draft_tokens counts the root: at most every drafted node plus it.
    assert 2 <= args["speculative_num_draft_tokens"] <= drafted + 1
    if topk == 1:
        assert args["speculative_num_draft_tokens"] == steps + 1
    words = shlex.split(result.files["sglang/sglang.sh"])
    assert dict(zip(words[3::2], words[4::2])) == {
        "--" + key: str(value) for key, value in dashed.items()}
    return args


def chain_file(result, fmt: str) -> dict:
    """The schema-checked file that holds the chain length: transformers reads
    num_assistant_tokens from the assistant's generation config."""
    name = "hf/assistant_generation_config.json" if fmt == "hf" else next(iter(result.files))
    return valid(fmt, result.files[name])


def tree_doc(**params) -> dict:
    return frozen(DRAFT, method="draft_model", **params)


# ---------------------------------------------------------------- dynamic tree


def test_dynamic_tree_is_sglangs_eagle_tree() -> None:
    doc = tree_doc(**DYNAMIC)
    assert expressible(doc) == ["sglang"]
    assert sglang_args(doc) == {
        "model_path": "/models/smollm2-135m", "speculative_algorithm": "STANDALONE",
        "speculative_draft_model_path": "HuggingFaceTB/SmolLM2-small",
        "speculative_num_steps": 3, "speculative_eagle_topk": 2,
        # 6 tree nodes plus the root (the last verified token).
        "speculative_num_draft_tokens": 7}


def test_dynamic_tree_keeping_every_node() -> None:
    args = sglang_args(tree_doc(tree_width=3, tree_depth=2))
    # 3 + 1*3*3 = 12 drafted, all kept.
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == (2, 3, 13)


@pytest.mark.parametrize("fmt", ["vllm", "hf", "trtllm"])
def test_dynamic_tree_in_a_chain_format_needs_lossy(fmt: str) -> None:
    doc = tree_doc(**DYNAMIC)
    assert error_of(fmt, doc) == (
        f"{fmt} cannot express tree_width=2 (tree_depth, tree_tokens): "
        "use --format sglang, or --lossy")
    result = export(doc, fmt, lossy=True)
    assert len(result.dropped) == 3
    assert result.dropped[0].startswith("tree_width=2: ")
    assert result.dropped[0].endswith(
        "; exported as a chain of 3 tokens, the tree's depth (its best path)")
    assert result.dropped[1:] == ["tree_depth=3: dropped with tree_width=2",
                                  "tree_tokens=6: dropped with tree_width=2"]
    key = {"vllm": "num_speculative_tokens", "hf": "num_assistant_tokens",
           "trtllm": "max_draft_len"}[fmt]
    assert chain_file(result, fmt)[key] == 3


def test_dynamic_tree_lossy_messages_name_the_engine() -> None:
    doc = tree_doc(**DYNAMIC)
    assert "vLLM drafts a chain of num_speculative_tokens" in export(
        doc, "vllm", lossy=True).dropped[0]
    assert "EAGLE heads" in export(doc, "trtllm", lossy=True).dropped[0]
    assert "transformers" in export(doc, "hf", lossy=True).dropped[0]


def test_dynamic_tree_lossy_hf_loads(tmp_path) -> None:
    config = load_hf(export(tree_doc(**DYNAMIC), "hf", lossy=True), tmp_path)
    assert config.num_assistant_tokens == 3
    assert config.num_assistant_tokens_schedule == "constant"


def test_dynamic_tree_is_not_a_dv_config() -> None:
    expected = ("dv cannot express method=draft_model (draft): use --format sglang")
    assert error_of("dv", tree_doc(**DYNAMIC)) == expected
    assert error_of("dv", tree_doc(**DYNAMIC), lossy=True) == expected


def test_a_tree_keeping_fewer_nodes_than_levels_is_that_shallow() -> None:
    doc = tree_doc(tree_width=2, tree_depth=5, tree_tokens=3)
    args = sglang_args(doc)
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == (5, 2, 4)
    # Three nodes make a path of three at most: the chain fallback drafts 3, not 5.
    result = export(doc, "vllm", lossy=True)
    assert valid("vllm", result.primary())["num_speculative_tokens"] == 3
    assert "a chain of 3 tokens" in result.dropped[0]


# ---------------------------------------------------------------- one-path trees


def test_a_width_one_tree_is_a_chain_everywhere(tmp_path) -> None:
    doc = tree_doc(tree_width=1, tree_depth=4)
    assert expressible(doc) == ["vllm", "sglang", "hf", "trtllm"]
    assert valid("vllm", export(doc, "vllm").primary())["num_speculative_tokens"] == 4
    assert valid("trtllm", export(doc, "trtllm").primary())["max_draft_len"] == 4
    assert load_hf(export(doc, "hf"), tmp_path).num_assistant_tokens == 4
    args = sglang_args(doc)
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == (4, 1, 5)
    # Keeping 2 of the 4 drafted: a chain of 2 (SGLang forces num_draft_tokens = steps + 1
    # for topk 1, so the steps shrink too).
    short = tree_doc(tree_width=1, tree_depth=4, tree_tokens=2)
    args = sglang_args(short)
    assert (args["speculative_num_steps"], args["speculative_num_draft_tokens"]) == (2, 3)
    assert valid("vllm", export(short, "vllm").primary())["num_speculative_tokens"] == 2


def test_a_static_chain_is_a_chain_everywhere() -> None:
    doc = tree_doc(tree_choices=[[0], [0, 0], [0, 0, 0]])
    assert expressible(doc) == ["vllm", "sglang", "hf", "trtllm"]
    assert valid("vllm", export(doc, "vllm").primary())["num_speculative_tokens"] == 3
    args = sglang_args(doc)
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == (3, 1, 4)


def test_a_chain_exports_as_before() -> None:
    doc = tree_doc(k=5, tree_width=0)
    assert expressible(doc) == ["vllm", "sglang", "hf", "trtllm"]
    assert valid("vllm", export(doc, "vllm").primary())["num_speculative_tokens"] == 5
    args = sglang_args(doc)
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == (5, 1, 6)


# ---------------------------------------------------------------- static tree


def test_static_tree_has_no_exact_format() -> None:
    doc = tree_doc(tree_choices=STATIC)
    assert expressible(doc) == []
    for fmt in ("vllm", "sglang", "hf", "trtllm"):
        assert error_of(fmt, doc) == (
            f"{fmt} cannot express {STATIC_LABEL}: use --lossy; {STATIC_NOTE}")


def test_static_tree_lossy_sglang_is_the_nearest_dynamic_tree() -> None:
    result = export(tree_doc(tree_choices=STATIC), "sglang", lossy=True)
    assert result.dropped == [
        f"{STATIC_LABEL}: SGLang drafts only dynamic (EAGLE-2) trees, no static one; "
        "exported as the dynamic tree of the same depth and width: speculative-num-steps=3, "
        "speculative-eagle-topk=2, speculative-num-draft-tokens=6 (the best 5 drafted nodes "
        "plus the root)"]
    args = sglang_args(tree_doc(tree_choices=STATIC), lossy=True)
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == (3, 2, 6)


def test_static_tree_lossy_sglang_shapes() -> None:
    # A later-ranked child needs that many candidates per step.
    args = sglang_args(tree_doc(tree_choices=[[0], [2]]), lossy=True)
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == (1, 3, 3)
    # The full binary tree of depth 3 has 14 nodes; width 2 drafts 2 + 2*4 = 10 of them.
    full = [[a] for a in (0, 1)] + [[a, b] for a in (0, 1) for b in (0, 1)] + [
        [a, b, c] for a in (0, 1) for b in (0, 1) for c in (0, 1)]
    args = sglang_args(tree_doc(tree_choices=full), lossy=True)
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == (3, 2, 11)


@pytest.mark.parametrize("fmt, key", [("vllm", "num_speculative_tokens"),
                                      ("hf", "num_assistant_tokens"),
                                      ("trtllm", "max_draft_len")])
def test_static_tree_lossy_chain_formats_draft_its_depth(fmt: str, key: str) -> None:
    result = export(tree_doc(tree_choices=STATIC), fmt, lossy=True)
    assert len(result.dropped) == 1 and result.dropped[0].startswith(STATIC_LABEL + ": ")
    assert "a chain of 3 tokens" in result.dropped[0]
    assert chain_file(result, fmt)[key] == 3


def test_a_large_static_tree_is_named_briefly() -> None:
    choices = [[r] for r in range(5)] + [[0, r] for r in range(4)]
    message = error_of("vllm", tree_doc(tree_choices=choices))
    assert message.startswith("vllm cannot express tree_choices=[9 paths, depth 2]: ")


# ---------------------------------------------------------------- self-speculative trees


def test_layer_skip_tree_is_dv_lossy_only() -> None:
    doc = frozen(method="layer_skip", attn_skip=[3, 5], **DYNAMIC)
    assert expressible(doc) == []
    assert error_of("dv", doc) == (
        "dv cannot express tree_width=2 (tree_depth, tree_tokens): use --lossy")
    assert error_of("vllm", doc, lossy=True) == (
        "vllm cannot express method=layer_skip (attn_skip, mlp_skip): "
        "use --format dv with --lossy")
    result = export(doc, "dv", lossy=True)
    assert result.dropped[0].startswith("tree_width=2: Draft & Verify drafts one chain")
    kwargs = valid("dv", result.primary())["SmolLM2-135M-Instruct"]["generate_kwargs"]
    assert kwargs["max_step_draft"] == 3 and kwargs["th_stop_draft"] == 0.0


def test_layer_skip_static_tree_notes_no_format() -> None:
    doc = frozen(method="layer_skip", attn_skip=[3], tree_choices=STATIC)
    assert error_of("dv", doc) == f"dv cannot express {STATIC_LABEL}: use --lossy; {STATIC_NOTE}"
    entry = valid("dv", export(doc, "dv", lossy=True).primary())["SmolLM2-135M-Instruct"]
    assert entry["generate_kwargs"]["max_step_draft"] == 3


def test_sorted_exit_tree_is_hf_lossy_only(tmp_path) -> None:
    doc = frozen(method="sorted_exit", exits=[10], **DYNAMIC)
    assert expressible(doc) == []
    assert error_of("hf", doc) == (
        "hf cannot express tree_width=2 (tree_depth, tree_tokens): use --lossy")
    config = load_hf(export(doc, "hf", lossy=True), tmp_path)
    assert config.assistant_early_exit == 10 and config.num_assistant_tokens == 3


# ---------------------------------------------------------------- command line, run folder


MODEL = {"id": "tiny", "spec": "org/tiny", "path": "/models/t", "sha256": "a" * 64,
         "hash_of": "weights", "dtype": "float32", "n_layers": 4}
CLI_DRAFT = {"id": "tiny-draft", "spec": "org/tiny-draft", "path": "/models/d",
             "sha256": "c" * 64, "hash_of": "weights", "dtype": "float32", "n_layers": 2}


def _write(tmp_path, **params):
    doc = frozen_document({"method": "draft_model", **params},
                          context={"model": MODEL, "draft": CLI_DRAFT})
    path = tmp_path / "best.json"
    path.write_text(json.dumps(doc))
    return path


def test_cli_tree_export(tmp_path, capsys) -> None:
    path = _write(tmp_path, **DYNAMIC)
    assert main(["export", str(path), "--format", "vllm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tree_width=2" in err[0] and "--format sglang" in err[0]
    assert main(["export", str(path), "--format", "vllm", "--lossy"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["num_speculative_tokens"] == 3
    warnings = captured.err.strip().splitlines()
    assert warnings[0].startswith("autotune: warning: dropped tree_width=2: ")
    assert main(["export", str(path), "--format", "sglang"]) == 0
    args = yaml.safe_load(capsys.readouterr().out.split("\npython")[0])
    assert args["speculative-eagle-topk"] == 2 and args["speculative-num-draft-tokens"] == 7


def test_run_exports_of_a_tree(tmp_path) -> None:
    out = tmp_path / "exports"
    names = write_exports(_write(tmp_path, **DYNAMIC), out)
    assert names == ["sglang/sglang.yaml", "sglang/sglang.sh", "launch.md"]
    assert yaml.safe_load((out / "sglang" / "sglang.yaml").read_text())[
        "speculative-eagle-topk"] == 2
    launch = (out / "launch.md").read_text()
    assert "## SGLang (sglang/sglang.yaml, sglang/sglang.sh)" in launch
    assert "python -m sglang.launch_server --config sglang/sglang.yaml" in launch
    assert "## vLLM" not in launch
    readme = (out / "README.txt").read_text()
    assert ("vllm: not written: vllm cannot express tree_width=2 (tree_depth, tree_tokens): "
            "use --format sglang, or --lossy") in readme
