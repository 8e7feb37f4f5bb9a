"""Issue 43, the third engine audit: each point pinned against the released source.

1. SGLang 0.5.23 runs a per-batch-size step count for EAGLE (speculative_adaptive_config);
   STANDALONE and NGRAM fall back to fixed steps.
2. TensorRT-LLM's SA reads draft_len_schedule (one-model, like Draft_Target).
3. SGLang's start-up conditions for NGRAM and EAGLE trees are in launch.md.
4. vLLM suffix decoding: leave ARCTIC_INFERENCE_ENABLED unset (arctic-inference 0.3.0).
5. The TensorRT-LLM page agrees with itself; the pins are one version each.

SGLang's rules are re-implemented here from the sglang 0.5.23 wheel (PyPI), each with
its file and line, so the files are checked for what SGLang will run.
"""

from __future__ import annotations

import json
import re
import shlex
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Any

import engine_fields as pins
import jsonschema
import pytest
import yaml
from test_export_schedule import schedule, trtllm_upper, trtllm_validate
from test_exports import DRAFT, frozen

from autotune.common.errors import AutotuneError
from autotune.exports import export, launch, schema
from autotune.exports import trtllm as trtllm_export

ROOT = Path(__file__).resolve().parents[1]
ALL_ON = [{"start": 1, "end": 1, "k": 4}, {"start": 2, "end": 3, "k": 3},
          {"start": 4, "end": 8, "k": 2}]
WITH_OFF = [{"start": 1, "end": 1, "k": 4}, {"start": 2, "end": 3, "k": 3},
            {"start": 4, "end": 8, "k": 0}]


def eagle_doc(ranges: list[dict], batch_sizes: tuple[int, ...] = (1, 2, 4, 8),
              **params: Any) -> dict:
    doc = frozen(DRAFT, method="eagle", k=4, engine="sglang", **params)
    doc["schedule"] = schedule("eagle", ranges, batch_sizes)
    return doc


# ------------------------------------------------ SGLang 0.5.23's adaptive mode, read
def sglang_load_adaptive(cfg: dict[str, Any]) -> dict[int, list[int]]:
    """speculative/adaptive_spec_params.py L116-139 _load_adaptive_config: integer-string
    keys, each a non-empty list of ints >= 0 (one value allowed, 0 allowed); L167 a
    slot's candidates are sorted(set(...))."""
    slots = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry["candidate_steps"]
        assert isinstance(steps, list) and steps
        assert all(isinstance(s, int) and s >= 0 for s in steps)
        slots[int(key)] = sorted(set(steps))
    assert slots, "at least one integer-string batch-size key"
    return slots


def sglang_steps(slots: dict[int, list[int]], batch_size: int,
                 graph_sizes: list[int] | None) -> int:
    """adaptive_spec_params.py L342-358: pad to the first CUDA-graph size >= the batch
    size (none: kept), then the largest key <= it (the smallest key below them all).
    A slot with one candidate never moves (L213-227: neither the step-0 probe nor the
    EMA moves leave index 0 of a one-item list)."""
    padded = batch_size
    if graph_sizes:
        idx = bisect_left(graph_sizes, batch_size)
        padded = graph_sizes[idx] if idx < len(graph_sizes) else batch_size
    keys = sorted(slots)
    (step,) = slots[keys[max(0, bisect_right(keys, padded) - 1)]]
    return step


# arg_groups/cuda_graph_hook.py L518-525: decode graph sizes with speculation on.
SPEC_GRAPHS = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
               + list(range(72, 257, 8)))


