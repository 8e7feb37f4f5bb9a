"""vLLM: the JSON of `vllm serve --speculative-config` / `LLM(speculative_config=...)`

Writes `vllm/speculative_config.json` and launch.md: the draft model's or n-gram chain,
suffix decoding, a per-batch-size K schedule; trees are a loss (chains only).
What was read upstream, where (versions, commits, files, line references):
docs/engines/vllm.md; the versions and commits are `PROVENANCE["vllm"]` in
autotune/schema/engines.py.
"""

from __future__ import annotations

import json
import shlex
from typing import TypedDict

from autotune.schema.engines import VLLM_CPU_VERSION, engine_rules, provenance
from autotune.exports._common import (
    ExportOptions,
    Loss,
    Source,
    chain_only_tree_loss,
    dump_json,
    engine_methods,
    fenced,
    fixed_k_policy_loss,
    method_knobs,
    method_loss,
    request_parameters,
    rules_loss,
    schedule_paragraph,
)
from autotune.exports.heads import VLLM_DIR

NAME = "vllm"
ENGINE = "vLLM"
RULES = "vllm"           # the engine rules (autotune/schema/engines.py) vLLM follows
FILE = "vllm.json"
# vLLM's `method`s that autotune measures: a separate draft model, prompt lookup, and a
# trained EAGLE-1 head from the `vllm/` checkpoint train-draft writes
# (autotune/exports/heads.py says what vLLM's loaders want, read at which commit).
# Model Runner V1 keeps a per-batch-size K for each of them (vllm/config/vllm.py
# L1088-1108, above; tests/test_export_schedule.py holds them to it).
METHODS = engine_methods("draft_model", "ngram", "suffix", "eagle")
# Suffix decoding: vllm/config/speculative.py L537-556 (the suffix_decoding_* fields, their
# defaults), L1726-1759 (`_validate_suffix_decoding`: arctic_inference required, depth
# >= 1, cached requests >= 0, factor >= 0, min prob in [0, 1]);
# v1/spec_decode/suffix_decoding.py (how it drives arctic_inference; the drafter's
# docstring in autotune/methods/suffix/drafter.py). vllm/config/vllm.py L3066-3068: V2
# does not run "suffix", so vLLM picks Model Runner V1, whose `_maybe_disable_dynamic_sd_
# for_v1` (L1088-1108) drops a per-batch-size schedule for it.
# The vLLM read (PROVENANCE["vllm"].version) has no Medusa: vllm/config/speculative.py
# L74-82 `SpeculativeMethod` lists no "medusa" (and SpeculativeConfig validates it), the
# wheel has no medusa.py. The release before it (the table's second version, its wheel's
# commit there) still lists it (L75) and loads it.
VERSION = provenance("vllm").version
MEDUSA_LAST = provenance("vllm").versions[1].removeprefix("vLLM ")


def check(src: Source) -> list[Loss]:
    losses = [
        _medusa_loss(src) or method_loss(
            src, METHODS, "vLLM speculates with a draft model or n-grams, not with the "
                          "target's own layers"),
        # vLLM drafts num_speculative_tokens every step; its dynamic variants follow their
        # own rules, none of ours.
        fixed_k_policy_loss(src, ENGINE),
        chain_only_tree_loss(src, "vLLM drafts a chain of num_speculative_tokens (its "
                                  "SpeculativeConfig has no draft-tree field)"),
        rules_loss(src, RULES),
        _suffix_schedule_loss(src),
        _model_drafter_schedule_loss(src),
        _block_suffix_loss(src),
    ]
    return [loss for loss in losses if loss is not None]


