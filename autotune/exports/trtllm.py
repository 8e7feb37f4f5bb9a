"""TensorRT-LLM: the `speculative_config` of the LLM API (PyTorch backend), as JSON and as
the YAML that `trtllm-serve TARGET --backend pytorch --config trtllm.yaml` reads.

Read in NVIDIA/TensorRT-LLM (notes: /work/notes/engines/trtllm.md; each file at its own
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
  `is_use_oldest: true` and `is_public_pool: false`: the per-request pool that the
  `trtllm` engine rule reproduces (autotune/decoding/drafters/ngram.py MatchPool; the
  public pool is shared by all requests and never pruned, which no single-request
  measurement could reproduce).
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
)

NAME = "trtllm"
ENGINE = "TensorRT-LLM"
RULES = "trtllm"
FILE = "trtllm.json"
YAML_FILE = "trtllm.yaml"
# The LLM API's decoding types autotune measures: Draft_Target, NGram.
METHODS = engine_methods("draft_model", "ngram")


def check(src: Source) -> list[Loss]:
    cfg = src.cfg
    losses = [
        method_loss(src, METHODS,
                    "TensorRT-LLM's LLM API speculates with a draft model or n-grams, not "
                    "with the target's own layers"),
        # draft_len_schedule changes K with the batch size, not with acceptance.
        fixed_k_policy_loss(src, ENGINE),
        chain_only_tree_loss(src, "TensorRT-LLM drafts trees only with EAGLE heads; its "
                                  "Draft_Target config drafts a chain"),
    ]
    if cfg.method == "ngram" and cfg.ngram_min > 1:
        losses.append(Loss(f"ngram_min={cfg.ngram_min}", (),
                           "TensorRT-LLM tries n-gram sizes from max_matching_ngram_size "
                           "down to 1; exported without a minimum"))
    losses.append(rules_loss(src, RULES))
    return [loss for loss in losses if loss is not None]


def speculative_config(src: Source) -> dict[str, Any]:
    cfg = src.cfg
    if cfg.method == "draft_model":
        return {"decoding_type": "Draft_Target", "max_draft_len": src.shape.chain_length,
                "speculative_model": src.draft}
    # This request's own tokens (a private pool), the earliest occurrence (the oldest
    # match), every continuation kept.
    return {"decoding_type": "NGram", "max_draft_len": cfg.k,
            "max_matching_ngram_size": cfg.ngram_max, "is_keep_all": True,
            "is_use_oldest": True, "is_public_pool": False}


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
            + request_parameters(src.cfg) + "\n")
