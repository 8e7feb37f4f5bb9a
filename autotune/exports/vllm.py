"""vLLM: the JSON of `vllm serve --speculative-config` / `LLM(speculative_config=...)`.

Field names from vLLM's "Configuration Reference" of `--speculative-config`
(docs/features/speculative_decoding/configuration.md, docs.vllm.ai, vLLM 0.2x): `method`
("draft_model" | "ngram"), `model`, `num_speculative_tokens`, `draft_tensor_parallel_size`,
`prompt_lookup_max`, `prompt_lookup_min`; class SpeculativeConfig in
vllm/config/speculative.py, which takes the JSON as keyword arguments.
"""

from __future__ import annotations

from typing import Any

from autotune.exports._common import Loss, Source, dump_json, fixed_k_policy_loss, method_loss

NAME = "vllm"
ENGINE = "vLLM"


def check(src: Source) -> list[Loss]:
    losses = [
        method_loss(src, ("draft_model", "ngram"),
                    "vLLM speculates with a draft model or n-grams, not with the target's "
                    "own layers"),
        # vLLM drafts num_speculative_tokens every step; its dynamic variants follow their
        # own rules, none of ours.
        fixed_k_policy_loss(src, ENGINE),
    ]
    return [loss for loss in losses if loss is not None]


def render(src: Source, options: dict[str, Any]) -> dict[str, str]:
    cfg = src.cfg
    spec: dict[str, Any]
    if cfg.method == "draft_model":
        spec = {"method": "draft_model", "model": src.draft, "num_speculative_tokens": cfg.k}
        tp = options.get("draft_tensor_parallel_size")
        if tp is not None:
            spec["draft_tensor_parallel_size"] = tp
    else:
        spec = {"method": "ngram", "num_speculative_tokens": cfg.k,
                "prompt_lookup_max": cfg.ngram_max, "prompt_lookup_min": cfg.ngram_min}
    return {"vllm.json": dump_json(spec)}