def _model_drafter_schedule_loss(src: Source) -> Loss | None:
    """The ranges of a model drafter's schedule where vLLM drafts more than was measured,
    so their figures do not hold (the schedule is still written, with --lossy). EAGLE:
    where K is 0 only; both runners run one draft pass there. A draft model: every K
    below the largest, which V2 drafts every step (V1: one draft forward where K is 0)."""
    schedule = src.schedule
    if schedule is None or not src.spec.drafts or src.spec.model_free:
        return None
    if src.cfg.method == "eagle":
        # V2's EAGLE speculator (target_dependent_ar/speculator.py L193-201, L345-368)
        # drafts exactly the step's K; at K = 0 it still prefills the draft (L285-300).
        short = [r for r in schedule.ranges if r.k == 0 and schedule.max_k > 0]
        why = ("both model runners run one EAGLE draft pass where K is 0, where autotune "
               "measured none (V2: v1/worker/gpu/spec_decode/target_dependent_ar/"
               "speculator.py L285-300 prefills the draft before returning no tokens; V1: "
               "v1/spec_decode/llm_base_proposer.py L599 before L616-619); elsewhere V2 "
               "drafts exactly the step's K (L193-201, L345-368), as measured")
    else:
        short = [r for r in schedule.ranges if r.k < schedule.max_k]
        why = (f"Model Runner V2 (the default) drafts num_speculative_tokens="
               f"{schedule.max_k} every step with a draft model (v1/worker/gpu/spec_decode/"
               "standalone_ar/speculator.py L290 loops over all of them) and verifies only "
               "the step's K (v1/worker/gpu/model_runner.py L2308-2337); V1 drafts the "
               "step's K but runs one draft forward even where K is 0 "
               "(v1/spec_decode/llm_base_proposer.py L599 before L616-619)")
    if not short:
        return None
    spans = ", ".join(f"{r.span()} (K={r.k})" for r in short)
    return Loss("schedule drafting", (),
                f"at batch sizes {spans} vLLM drafts more than autotune measured: {why}; "
                "the schedule is written as tuned, and those ranges run slower than "
                "measured")


def _suffix_schedule_loss(src: Source) -> Loss | None:
    """Suffix decoding runs on Model Runner V1, which drops a per-batch-size schedule for
    it: one K at every batch size."""
    if src.cfg.method != "suffix" or src.schedule is None:
        return None
    return Loss("schedule", (),
                "vLLM runs suffix decoding on Model Runner V1, which keeps a per-batch-size "
                "K only for ngram, eagle, eagle3, mtp, draft_model and dflash "
                "(vllm/config/vllm.py L1088-1108); the schedule "
                f"({src.schedule.describe()}) is dropped and num_speculative_tokens="
                f"{src.cfg.k} runs at every batch size")


def _block_suffix_loss(src: Source) -> Loss | None:
    """verify=block with suffix decoding: vLLM runs suffix on Model Runner V1, whose
    rejection sampler (v1/sample/rejection_sampler.py L81, L105) reads only "fly" and
    "synthetic" of rejection_sample_method; block verification is V2's
    (v1/worker/gpu/spec_decode/rejection_sampler.py L177-178)."""
    if src.cfg.method != "suffix" or src.cfg.verify != "block":
        return None
    return Loss("verify=block", (),
                "vLLM runs suffix decoding on Model Runner V1, which has no block "
                "verification (its rejection sampler reads only 'fly' and 'synthetic' of "
                "rejection_sample_method); verified token by token there")


def _medusa_loss(src: Source) -> Loss | None:
    """Medusa: a method vLLM had and VERSION no longer has, named as such."""
    if src.cfg.method != "medusa":
        return None
    why = (f"{VERSION} has no Medusa (no such speculative method); vLLM {MEDUSA_LAST} "
           "was the last to load one, from the vllm/ folder train-draft writes")
    return Loss("method=medusa", method_knobs(src.spec), why, fatal=True, note=why)


class SpeculativeConfig(TypedDict, total=False):
    """vLLM's `--speculative-config` JSON (config/speculative.py's SpeculativeConfig
    fields), as this export writes it: the interface is vLLM's own JSON."""

    method: str
    model: str | None
    num_speculative_tokens: int
    draft_sample_method: str
    draft_tensor_parallel_size: int
    suffix_decoding_max_tree_depth: int
    suffix_decoding_max_cached_requests: int
    suffix_decoding_max_spec_factor: float
    suffix_decoding_min_token_prob: float
    prompt_lookup_max: int
    prompt_lookup_min: int
    rejection_sample_method: str
    num_speculative_tokens_per_batch_size: list[list[int]]