def test_sglang_runs_an_eagle_chain_schedule_per_batch_size() -> None:
    result = export(eagle_doc(ALL_ON), "sglang")
    assert result.dropped == []
    args = yaml.safe_load(result.primary())
    jsonschema.validate(args, schema("sglang"))
    assert args["speculative-algorithm"] in pins.SGLANG_ADAPTIVE_ALGORITHMS
    assert args["speculative-eagle-topk"] == 1          # adaptive_spec_params.py L75-79
    assert {key.replace("-", "_") for key in args} >= set(pins.SGLANG_SCHEDULE_FIELDS)
    assert args["speculative-adaptive"] is True
    slots = sglang_load_adaptive(json.loads(result.files[args["speculative-adaptive-config"]]))
    # arg_groups/speculative_hook.py L1416-1421: the start step is one of the candidates;
    # L1423-1427: num_draft_tokens = steps + 1.
    assert args["speculative-num-steps"] in {s for steps in slots.values() for s in steps}
    assert args["speculative-num-draft-tokens"] == args["speculative-num-steps"] + 1
    wanted = {b: r["k"] for r in ALL_ON for b in range(r["start"], r["end"] + 1)}
    for graphs in (None, SPEC_GRAPHS):                  # graphs off, and the default
        assert {b: sglang_steps(slots, b, graphs) for b in wanted} == wanted
    # Beyond the largest tuned size the last slot carries on.
    assert sglang_steps(slots, 64, SPEC_GRAPHS) == ALL_ON[-1]["k"]
    # The flags: a bool field is a bare store_true flag (arg_groups/arg_utils.py
    # L393-399), as ConfigArgumentMerger turns `true` into (server_args_config_parser.py
    # L174-175, L185-199).
    words = shlex.split(result.files["sglang/sglang.sh"])
    i = words.index("--speculative-adaptive")
    assert words[i + 1].startswith("--")
    text = launch(eagle_doc(ALL_ON), "sglang", result.files)
    assert "`speculative-adaptive` with `sglang/adaptive.json`" in text
    assert "SGLang keeps the last range's K=2" in text


def test_sglang_names_what_its_step_count_zero_runs() -> None:
    """eagle_worker_v2.py L1469-1506: steps 0 builds a one-token verify input and still
    runs draft-extend: not the no-speculation decoding autotune measured."""
    doc = eagle_doc(WITH_OFF)
    with pytest.raises(AutotuneError, match="cannot express schedule K=0: use --lossy"):
        export(doc, "sglang")
    result = export(doc, "sglang", lossy=True)
    assert result.dropped[0].startswith("schedule K=0: SGLang's step count 0 (batch sizes "
                                        "4-8) is not plain decoding")
    slots = sglang_load_adaptive(json.loads(result.files["sglang/adaptive.json"]))
    assert [sglang_steps(slots, b, SPEC_GRAPHS) for b in (1, 2, 3, 4, 8)] == [4, 3, 3, 0, 0]


def test_sglang_says_which_batch_sizes_its_graph_padding_moves() -> None:
    ranges = [{"start": 1, "end": 9, "k": 4}, {"start": 10, "end": 16, "k": 2}]
    doc = eagle_doc(ranges, (1, 10, 16))
    result = export(doc, "sglang")
    slots = sglang_load_adaptive(json.loads(result.files["sglang/adaptive.json"]))
    assert sglang_steps(slots, 9, SPEC_GRAPHS) == 2     # 9 pads to the graph size 10
    assert sglang_steps(slots, 9, None) == 4
    text = launch(doc, "sglang", result.files)
    assert "batch size 9 run the next range's K" in text
    assert "`--cuda-graph-bs-decode`" in text


@pytest.mark.parametrize("doc, why", [
    # adaptive_spec_params.py L61-65 (EAGLE/EAGLE3 only), speculative_hook.py L1374-1390
    # (a warning, then fixed steps).
    (dict(frozen(DRAFT, method="draft_model", k=4, engine="sglang"),
          schedule=schedule("draft_model", ALL_ON)),
     "for STANDALONE it warns and falls back to fixed steps"),
    (dict(frozen(method="sglang_ngram", k=4, engine="sglang"),
          schedule=schedule("sglang_ngram", ALL_ON)),
     "for NGRAM it warns and falls back to fixed steps"),
    # L75-79: topk 1 only.
    (eagle_doc(ALL_ON, tree_width=2, tree_depth=3, tree_tokens=5),
     "for EAGLE only with topk 1, and this tree has topk 2"),
])
def test_sglang_schedule_loss_says_why(doc: dict, why: str) -> None:
    result = export(doc, "sglang", lossy=True)
    (line,) = [d for d in result.dropped if d.startswith("schedule:")]
    assert why in line and "the batch-1 config (k=4) runs at every batch size" in line
    assert "at least two" not in line
    assert "sglang/adaptive.json" not in result.files
    assert "speculative-adaptive" not in yaml.safe_load(result.primary())


