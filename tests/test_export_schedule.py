"""Per-batch-size K (a frozen config's `schedule`) in the engine exports.

vLLM gets num_speculative_tokens_per_batch_size, TensorRT-LLM draft_len_schedule, SGLang
speculative_adaptive_config for EAGLE chains and a loss otherwise; a schedule that never speculates is refused; a malformed one is one error line.
Each engine's lookup is re-implemented here from the source the module docstrings cite,
so the files are checked for what the engine will run at every tuned batch size, not
only for their text.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from typing import Any

import engine_fields as pins
import jsonschema
import pytest
import yaml
from test_engine_fields import check_trtllm, check_vllm
from test_exports import DRAFT, frozen

from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.exports import export, expressible, launch, schema
from autotune.exports import vllm as vllm_export
from autotune.frozen.checks import problems, read_parts
from autotune.frozen.document import frozen_document
from autotune.frozen.schema import SCHEMA
from autotune.runs.exports_folder import refusal_reason, write_exports

# 1: K=4, 2-3: K=3, 4-8: K=0 (tuned at 1, 2, 4, 8).
RANGES = [{"start": 1, "end": 1, "k": 4}, {"start": 2, "end": 3, "k": 3},
          {"start": 4, "end": 8, "k": 0}]
EXPECTED = {1: 4, 2: 3, 3: 3, 4: 0, 5: 0, 6: 0, 7: 0, 8: 0}


def schedule(method: str, ranges: list[dict] | None = None,
             batch_sizes: tuple[int, ...] = (1, 2, 4, 8)) -> dict[str, Any]:
    return {"method": method, "batch_sizes": list(batch_sizes), "objective": "throughput",
            "ranges": ranges or RANGES,
            "points": [{"batch_size": 1, "k": 4, "split": "held_out", "speedup": 1.3,
                        "ci90": [1.1, 1.4], "tokens_per_s": 80.0, "ar_tokens_per_s": 61.0,
                        "tau": 2.3, "chosen": True}]}


def ngram_doc(engine: str, ranges: list[dict] | None = None) -> dict:
    doc = frozen(method="ngram", k=4, ngram_min=1, ngram_max=3, engine=engine)
    doc["schedule"] = schedule("ngram", ranges)
    return doc


def draft_doc(engine: str, ranges: list[dict] | None = None) -> dict:
    doc = frozen(DRAFT, method="draft_model", k=4, engine=engine)
    doc["schedule"] = schedule("draft_model", ranges)
    return doc


# ------------------------------------------------ the engines' lookups, from their source
def vllm_lookup(entries: list[list[int]], max_num_seqs: int, cap: int) -> list[int]:
    """vllm/v1/spec_decode/dynamic/utils.py build_dynamic_sd_schedule_lookup (0.33.0):
    dense[bs] for bs in 1..max_num_seqs, gaps and the tail carry the previous K, every K
    clamped to num_speculative_tokens."""
    dense = [0] * (max_num_seqs + 1)
    next_bs, last = 1, None
    for start, end, k in sorted(entries):
        if start > next_bs and last is not None:
            for bs in range(next_bs, min(start, max_num_seqs + 1)):
                dense[bs] = min(cap, last)
        for bs in range(max(start, next_bs), min(end, max_num_seqs) + 1):
            dense[bs] = min(cap, k)
        next_bs, last = max(next_bs, end + 1), k
    for bs in range(next_bs, max_num_seqs + 1):
        dense[bs] = min(cap, last)
    return dense


def trtllm_upper(schedule: dict[int, int], batch_size: int, floor: int = 0) -> int:
    """tensorrt_llm/_torch/speculative/utils.py get_draft_len_for_batch_size (one-model):
    the first key >= batch size; above the largest key the floor (0 without one)."""
    keys = sorted(schedule)
    idx = bisect_left(keys, batch_size)
    return max(schedule[keys[idx]], floor) if idx < len(keys) else floor


def trtllm_lower(schedule: dict[int, int], batch_size: int) -> int:
    """The two-model Drafter's own get_draft_len_for_batch_size: the largest key <=
    batch size."""
    keys = sorted(schedule)
    return schedule[keys[bisect_right(keys, batch_size) - 1]]


def trtllm_validate(spec: dict[str, Any]) -> None:
    """llm_args.py validate_draft_len_schedule_and_sort: keys >= 1, values >= 0, the
    smallest key's value == max_draft_len, none above it; no max_concurrency beside."""
    schedule = {int(k): v for k, v in spec["draft_len_schedule"].items()}
    assert all(k >= 1 for k in schedule) and all(v >= 0 for v in schedule.values())
    assert schedule[min(schedule)] == spec["max_draft_len"]
    assert max(schedule.values()) <= spec["max_draft_len"]
    assert not set(pins.TRTLLM_SCHEDULE_EXCLUSIVE) & set(spec)