def speculative_config(src: Source, options: ExportOptions) -> SpeculativeConfig:
    cfg = src.cfg
    spec: SpeculativeConfig
    if cfg.method == "draft_model":
        spec = {"method": "draft_model", "model": src.draft,
                "num_speculative_tokens": src.shape.chain_length,
                "draft_sample_method": "greedy"}
        if options.draft_tensor_parallel_size is not None:
            spec["draft_tensor_parallel_size"] = options.draft_tensor_parallel_size
    elif cfg.method == "eagle":
        # The head checkpoint train-draft wrote for vLLM.
        spec = {"method": cfg.method, "model": f"{src.draft}/{VLLM_DIR}",
                "num_speculative_tokens": src.shape.chain_length,
                "draft_sample_method": "greedy"}
    elif cfg.method == "suffix":
        spec = {"method": "suffix", "num_speculative_tokens": cfg.k,
                "suffix_decoding_max_tree_depth": cfg.suffix_max_tree_depth,
                "suffix_decoding_max_cached_requests": cfg.suffix_max_cached_requests,
                "suffix_decoding_max_spec_factor": cfg.suffix_max_spec_factor,
                "suffix_decoding_min_token_prob": cfg.suffix_min_token_prob}
        return spec                    # V1 drops a schedule and block verification (losses)
    else:
        spec = {"method": "ngram", "num_speculative_tokens": cfg.k,
                "prompt_lookup_max": cfg.ngram_max, "prompt_lookup_min": cfg.ngram_min}
    if cfg.verify == "block":
        # config/speculative.py L562-569; V2 verifies sampled requests by block
        # verification (argmax drafts as one-hot q), greedy ones as before.
        spec["rejection_sample_method"] = "block"
    if src.schedule is not None:
        # num_speculative_tokens is the cap every scheduled K is clamped to (and sizes
        # the buffers); the ranges are vLLM's inclusive [start, end, K] entries.
        spec["num_speculative_tokens"] = src.schedule.max_k
        spec["num_speculative_tokens_per_batch_size"] = [
            [r.start, r.end, r.k] for r in src.schedule.ranges]
    return spec


def render(src: Source, options: ExportOptions) -> dict[str, str]:
    return {FILE: dump_json(speculative_config(src, options))}


def command(src: Source, spec: SpeculativeConfig) -> str:
    """`vllm serve TARGET --speculative-config '<json>'`, shell-quoted."""
    return " ".join(["vllm", "serve", shlex.quote(src.target), "--speculative-config",
                     shlex.quote(json.dumps(spec, separators=(",", ":")))])


def launch(src: Source, files: dict[str, str]) -> str:
    spec = json.loads(files[FILE])
    text = fenced(command(src, spec), "sh") + "\n" + _runner_text(src) + "\n"
    if src.schedule is not None:
        text += _schedule_text(src) + "\n"
    text += _serving_text(src, int(spec["num_speculative_tokens"])) + "\n"
    return text + request_parameters(src.cfg) + "\n"


def _serving_text(src: Source, k: int) -> str:
    """Two server settings that change the first and last steps of a request from what
    was measured (issue 61): prefix caching and max_model_len."""
    # VERSION's v1/core/sched/scheduler.py L1308-1330, L1578-1581 (the CPU build's
    # L1131-1150, L1371-1375): a new request with one token left to compute is padded
    # to 1 + num_spec_tokens with -1 placeholder drafts, unless a schedule is set.
    padding = ("" if src.schedule is not None else
               "With prefix caching on (vLLM's default), a request whose prompt is cached "
               "up to its last token has its first step padded with "
               f"num_speculative_tokens={k} placeholder drafts, verified and rejected "
               "(v1/core/sched/scheduler.py L1308-1330, L1578-1581: kept for a uniform "
               "CUDA-graph shape); autotune measured with prefix caching off, so that "
               f"first step verifies {k + 1} tokens where 1 was measured. ")
    # VERSION's gpu_model_runner.py L4254-4267, L4420-4432 (V1); scheduler.py L849-856.
    return (padding + "Size `--max-model-len` to at least the longest prompt + max_tokens "
            f"+ {2 * k + 1} (2 x num_speculative_tokens + 1): nearer the limit vLLM "
            "cuts drafts to the room left (v1/core/sched/scheduler.py L849-856), and "
            "Model Runner V1 drafts placeholder zeros for the whole batch instead "
            "(v1/worker/gpu_model_runner.py L4254-4267, L4420-4432), which is not what "
            "was measured.\n")


