"""TensorRT-LLM: the `speculative_config` of the LLM API (PyTorch backend), as JSON and as
the YAML that `trtllm-serve TARGET --backend pytorch --config trtllm.yaml` reads.

NGram, SA and Draft_Target chains, with `draft_len_schedule` for a per-batch-size K.
What was read upstream, where (versions, commits, files, line references):
docs/engines/trtllm.md; the versions and commits are `PROVENANCE["trtllm"]` in
autotune/schema/engines.py.
"""

from __future__ import annotations

import shlex
from typing import TypedDict

import yaml

from autotune.exports._common import (
    ExportOptions,
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


class SpeculativeConfig(TypedDict, total=False):
    """TensorRT-LLM's `speculative_config` (its DecodingBaseConfig subclasses'
    fields, picked by `decoding_type`), as this export writes it: the interface is
    TensorRT-LLM's own YAML/JSON."""

    decoding_type: str
    max_draft_len: int
    speculative_model: str | None
    max_matching_ngram_size: int
    enable_global_pool: bool
    is_keep_all: bool
    is_use_oldest: bool
    is_public_pool: bool
    draft_len_schedule: dict[int, int]


def speculative_config(src: Source) -> SpeculativeConfig:
    cfg = src.cfg
    spec: SpeculativeConfig
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


def render(src: Source, options: ExportOptions) -> dict[str, str]:
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