# ------------------------------------------------------------------------------ vLLM
@pytest.mark.parametrize("make, fields", [
    (ngram_doc, {"method": "ngram", "prompt_lookup_max": 3, "prompt_lookup_min": 1}),
    (draft_doc, {"method": "draft_model", "model": DRAFT["spec"],
                 "draft_sample_method": "greedy"}),
])
def test_vllm_writes_the_ranges_and_the_largest_k(make, fields) -> None:
    # The largest K is not at batch size 1 here: vLLM has no such rule.
    ranges = [{"start": 1, "end": 1, "k": 3}, {"start": 2, "end": 3, "k": 5},
              {"start": 4, "end": 8, "k": 0}]
    doc = make("vllm", ranges)
    result = export(doc, "vllm", lossy=make is draft_doc)
    spec = json.loads(result.primary())
    assert spec == {**fields, "num_speculative_tokens": 5,
                    "num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 3, 5],
                                                              [4, 8, 0]]}
    jsonschema.validate(spec, schema("vllm"))
    check_vllm(spec)
    # What vLLM runs: every tuned batch size its K, the last K carried to max_num_seqs.
    dense = vllm_lookup(spec["num_speculative_tokens_per_batch_size"], 16,
                        spec["num_speculative_tokens"])
    assert dense[1:] == [3, 5, 5] + [0] * 13
    if make is ngram_doc:
        assert "vllm" in expressible(doc) and result.dropped == []
        return
    # A draft model below its largest K drafts more in vLLM than measured: a named loss
    # (the schedule is still written).
    assert "vllm" not in expressible(doc)
    assert result.dropped == [
        "schedule drafting: at batch sizes 1 (K=3), 4-8 (K=0) vLLM drafts more than "
        "autotune measured: Model Runner V2 (the default) drafts num_speculative_tokens=5 "
        "every step with a draft model (v1/worker/gpu/spec_decode/standalone_ar/"
        "speculator.py L290 loops over all of them) and verifies only the step's K "
        "(v1/worker/gpu/model_runner.py L2308-2337); V1 drafts the step's K but runs one "
        "draft forward even where K is 0 (v1/spec_decode/llm_base_proposer.py L599 before "
        "L616-619); the schedule is written as tuned, and those ranges run slower than "
        "measured"]
    same = [{"start": 1, "end": 8, "k": 4}]
    assert export(make("vllm", same), "vllm").dropped == []