def _runner_text(src: Source) -> str:
    """Which of vLLM's model runners drafts as measured."""
    if src.cfg.method == "suffix":
        # arctic-inference 0.3.0 sdist: utils.py L22 VLLM_PATCH_VERSION = "0.26.0";
        # vllm/plugin.py L28-29 returns while ARCTIC_INFERENCE_ENABLED is unset,
        # L41-51 raise on another vLLM, L55 forces VLLM_USE_V2_MODEL_RUNNER=0.
        return ("vLLM runs suffix decoding on Model Runner V1 (V2 does not run it; "
                "vllm/config/vllm.py L3066-3068) and needs arctic-inference installed "
                "beside it. Leave `ARCTIC_INFERENCE_ENABLED` unset: arctic-inference "
                "0.3.0's vLLM plugin patches only vLLM 0.26.0 and, enabled, refuses to "
                "start on any other vLLM. Its cache of earlier outputs lives as long as the "
                "server: the figures hold for a server that had served the measured "
                "workload's earlier requests, in order (docs/engines/vllm.md says what warm "
                "means). On V1 suffix decoding also turns async scheduling off "
                "(vllm/config/vllm.py L1651-1661 count it among the methods V1 cannot "
                "schedule asynchronously and L1710-1717 then set async_scheduling to False; "
                "an explicit `--async-scheduling` refuses to start, L1676-1680): a cost per "
                "step that autotune's own decoder does not pay, so figures measured there "
                "are optimistic by it.\n")
    if src.cfg.method == "ngram" and engine_rules(src.cfg.engine).runner == "V1":
        return ("The figures hold for vLLM's Model Runner V1 (vLLM "
                f"{VLLM_CPU_VERSION}'s CPU build, `vllm-cpu`, measured in vLLM itself "
                "where the summary says so): the longest n-gram's earliest occurrence, "
                "drafting only the tokens it finds. "
                "vLLM runs V1 on every CPU (its Triton has no CPU backend; "
                "vllm/config/vllm.py L720-727) and on CUDA with "
                "`VLLM_USE_V2_MODEL_RUNNER=0`; CUDA's default V2 drafts otherwise (the "
                "most recent occurrence, num_speculative_tokens every step): set that "
                "variable there, or re-tune on the GPU. On a CPU vLLM was run as its CPU "
                "install guide asks: `LD_PRELOAD=<venv>/lib/libiomp5.so` (Intel OpenMP; "
                "without it vLLM warns of \"significant performance loss\" for "
                "speculative decoding) and `VLLM_CPU_KVCACHE_SPACE` set.\n")
    if src.cfg.method == "ngram":
        return (f"The figures hold for vLLM's default Model Runner V2 ({VERSION}): the "
                "longest n-gram's most recent occurrence, and num_speculative_tokens drafts "
                "every step, the slots no match fills holding the last token. Model Runner "
                "V1 (`VLLM_USE_V2_MODEL_RUNNER=0`) takes the earliest occurrence and drafts "
                "only what it finds: another drafter than the one measured.\n")
    return (f"The figures hold for vLLM's default Model Runner V2 ({VERSION}); V1 "
            "(`VLLM_USE_V2_MODEL_RUNNER=0`) drafts the same greedy chain.\n")


def _schedule_text(src: Source) -> str:
    """What vLLM does with the schedule, where it departs from what was measured."""
    schedule = src.schedule
    assert schedule is not None
    last = schedule.ranges[-1].k
    tail = f"K={last}" + (" (no speculation)" if last == 0 else "")
    return (schedule_paragraph(
                schedule,
                "`num_speculative_tokens_per_batch_size` in vllm.json, with "
                f"num_speculative_tokens={schedule.max_k} (the largest K)",
                f"vLLM carries the last range's {tail} on to every batch size up to "
                "max_num_seqs")
            + "\nvLLM's batch size is the number of requests it schedules in a step. "
            "Model Runner V1 (`VLLM_USE_V2_MODEL_RUNNER=0`, as vLLM's dynamic-SD "
            "examples run) drafts each step's K n-gram tokens, but a draft model's or "
            "EAGLE's first draft forward runs even where K is 0 "
            "(v1/spec_decode/llm_base_proposer.py L599 runs it before L616-619 return no "
            "draft), and V1 uses piecewise CUDA graphs with a schedule. V2 (the default) "
            "drafts exactly the step's K with EAGLE, but prefills the draft where K is 0 "
            "(v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py L285-300, "
            "L345-368); with a draft model it drafts num_speculative_tokens every step "
            "(standalone_ar/speculator.py L290) and verifies the first K, so drafting "
            "costs more than measured wherever K is smaller. With `--data-parallel-size` "
            "> 1 vLLM drops the schedule and runs num_speculative_tokens at every batch "
            "size.\n")
