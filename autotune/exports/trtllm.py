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
"""

from __future__ import annotations

from typing import Any

import yaml

from autotune.exports._common import Loss, Source, dump_json, fixed_k_policy_loss, method_loss

NAME = "trtllm"
ENGINE = "TensorRT-LLM"


def check(src: Source) -> list[Loss]:
    cfg = src.cfg
    losses = [
        method_loss(src, ("draft_model", "ngram"),
                    "TensorRT-LLM's LLM API speculates with a draft model or n-grams, not "
                    "with the target's own layers"),
        # draft_len_schedule changes K with the batch size, not with acceptance.
        fixed_k_policy_loss(src, ENGINE),
    ]
    if cfg.method == "ngram" and cfg.ngram_min > 1:
        losses.append(Loss(f"ngram_min={cfg.ngram_min}", (),
                           "TensorRT-LLM tries n-gram sizes from max_matching_ngram_size "
                           "down to 1; exported without a minimum"))
    return [loss for loss in losses if loss is not None]


def speculative_config(src: Source) -> dict[str, Any]:
    cfg = src.cfg
    if cfg.method == "draft_model":
        return {"decoding_type": "Draft_Target", "max_draft_len": cfg.k,
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