def test_vllm_eagle_schedules_lose_only_where_k_is_zero() -> None:
    """vLLM 0.33.0's V2 EAGLE speculator drafts exactly the step's K
    (v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py L193-201, L345-368), and
    prefills the draft where K is 0 (L285-300); only a draft model drafts the largest K
    every step (standalone_ar/speculator.py L290). So an EAGLE schedule whose K are all
    above 0 exports as measured, and one with K = 0 names that range alone."""
    all_on = [{"start": 1, "end": 1, "k": 4}, {"start": 2, "end": 3, "k": 3},
              {"start": 4, "end": 8, "k": 2}]
    with_off = all_on[:2] + [{"start": 4, "end": 8, "k": 0}]
    doc = frozen(DRAFT, method="eagle", k=4, engine="vllm")
    doc["schedule"] = schedule("eagle", all_on)
    result = export(doc, "vllm")
    assert result.dropped == [] and "vllm" in expressible(doc)
    assert json.loads(result.primary())["num_speculative_tokens_per_batch_size"] == [
        [1, 1, 4], [2, 3, 3], [4, 8, 2]]
    doc["schedule"] = schedule("eagle", with_off)
    dropped = export(doc, "vllm", lossy=True).dropped
    assert len(dropped) == 1 and dropped[0].startswith(
        "schedule drafting: at batch sizes 4-8 (K=0) vLLM drafts more than autotune "
        "measured: both model runners run one EAGLE draft pass where K is 0")
    text = launch(doc, "vllm", export(doc, "vllm", lossy=True).files)
    assert "drafts exactly the step's K with EAGLE" in text


def test_vllm_suffix_launch_names_the_async_scheduling_it_loses() -> None:
    """vLLM 0.33.0 vllm/config/vllm.py L1651-1661, L1710-1717: on Model Runner V1, where
    suffix decoding runs, async scheduling is turned off for it."""
    doc = frozen(method="suffix", engine="vllm", k=8)
    text = launch(doc, "vllm", export(doc, "vllm").files)
    assert "suffix decoding also turns async scheduling off" in text


def test_vllm_launch_says_what_was_measured_and_what_lies_beyond() -> None:
    doc = ngram_doc("vllm")
    result = export(doc, "vllm")
    text = launch(doc, "vllm", result.files)
    assert "measured at batch sizes 1, 2, 4, 8; 1: K=4, 2-3: K=3, 4-8: K=0" in text
    assert ("Beyond batch size 8 nothing was measured: vLLM carries the last range's K=0 "
            "(no speculation) on to every batch size up to max_num_seqs") in text
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in text
    # The command line carries the same JSON as the file.
    assert '"num_speculative_tokens_per_batch_size":[[1,1,4],[2,3,3],[4,8,0]]' in text


def test_vllm_pins_cover_the_field_and_the_methods() -> None:
    assert pins.VLLM_SCHEDULE_FIELD in pins.VLLM_SPECULATIVE_CONFIG
    # Every method the vLLM export writes keeps the schedule on Model Runner V1 but
    # suffix decoding, whose schedule is a named loss.
    assert set(vllm_export.METHODS) - {"suffix"} <= set(pins.VLLM_SCHEDULE_V1_METHODS)
    assert "suffix" not in pins.VLLM_SCHEDULE_V1_METHODS


# ------------------------------------------------------------------------ TensorRT-LLM
@pytest.mark.parametrize("make, decoding_type", [(ngram_doc, "NGram"),
                                                  (draft_doc, "Draft_Target")])
def test_trtllm_keys_both_range_ends_and_max_draft_len(make, decoding_type) -> None:
    doc = make("trtllm")
    result = export(doc, "trtllm")
    document = yaml.safe_load(result.files["trtllm.yaml"])
    spec = document["speculative_config"]
    assert spec["decoding_type"] == decoding_type
    assert spec["max_draft_len"] == 4
    assert spec["draft_len_schedule"] == {1: 4, 2: 3, 3: 3, 4: 0, 8: 0}
    trtllm_validate(spec)
    as_json = json.loads(result.primary())
    jsonschema.validate(as_json, schema("trtllm"))
    check_trtllm(as_json, {"speculative_config": as_json})
    assert {int(k): v for k, v in as_json["draft_len_schedule"].items()} == \
        spec["draft_len_schedule"]
    # Read as upper bounds (one-model, PR #10860) or as lower bounds (the two-model
    # drafter): the same K at every tuned batch size.
    for batch_size, k in EXPECTED.items():
        assert trtllm_upper(spec["draft_len_schedule"], batch_size) == k, batch_size
        assert trtllm_lower(spec["draft_len_schedule"], batch_size) == k, batch_size
    assert "trtllm" in expressible(doc)