# ------------------------------------------------ TensorRT-LLM SA's draft_len_schedule
def test_trtllm_sa_writes_draft_len_schedule() -> None:
    """interface.py @ 00b6d5a2 support_dynamic_draft_len() includes is_sa() (PR #12262)
    and use_one_engine() does: SA reads the keys as upper bounds."""
    assert "SA" in pins.TRTLLM_SCHEDULE_TYPES
    doc = frozen(method="sa", k=4, engine="trtllm")
    doc["schedule"] = schedule("sa", ALL_ON)
    result = export(doc, "trtllm")
    assert result.dropped == []
    spec = json.loads(result.primary())
    jsonschema.validate(spec, schema("trtllm"))
    trtllm_validate(spec)
    table = {int(k): v for k, v in spec["draft_len_schedule"].items()}
    wanted = {b: r["k"] for r in ALL_ON for b in range(r["start"], r["end"] + 1)}
    assert {b: trtllm_upper(table, b) for b in wanted} == wanted
    assert "one-model SA drops to its implicit draft length" in launch(doc, "trtllm",
                                                                       result.files)


# ------------------------------------------------ SGLang's start-up conditions
def test_sglang_ngram_launch_names_its_start_conditions() -> None:
    """speculative_hook.py L1312 (NGRAM's topk = max_bfs_breadth), L1356-1366 (topk > 1
    with page_size > 1 only on flashinfer), L1294-1302 (max_running_requests 48)."""
    doc = frozen(method="sglang_ngram", k=11, engine="sglang",
                 sglang_ngram_max_bfs_breadth=10)
    text = launch(doc, "sglang", export(doc, "sglang").files)
    assert "refuses to start when `--page-size` > 1 unless `--attention-backend " \
           "flashinfer`" in text
    assert "caps `--max-running-requests` at 48" in text
    chain = frozen(method="ngram", k=3, ngram_min=1, ngram_max=3, engine="sglang")
    text = launch(chain, "sglang", export(chain, "sglang").files)
    assert "caps `--max-running-requests` at 48" in text and "flashinfer" not in text


def test_sglang_tree_launch_names_its_backends() -> None:
    """speculative_hook.py L1268-1282: EAGLE/STANDALONE trees with page_size > 1 need
    flashinfer, fa3 or triton."""
    doc = frozen(DRAFT, method="draft_model", engine="sglang", tree_width=2, tree_depth=3,
                 tree_tokens=5)
    text = launch(doc, "sglang", export(doc, "sglang").files)
    assert "unless the attention backend is flashinfer, fa3 or triton" in text
    chain = frozen(DRAFT, method="draft_model", k=3, engine="sglang")
    assert "page-size" not in launch(chain, "sglang", export(chain, "sglang").files)


def test_sglang_sampled_eagle_launch_says_rocm_verifies_otherwise() -> None:
    """sglang 0.5.23 arg_groups/speculative_hook.py L29-62, L1182-1206: on HIP, EAGLE
    with topk 1, no token map and accept thresholds 1.0 gets rejection sampling turned
    on by itself; greedy figures, STANDALONE and trees are untouched."""
    sampled = frozen(DRAFT, method="eagle", k=4, engine="sglang", temperature=0.7,
                     top_p=0.9)
    text = launch(sampled, "sglang", export(sampled, "sglang").files)
    assert "On ROCm (AMD GPUs) SGLang turns `speculative_use_rejection_sampling` on" in text
    greedy = frozen(DRAFT, method="eagle", k=4, engine="sglang")
    draft = frozen(DRAFT, method="draft_model", k=4, engine="sglang", temperature=0.7)
    for doc in (greedy, draft):
        assert "ROCm" not in launch(doc, "sglang", export(doc, "sglang").files)


