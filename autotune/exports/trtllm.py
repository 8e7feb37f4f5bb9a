"""TensorRT-LLM: the `speculative_config` of the LLM API, as JSON and as the
`extra_llm_api_options` YAML that `trtllm-serve --extra_llm_api_options trtllm.yaml` reads.

Field names from tensorrt_llm/llmapi/llm_args.py (2026 main) and
docs/source/features/speculative-decoding.md: DecodingBaseConfig `max_draft_len` and
`speculative_model` (the current name; `speculative_model_dir`, the name in earlier
releases, is still accepted as an alias); DraftTargetDecodingConfig with
`decoding_type: "Draft_Target"` (the class's Literal; earlier releases and the docs' list
of YAML values spell it "DraftTarget"); NGramDecodingConfig with `decoding_type: "NGram"`,
`max_matching_ngram_size`, `is_keep_all`, `is_use_oldest`, `is_public_pool`. These
configs are pydantic models that forbid unknown keys. N-gram behaviour (sizes tried from
max_matching_ngram_size down to 1, a pool of matches per pattern) from
tensorrt_llm/_torch/speculative/ngram.py. `trtllm-serve --config` is the newer name of
`--extra_llm_api_options`; both read this YAML.

Draft trees: TensorRT-LLM drafts trees only with EAGLE heads. EagleDecodingConfig /
Eagle3DecodingConfig (llm_args.py; LLM API reference, 1.3.0rc27) take a static tree as
`eagle_choices` (List[List[int]], "Static tree structure ... Each sublist represents a path
in the tree"; max_total_draft_tokens becomes len(eagle_choices)) or EAGLE-2's dynamic tree
as `use_dynamic_tree: true` with `dynamic_tree_max_topK` (children expanded per node),
`max_draft_len` (drafter layers) and `max_total_draft_tokens` ("the total nodes of the final
draft tree (exclude the root node)"), and they need an EAGLE draft checkpoint that reads the
target's hidden states. DraftTargetDecodingConfig, the one for a separate draft model, sets
`max_total_draft_tokens = max_draft_len` ("Current DraftTarget only supports linear tree").
So a tree of more than one path over a draft model is a loss, dropped under `lossy` to its
best path: max_draft_len = the tree's depth. autotune never writes an Eagle config.
"""

from __future__ import annotations

from typing import Any

import yaml

from autotune.exports._common import (
    Loss,
    Source,
    chain_only_tree_loss,
    dump_json,
    engine_methods,
    fixed_k_policy_loss,
    method_loss,
)

NAME = "trtllm"
ENGINE = "TensorRT-LLM"
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
        chain_only_tree_loss(src, "TensorRT-LLM drafts trees only with EAGLE heads "
                                  "(eagle_choices, use_dynamic_tree); its Draft_Target "
                                  "config drafts a chain"),
    ]
    if cfg.method == "ngram" and cfg.ngram_min > 1:
        losses.append(Loss(f"ngram_min={cfg.ngram_min}", (),
                           "TensorRT-LLM tries n-gram sizes from max_matching_ngram_size "
                           "down to 1; exported without a minimum"))
    return [loss for loss in losses if loss is not None]


def speculative_config(src: Source) -> dict[str, Any]:
    cfg = src.cfg
    if cfg.method == "draft_model":
        return {"decoding_type": "Draft_Target", "max_draft_len": src.shape.chain_length,
                "speculative_model": src.draft}
    # Our drafter looks the suffix up in this request's own tokens and takes the
    # continuation of its most recent occurrence: a private pool, newest match.
    return {"decoding_type": "NGram", "max_draft_len": cfg.k,
            "max_matching_ngram_size": cfg.ngram_max, "is_keep_all": True,
            "is_use_oldest": False, "is_public_pool": False}


def render(src: Source, options: dict[str, Any]) -> dict[str, str]:
    spec = speculative_config(src)
    text = yaml.safe_dump({"speculative_config": spec}, sort_keys=False)
    return {"trtllm.json": dump_json(spec), "trtllm.yaml": text}