def test_trtllm_launch_names_the_tail_and_max_concurrency() -> None:
    doc = draft_doc("trtllm")
    result = export(doc, "trtllm")
    text = launch(doc, "trtllm", result.files)
    assert "measured at batch sizes 1, 2, 4, 8" in text
    assert "Beyond batch size 8 nothing was measured: one-model Draft_Target" in text
    assert "also run the K=0 ranges at K=1" in text
    assert "Do not add `max_concurrency`" in text


def test_a_larger_k_above_batch_size_1_is_a_trtllm_loss() -> None:
    ranges = [{"start": 1, "end": 1, "k": 2}, {"start": 2, "end": 3, "k": 4},
              {"start": 4, "end": 8, "k": 1}]
    doc = ngram_doc("trtllm", ranges)
    with pytest.raises(AutotuneError) as info:
        export(doc, "trtllm")
    message = str(info.value)
    assert "\n" not in message
    # Measured under TensorRT-LLM's n-gram rules, no other format runs it exactly.
    assert message == ("trtllm cannot express schedule (1: K=2 below the largest K=4): "
                       "use --lossy")
    assert "trtllm" not in expressible(doc)
    result = export(doc, "trtllm", lossy=True)
    spec = yaml.safe_load(result.files["trtllm.yaml"])["speculative_config"]
    assert spec["max_draft_len"] == 2
    assert spec["draft_len_schedule"] == {1: 2, 2: 2, 3: 2, 4: 1, 8: 1}
    trtllm_validate(spec)
    assert result.dropped == [
        "schedule (1: K=2 below the largest K=4): TensorRT-LLM gives the smallest "
        "draft_len_schedule key max_draft_len, so batch size 1 runs the largest K; "
        "exported with max_draft_len=2 and every larger K capped at it (1: K=2, "
        "2-3: K=2, 4-8: K=1)"]


def test_no_speculation_at_batch_size_1_only_above_is_fatal_for_trtllm() -> None:
    ranges = [{"start": 1, "end": 1, "k": 0}, {"start": 2, "end": 8, "k": 3}]
    doc = ngram_doc("trtllm", ranges)
    doc["schedule"]["batch_sizes"] = [1, 2, 8]
    for lossy in (False, True):
        with pytest.raises(AutotuneError) as info:
            export(doc, "trtllm", lossy=lossy)
        message = str(info.value)
        assert message.startswith(
            "trtllm cannot express schedule (1: K=0 below the largest K=3): ")
        assert "--lossy" not in message.split(": ", 1)[1].split(" with ")[0]


# ------------------------------------------------------------------------------ SGLang
def test_sglang_drops_the_schedule_as_a_named_loss() -> None:
    doc = ngram_doc("sglang")
    with pytest.raises(AutotuneError) as info:
        export(doc, "sglang")
    # Measured under SGLang's n-gram rules: no other format runs it exactly.
    assert str(info.value) == "sglang cannot express schedule: use --lossy"
    assert "sglang" not in expressible(doc)
    # A draft model measured under autotune's rules: the formats that take it exactly.
    with pytest.raises(AutotuneError) as info:
        export(draft_doc("autotune"), "sglang")
    # (vLLM drafts a model drafter's largest K at every batch size: a loss there too.)
    assert str(info.value) == ("sglang cannot express schedule: use --format hf or "
                               "trtllm, or --lossy")
    result = export(doc, "sglang", lossy=True)
    # The batch-1 config, exactly the file a config without a schedule gets.
    plain = dict(doc)
    del plain["schedule"]
    assert result.files == export(plain, "sglang").files
    assert result.dropped == [
        # sglang 0.5.23 adaptive_spec_params.py L61-65: adaptive is EAGLE/EAGLE3 only;
        # arg_groups/speculative_hook.py L1374-1390: otherwise a warning, fixed steps.
        "schedule: SGLang runs per-batch-size steps (speculative-adaptive) for "
        "EAGLE/EAGLE3 only; for NGRAM it warns and falls back to fixed steps; the "
        "per-batch-size schedule (1: K=4, 2-3: K=3, 4-8: K=0) is dropped and the batch-1 "
        "config (k=4) runs at every batch size; at batch sizes 4-8 it measured no "
        "speculation faster, yet SGLang will speculate there"]


