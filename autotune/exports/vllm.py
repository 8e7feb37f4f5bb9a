"""vLLM: the JSON of `vllm serve --speculative-config` / `LLM(speculative_config=...)`.

Field names from vLLM's "Configuration Reference" of `--speculative-config`
(docs/features/speculative_decoding/configuration.md, docs.vllm.ai, vLLM 0.2x): `method`
("draft_model" | "ngram"), `model`, `num_speculative_tokens`, `draft_tensor_parallel_size`,
`prompt_lookup_max`, `prompt_lookup_min`; class SpeculativeConfig in
vllm/config/speculative.py, which takes the JSON as keyword arguments.

Draft trees: vLLM has no dynamic (EAGLE-2) tree. Its one tree knob, `speculative_token_tree`
(a static tree of child-rank paths, "Specifies the tree structure for speculative token
generation"; a chain of num_speculative_tokens when unset), is read by the EAGLE proposer
(vllm/v1/spec_decode/eagle.py) under the TREE_ATTN attention backend, which needs every node
of a level to have as many children; the tree rejection sampler was never merged
(vllm-project/vllm PR #22752 closed) and tree speculative decoding is "not yet fully
implemented" (issue #37396, March 2026). So a tree of more than one path is a loss, dropped
under `lossy` to its best path: num_speculative_tokens = the tree's depth.
"""

from __future__ import annotations

from typing import Any

from autotune.exports._common import (
    Loss,
    Source,
    chain_only_tree_loss,
    dump_json,
    engine_methods,
    fixed_k_policy_loss,
    method_loss,
)

NAME = "vllm"
ENGINE = "vLLM"
# vLLM's `method`s that autotune measures: a separate draft model, prompt lookup.
METHODS = engine_methods("draft_model", "ngram")


def check(src: Source) -> list[Loss]:
    losses = [
        method_loss(src, METHODS,
                    "vLLM speculates with a draft model or n-grams, not with the target's "
                    "own layers"),
        # vLLM drafts num_speculative_tokens every step; its dynamic variants follow their
        # own rules, none of ours.
        fixed_k_policy_loss(src, ENGINE),
        chain_only_tree_loss(src, "vLLM's speculative_config has no working draft tree "
                                  "(speculative_token_tree is an unfinished EAGLE-only "
                                  "static tree)"),
    ]
    return [loss for loss in losses if loss is not None]


def render(src: Source, options: dict[str, Any]) -> dict[str, str]:
    cfg = src.cfg
    spec: dict[str, Any]
    if cfg.method == "draft_model":
        spec = {"method": "draft_model", "model": src.draft,
                "num_speculative_tokens": src.shape.chain_length}
        tp = options.get("draft_tensor_parallel_size")
        if tp is not None:
            spec["draft_tensor_parallel_size"] = tp
    else:
        spec = {"method": "ngram", "num_speculative_tokens": cfg.k,
                "prompt_lookup_max": cfg.ngram_max, "prompt_lookup_min": cfg.ngram_min}
    return {"vllm.json": dump_json(spec)}