def test_dv_launch_names_the_repositorys_transformers_pin() -> None:
    """self-speculative-decoding decoding.py @ f69f2a75 L5 imports top_k_top_p_filtering
    (absent from transformers 5.x); its ssd.yml pins transformers==4.33.1."""
    doc = frozen(method="layer_skip", attn_skip=[1, 3], mlp_skip=[2])
    text = launch(doc, "dv", export(doc, "dv").files)
    assert "`transformers==4.33.1`" in text and "top_k_top_p_filtering" in text
    import transformers
    assert not hasattr(transformers, "top_k_top_p_filtering")


# ------------------------------------------------ the arctic-inference plugin trap
def test_vllm_suffix_launch_leaves_the_arctic_plugin_off() -> None:
    """arctic-inference 0.3.0 (sdist): utils.py L22 targets vLLM 0.26.0; plugin.py
    L41-51 raise on any other vLLM when ARCTIC_INFERENCE_ENABLED=1, L55 forces V1."""
    doc = frozen(method="suffix", k=8, engine="vllm")
    text = launch(doc, "vllm", export(doc, "vllm", lossy=True).files)
    assert "Leave `ARCTIC_INFERENCE_ENABLED` unset" in text and "vLLM 0.26.0" in text


# ------------------------------------------------ the pages and pins agree with the source
def test_pins_are_one_version_each() -> None:
    # sglang 0.5.23 arg_groups/fields/spec.py L31-280: 39 fields, no
    # speculative_skip_dp_mlp_sync.
    assert len(pins.SGLANG_SPECULATIVE_FIELDS) == 39
    assert "speculative_skip_dp_mlp_sync" in pins.SGLANG_GONE
    assert "speculative_skip_dp_mlp_sync" not in pins.SGLANG_SPECULATIVE_FIELDS
    # llm_args.py @ 00043967: SADecodingConfig and the base it extends, one commit;
    # PR #12905's renamed names only.
    assert pins.TRTLLM_LLM_ARGS_COMMIT == "0004396720054fd8e205cbf616f21f0b57c6b412"
    assert {"acceptance_rate_window_size", "acceptance_rate_threshold"} <= set(pins.TRTLLM_SA)
    assert not set(pins.TRTLLM_GONE) & set(pins.TRTLLM_SA)


def test_trtllm_page_says_the_public_pool_is_measured_and_sa_takes_a_schedule() -> None:
    page = (ROOT / "docs/engines/trtllm.md").read_text(encoding="utf-8")
    module = trtllm_export.__doc__ or ""
    for text in (page, module):
        assert "is_public_pool: false`:" not in text and "`is_public_pool: false` and" \
            not in text
    not_reproduced = page.split("## Not reproduced", 1)[1]
    assert "public (cross-request) n-gram pool" not in not_reproduced
    assert "was not read for SA" not in page
    # The export writes the pool measured (exports/trtllm.py speculative_config).
    for pool in ("private", "public"):
        doc = frozen(method="ngram", k=3, ngram_min=1, ngram_max=2, ngram_pool=pool,
                     engine="trtllm")
        assert json.loads(export(doc, "trtllm").primary())["is_public_pool"] is (
            pool == "public")


def test_engine_pages_say_whether_autotune_searches_each_new_setting() -> None:
    """Every new upstream setting the audit lists is on its engine's page, each with a
    line saying whether autotune searches it."""
    names = {
        "vllm.md": ("rejection_sample_method", "enable_adaptive_verification",
                    "parallel_drafting", "dflash", "dspark", "ngram_gpu", "--spec-method"),
        "sglang.md": ("speculative_use_block_verification", "candidate_steps",
                      "speculative_ngram_external_corpus_path"),
        "trtllm.md": ("acceptance_rate_window_size", "sa_config"),
        "llama_server.md": ("--spec-draft-sampling", "--spec-default"),
        "hf.md": ("use_mtp",),
    }
    for page, settings in names.items():
        text = (ROOT / "docs/engines" / page).read_text(encoding="utf-8")
        section = text.split("## New upstream settings", 1)
        assert len(section) == 2, page
        for name in settings:
            lines = [line for line in section[1].splitlines() if name in line]
            assert lines, (page, name)
        assert re.search(r"autotune (searches|does not search)", section[1]), page