# --------------------------------------------------------------------- never speculate
ALL_ZERO = [{"start": 1, "end": 8, "k": 0}]


def test_an_all_zero_schedule_is_refused() -> None:
    doc = ngram_doc("vllm", ALL_ZERO)
    assert refusal_reason(doc) == (
        "its per-batch-size schedule never speculates: K=0 at every tuned batch size "
        "(1, 2, 4, 8)")
    assert refusal_reason(ngram_doc("vllm")) is None


MODEL = {"id": "tiny", "spec": "org/tiny", "path": "/models/t", "sha256": "a" * 64,
         "hash_of": "weights", "dtype": "float32", "n_layers": 4}


def _write(tmp_path, sched: dict | None, name: str = "best.json"):
    doc = frozen_document({"method": "ngram", "k": 4, "engine": "vllm"},
                          context={"model": MODEL, "draft": None})
    if sched is not None:
        doc["schedule"] = sched
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_export_cli_refuses_an_all_zero_schedule_in_one_line(tmp_path, capsys) -> None:
    path = _write(tmp_path, schedule("ngram", ALL_ZERO))
    assert main(["export", str(path), "--format", "vllm"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == ""
    assert len(err) == 1 and "never speculates" in err[0] and "nothing exported" in err[0]


def test_run_exports_write_nothing_for_an_all_zero_schedule(tmp_path) -> None:
    out = tmp_path / "exports"
    fallback = frozen_document({"method": "ngram", "k": 2, "engine": "vllm"},
                               context={"model": MODEL, "draft": None},
                               trial={"trial": 7})
    assert write_exports(_write(tmp_path, schedule("ngram", ALL_ZERO)), out,
                         fallbacks=[fallback]) == []
    readme = (out / "README.txt").read_text()
    assert "vllm: not written: its per-batch-size schedule never speculates" in readme


def test_run_exports_say_which_batch_sizes_were_measured(tmp_path) -> None:
    out = tmp_path / "exports"
    assert write_exports(_write(tmp_path, schedule("ngram")), out) == ["vllm.json",
                                                                       "launch.md"]
    readme = (out / "README.txt").read_text().splitlines()
    assert readme[1] == (
        "Per-batch-size K for ngram: 1: K=4, 2-3: K=3, 4-8: K=0; measured at batch sizes "
        "1, 2, 4, 8 (best.json's schedule.points: each K's speedup, the held_out rows "
        "confirmed on prompts the choice never saw). Beyond batch size 8 nothing was "
        "measured: vLLM carries the last K on, TensorRT-LLM uses its implicit tail "
        "(launch.md), SGLang carries the last K on for an EAGLE chain and runs one K at "
        "every batch size for its other methods; hf and dv decode one request at a time "
        "and run the batch-1 config.")
    spec = json.loads((out / "vllm.json").read_text())
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 1, 4], [2, 3, 3],
                                                            [4, 8, 0]]
    assert "Beyond batch size 8 nothing was measured" in (out / "launch.md").read_text()


# ------------------------------------------------------------------- the frozen schema
def test_read_parts_gives_the_schedule() -> None:
    parts = read_parts(ngram_doc("vllm"))
    assert parts.schedule is not None
    assert [(r.start, r.end, r.k) for r in parts.schedule.ranges] == [(1, 1, 4), (2, 3, 3),
                                                                      (4, 8, 0)]
    assert parts.schedule.max_k == 4 and parts.schedule.largest == 8
    assert parts.schedule.batch_sizes == (1, 2, 4, 8) and parts.schedule.method == "ngram"
    assert parts.schedule.describe() == "1: K=4, 2-3: K=3, 4-8: K=0"
    assert read_parts(frozen(method="ngram")).schedule is None


