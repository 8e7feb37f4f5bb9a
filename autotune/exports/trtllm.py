"""TensorRT-LLM: the `speculative_config` of the LLM API (PyTorch backend), as JSON and as
the YAML that `trtllm-serve TARGET --backend pytorch --config trtllm.yaml` reads.

Read in NVIDIA/TensorRT-LLM (docs/engines/trtllm.md; each file at its own
stored commit):

- tensorrt_llm/llmapi/llm_args.py @ 0004396720054fd8e205cbf616f21f0b57c6b412 (pinned in
  tests/engine_fields.py): DecodingBaseConfig `max_draft_len`, `speculative_model`
  (`speculative_model_dir` is an accepted input alias), the acceptance-rate switch-off
  fields `acceptance_rate_window_size`/`acceptance_rate_threshold` (autotune writes
  neither), `use_rejection_sampling` (default false: exact-match verification);
  DraftTargetDecodingConfig with `decoding_type: "Draft_Target"` (the code's Literal; the
  docs' YAML list spells it "DraftTarget", which the current code does not map), which
  sets `max_total_draft_tokens = max_draft_len` ("Current DraftTarget only supports linear
  tree"); NGramDecodingConfig (`decoding_type: "NGram"`, `max_matching_ngram_size`,
  `is_keep_all`, `is_use_oldest`, `is_public_pool`), also a linear chain. These are
  StrictBaseModel configs, believed to reject unknown keys.
- tensorrt_llm/_torch/speculative/ngram.py @ 0249976575050d2c624a5f285683c66de311a3b7:
  n-gram sizes from max_matching_ngram_size down to 1, the first hit wins, and
  `pool[pattern][0 if self.is_use_oldest else -1]`. autotune writes `is_keep_all: true`,
  `is_use_oldest: true` and the pool measured: `is_public_pool` false for the
  per-request pool, true for the pool shared by every request (`ngram_pool`, measured
  as the arm's cross-request state; docs/engines/trtllm.md).
- tensorrt_llm/_torch/speculative/interface.py @ 00b6d5a25c30b4382d24fbdf52956d601b3ffd24
  and sampler/two_model_spec_dec.py @ 00be09f78ecf0691f2b8e15dea518d1d6468679e: the draft
  model drafts its argmax and a sampled target accepts a draft only while it equals the
  target's own sampled token, unless use_rejection_sampling is set (the `trtllm` engine
  rules greedy_model_drafts, match_verification); NGram is always exact match.
- tensorrt_llm/commands/serve.py @ 00209af149e7774406881a37283dce303571eb11: `--config`
  and `--extra_llm_api_options` are one option (a YAML whose `speculative_config:` key
  holds this mapping); `--backend` defaults to pytorch.

Draft trees: only EAGLE heads draft trees in TensorRT-LLM; Draft_Target and NGram draft
a chain, so a tree of more than one path over a draft model is a loss, dropped under
`lossy` to its best path: max_draft_len = the tree's depth. autotune never writes an
Eagle config.

Per-batch-size K (a frozen config's `schedule`), read in NVIDIA/TensorRT-LLM:

- tensorrt_llm/llmapi/llm_args.py @ 0004396720054fd8e205cbf616f21f0b57c6b412,
  DecodingBaseConfig: `draft_len_schedule: Optional[dict[int, int]]`, described with
  {4:4, 8:2, 32:1} as "Batch sizes 1-4: use draft_len=4", "5-8: use draft_len=2",
  "9-32: use draft_len=1", "33+: use draft_len=0 (implicit, speculation disabled)":
  keys are inclusive upper bounds.
  `validate_draft_len_schedule_and_sort`: keys >= 1, values >= 0, "draft_len_schedule[
  smallest key] must equal max_draft_len", every value <= max_draft_len; returned
  sorted. A model validator raises "max_concurrency and draft_len_schedule are mutually
  exclusive". DraftTargetDecodingConfig's `spec_dec_mode` is DRAFT_TARGET_ONE_MODEL
  (`_draft_target_one_model = PrivateAttr(True)`); NGram is the two-model NGramDrafter.
- tensorrt_llm/_torch/speculative/interface.py @
  00b6d5a25c30b4382d24fbdf52956d601b3ffd24: `support_dynamic_draft_len()` includes
  `is_draft_target_one_model()` and `is_sa()` (PR #12262, merged March 2026), and
  `use_one_engine()` includes `is_sa()`: SA reads the schedule on the one-model path
  (not NGram, whose drafter has its own lookup, next).
- One-model path: tensorrt_llm/_torch/speculative/utils.py @
  011d0933dcb5e592f5fa2626beaf42a96324c578 `get_draft_len_for_batch_size`: bisect_left,
  "the first key >= batch_size", above the largest key `min_draft_len`, every value
  floored at it. tests/unittest/_torch/speculative/hw_agnostic/
  test_min_runtime_draft_len.py at the same commit: DraftTarget's
  `min_runtime_draft_len` is 1 (a scheduled 0 runs 1 draft token), NGram's 0 ("Two-model
  and stateless drafters keep the existing behaviour, including the ability to turn
  speculation off through the schedule"). That floor comes from PR #16888, open in the
  stored thread: whether a given build floors is not known here (launch.md says so).
- Two-model path (NGram): the Drafter's own `get_draft_len_for_batch_size` in a stored
  tensorrt_llm/_torch/speculative/drafter.py (find_string; its commit is not shown) is
  `bisect_right`, "the largest threshold <= batch_size": keys read as LOWER bounds; and
  tests/unittest/_torch/speculative/hw_agnostic/test_draft_len_schedule.py @
  3105370ba2f2f7eafba58b42327fbbc0c6df8a20 expects NGram with {1: 5, 4: 4, 5: 3, 6: 2,
  7: 1} to draft 5 at batch sizes 2 and 3, and at most the scheduled length per request,
  with speculation off at 0. Its batch size is `len(executor.active_requests)`.

So autotune writes, for every range, both its start and its end as keys with the
range's K ({1: 4, 2: 3, 3: 3, 4: 0, 8: 0} for 1: K=4, 2-3: K=3, 4-8: K=0): read as upper
bounds or as lower bounds, every tuned batch size 1..largest gets its K, and the first
key (1) carries max_draft_len as the validator wants. max_draft_len is the K at batch
size 1, so a schedule whose largest K lies above batch size 1 cannot be written exactly
(a loss: under `lossy` the larger K are capped at batch size 1's), and one with K = 0 at
batch size 1 but K > 0 above it cannot be written at all (max_draft_len must be > 0).
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from autotune.exports._common import (
    Loss,
    Source,
    chain_only_tree_loss,
    dump_json,
    engine_methods,
    fenced,
    fixed_k_policy_loss,
    method_loss,
    request_parameters,
    rules_loss,
    schedule_paragraph,
)
from autotune.frozen.schedule import Schedule, ScheduleRange

NAME = "trtllm"
ENGINE = "TensorRT-LLM"
RULES = "trtllm"
FILE = "trtllm.json"
YAML_FILE = "trtllm.yaml"
# The LLM API's decoding types autotune measures: Draft_Target, NGram, SA (the suffix
# automaton; SADecodingConfig read in autotune/methods/sa/drafter.py).
METHODS = engine_methods("draft_model", "ngram", "sa")


def check(src: Source) -> list[Loss]:
    cfg = src.cfg
    losses = [
        method_loss(src, METHODS,
                    "TensorRT-LLM's LLM API speculates with a draft model, n-grams or a "
                    "suffix automaton, not with the target's own layers",
                    heads="TensorRT-LLM builds EAGLE-1 and Medusa heads into an engine "
                          "with its examples' convert_checkpoint.py (examples/eagle, "
                          "examples/medusa), from the original repositories' checkpoints, "
                          "which autotune does not write; serve the head with vLLM or "
                          "SGLang (EAGLE)"),
        # draft_len_schedule changes K with the batch size, not with acceptance.
        fixed_k_policy_loss(src, ENGINE),
        chain_only_tree_loss(src, "TensorRT-LLM drafts trees only with EAGLE heads; its "
                                  "Draft_Target config drafts a chain"),
    ]
    if cfg.method == "ngram" and cfg.ngram_min > 1:
        losses.append(Loss(f"ngram_min={cfg.ngram_min}", (),
                           "TensorRT-LLM tries n-gram sizes from max_matching_ngram_size "
                           "down to 1; exported without a minimum"))
    # SA reads draft_len_schedule one-model, as Draft_Target does (module docstring).
    losses.append(schedule_loss(src))
    losses.append(rules_loss(src, RULES))
    return [loss for loss in losses if loss is not None]


def schedule_loss(src: Source) -> Loss | None:
    """draft_len_schedule's smallest key must carry max_draft_len, so batch size 1 always
    runs the largest K: a schedule with a larger K above batch size 1 is a loss."""
    schedule = src.schedule
    if schedule is None or schedule.ranges[0].k == schedule.max_k:
        return None
    first = schedule.ranges[0]
    label = f"schedule ({first.label()} below the largest K={schedule.max_k})"
    if first.k == 0:
        return Loss(label, (),
                    "TensorRT-LLM's max_draft_len must be > 0 and is the draft length at "
                    "batch size 1, so it cannot leave batch size 1 unspeculated and "
                    "speculate above it", fatal=True)
    capped = ", ".join(ScheduleRange(r.start, r.end, min(r.k, first.k)).label()
                       for r in schedule.ranges)
    return Loss(label, (),
                "TensorRT-LLM gives the smallest draft_len_schedule key max_draft_len, so "
                "batch size 1 runs the largest K; exported with max_draft_len="
                f"{first.k} and every larger K capped at it ({capped})")


def draft_len_schedule(schedule: Schedule) -> dict[int, int]:
    """Both ends of every range as keys, with its K capped at batch size 1's: the same
    K at every tuned batch size whether TensorRT-LLM reads the keys as upper bounds
    (one-model) or as lower bounds (the two-model NGram drafter); see the docstring."""
    cap = schedule.ranges[0].k
    keys: dict[int, int] = {}
    for r in schedule.ranges:
        keys[r.start] = keys[r.end] = min(r.k, cap)
    return keys


def speculative_config(src: Source) -> dict[str, Any]:
    cfg = src.cfg
    spec: dict[str, Any]
    if cfg.method == "draft_model":
        spec = {"decoding_type": "Draft_Target", "max_draft_len": src.shape.chain_length,
                "speculative_model": src.draft}
    elif cfg.method == "sa":
        # Each request's own automaton (no global pool), as measured.
        spec = {"decoding_type": "SA", "max_draft_len": cfg.k,
                "max_matching_ngram_size": cfg.sa_max_matching_ngram_size,
                "enable_global_pool": False}
    else:
        # The pool measured (this request's own, or one shared by every request), the
        # earliest occurrence (the oldest match), every continuation kept.
        spec = {"decoding_type": "NGram", "max_draft_len": cfg.k,
                "max_matching_ngram_size": cfg.ngram_max, "is_keep_all": True,
                "is_use_oldest": True, "is_public_pool": cfg.ngram_pool == "public"}
    if src.schedule is not None:
        # The validator wants the smallest key (batch size 1) to carry max_draft_len.
        spec["max_draft_len"] = src.schedule.ranges[0].k
        spec["draft_len_schedule"] = draft_len_schedule(src.schedule)
    return spec


def render(src: Source, options: dict[str, Any]) -> dict[str, str]:
    spec = speculative_config(src)
    text = yaml.safe_dump({"speculative_config": spec}, sort_keys=False)
    return {FILE: dump_json(spec), YAML_FILE: text}


def launch(src: Source, files: dict[str, str]) -> str:
    line = f"trtllm-serve {shlex.quote(src.target)} --backend pytorch --config {YAML_FILE}"
    return (fenced(line, "sh")
            + "\n`--config` is also spelt `--extra_llm_api_options`. TensorRT-LLM's docs "
            "run their Draft/Target and NGram examples with `disable_overlap_scheduler: "
            "true` at the top level of this YAML.\n\n"
            + (_schedule_text(src) + "\n" if src.schedule is not None else "")
            + request_parameters(src.cfg) + "\n")


def _schedule_text(src: Source) -> str:
    """What TensorRT-LLM does with the schedule past the measured batch sizes, and the
    floor some builds apply."""
    schedule = src.schedule
    assert schedule is not None
    last = schedule.ranges[-1].k
    if src.cfg.method in ("draft_model", "sa"):
        off = any(r.k == 0 for r in schedule.ranges)
        mode = "Draft_Target" if src.cfg.method == "draft_model" else "SA"
        beyond = (f"one-model {mode} drops to its implicit draft length above the "
                  "largest key: 0 (no speculation), or 1 in builds that floor one-model "
                  "draft lengths at min_runtime_draft_len (PR #16888)"
                  + (", which also run the K=0 ranges at K=1" if off else ""))
    elif last == 0:
        beyond = "TensorRT-LLM's NGram drafter stays at draft length 0 (no speculation)"
    else:
        beyond = (f"TensorRT-LLM's two-model NGram drafter reads the keys as lower bounds "
                  f"and keeps K={last}; a build that reads them as upper bounds (the "
                  "one-model rule) drops to draft length 0 there")
    return (schedule_paragraph(
                schedule,
                "`draft_len_schedule` in trtllm.yaml, each range's first and last batch "
                "size as keys (right whether TensorRT-LLM reads keys as upper or lower "
                "bounds), max_draft_len = the K at batch size 1",
                beyond)
            + "\nDo not add `max_concurrency` to this `speculative_config`: TensorRT-LLM "
            "rejects it together with `draft_len_schedule`.\n")