@pytest.mark.parametrize("change, message", [
    ({"ranges": [{"start": 1, "end": 1, "k": 4}, {"start": 3, "end": 8, "k": 0}]},
     "schedule.ranges.1: starts at 3, not 2 (ranges must be sorted and contiguous, the "
     "first starting at batch size 1)"),
    ({"ranges": [{"start": 2, "end": 8, "k": 4}]},
     "schedule.ranges.0: starts at 2, not 1"),
    ({"ranges": [{"start": 1, "end": 3, "k": 4}, {"start": 2, "end": 8, "k": 0}]},
     "schedule.ranges.1: starts at 2, not 4"),
    ({"ranges": [{"start": 1, "end": 4, "k": 4}]},
     "schedule.ranges.0: ends at 4, not at the largest tuned batch size 8"),
    ({"ranges": [{"start": 1, "end": 2, "k": 4}, {"start": 3, "end": 8, "k": 1}]},
     "schedule.ranges.1: starts at 3, which is not a tuned batch size (1, 2, 4, 8)"),
    ({"ranges": [{"start": 1, "end": 8, "k": -1}]},
     "schedule.ranges.0.k: -1 is less than the minimum of 0"),
    ({"method": "draft_model"},
     "schedule.method: 'draft_model' is not the config's method 'ngram'"),
    ({"batch_size": [1, 2]}, "schedule: unknown key 'batch_size'"),
    ({"points": [{"batch_size": 1, "k": 4, "split": "validation"}]},
     "schedule.points.0.split: 'validation' is not one of 'search', 'held_out'"),
])
def test_a_malformed_schedule_is_one_problem(change, message) -> None:
    doc = {"schema": SCHEMA, "params": {"method": "ngram", "k": 4},
           "schedule": {**schedule("ngram"), **change}}
    found = problems(doc)
    assert len(found) == 1 and found[0].startswith(message), found


def test_export_cli_rejects_a_malformed_schedule_in_one_line(tmp_path, capsys) -> None:
    bad = schedule("ngram", [{"start": 1, "end": 1, "k": 4}, {"start": 3, "end": 8, "k": 0}])
    path = _write(tmp_path, bad)
    assert main(["export", str(path), "--format", "vllm"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == ""
    assert len(err) == 1 and "schedule.ranges.1: starts at 3, not 2" in err[0]
    assert str(path) in err[0]
    # A structural error too: the schema's message, in one line.
    path = _write(tmp_path, {**schedule("ngram"), "ranges": [{"start": 1, "end": 8}]},
                  "bad2.json")
    assert main(["export", str(path), "--format", "vllm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "schedule.ranges.0: 'k' is a required property" in err[0]


def test_a_schedule_is_v3s_own() -> None:
    doc = {"schema": "autotune.frozen/v2", "params": {"method": "ngram"},
           "schedule": schedule("ngram")}
    assert any("schedule" in p for p in problems(doc))


def test_what_the_search_writes_reads() -> None:
    """The producer's extras (autotune/schedule.py): `notes`, a point's `lossless`, a
    first range from 1 when batch size 1 was not tuned, method "none" for a schedule
    that never speculates."""
    sched = {**schedule("ngram", [{"start": 1, "end": 3, "k": 2},
                                  {"start": 4, "end": 4, "k": 0}], (2, 4)),
             "notes": ["B=4: K=2 was not faster than batched AR on the held-out prompts"]}
    sched["points"][0]["lossless"] = True
    doc = {"schema": SCHEMA, "params": {"method": "ngram", "k": 4}, "schedule": sched}
    assert problems(doc) == []
    off = {**schedule("none", ALL_ZERO), "points": [], "notes": ["not to speculate"]}
    doc = {"schema": SCHEMA, "params": {"method": "ngram", "k": 4}, "schedule": off}
    assert problems(doc) == []
    assert refusal_reason(doc).startswith("its per-batch-size schedule never speculates")
