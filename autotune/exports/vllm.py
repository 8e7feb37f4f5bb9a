"""vLLM: the JSON of `vllm serve --speculative-config` / `LLM(speculative_config=...)`.

Read in vLLM 0.33.0 (the PyPI wheel, built from commit 4ba787ec9; notes:
/work/notes/engines/vllm.md):

- vllm/config/speculative.py `SpeculativeConfig` is a pydantic dataclass built by
  vllm/config/utils.py `config()` with `ConfigDict(extra="forbid")`: an unknown key is an
  error, so only its fields are written (pinned in tests/engine_fields.py). `method`
  "draft_model" (with `model`) or "ngram"; `num_speculative_tokens`;
  `prompt_lookup_min`/`prompt_lookup_max`, which default to 5/5 when both are unset (and
  one copies the other when only one is set): both are always written.
- `draft_sample_method` ("greedy" default | "probabilistic"): with "greedy" a draft model
  drafts its argmax and v1/sample/rejection_sampler.py treats the draft as one-hot
  (`draft_prob = 1`) (v1/spec_decode/llm_base_proposer.py `_greedy_sample`). autotune
  writes "greedy" explicitly: it is the `vllm` engine rule (greedy_model_drafts) a config
  searched with `--target vllm` was measured under.
- v1/spec_decode/ngram_proposer.py (same code in vllm-project/vllm @
  adce4e9a528d7f79328075e195c855d28732ef13): the longest suffix match up to
  prompt_lookup_max, ties to "the earliest position in the original tokens", none below
  prompt_lookup_min: the `vllm` engine rule (earliest occurrence).
- vllm/engine/arg_utils.py: `--speculative-config` (`-sc`) parses a JSON object.

Draft trees: SpeculativeConfig 0.33.0 has no tree field (`speculative_token_tree` is
gone: absent from the wheel and from vllm/config/speculative.py @
002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443; only the old @f19b16d9 had it). A draft model
drafts exactly num_speculative_tokens tokens in a chain (llm_base_proposer.py,
`for token_index in range(self.num_speculative_tokens - 1)`, no confidence stop), so a
tree of more than one path is a loss, dropped under `lossy` to its best path:
num_speculative_tokens = the tree's depth.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

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

NAME = "vllm"
ENGINE = "vLLM"
RULES = "vllm"           # the engine rules (autotune/decoding/engines.py) vLLM follows
FILE = "vllm.json"
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
        chain_only_tree_loss(src, "vLLM drafts a chain of num_speculative_tokens (its "
                                  "SpeculativeConfig has no draft-tree field)"),
        rules_loss(src, RULES),
    ]
    return [loss for loss in losses if loss is not None]


def speculative_config(src: Source, options: dict[str, Any]) -> dict[str, Any]:
    cfg = src.cfg
    spec: dict[str, Any]
    if cfg.method == "draft_model":
        spec = {"method": "draft_model", "model": src.draft,
                "num_speculative_tokens": src.shape.chain_length,
                "draft_sample_method": "greedy"}
        tp = options.get("draft_tensor_parallel_size")
        if tp is not None:
            spec["draft_tensor_parallel_size"] = tp
    else:
        spec = {"method": "ngram", "num_speculative_tokens": cfg.k,
                "prompt_lookup_max": cfg.ngram_max, "prompt_lookup_min": cfg.ngram_min}
    return spec


def render(src: Source, options: dict[str, Any]) -> dict[str, str]:
    return {FILE: dump_json(speculative_config(src, options))}


def command(src: Source, spec: dict[str, Any]) -> str:
    """`vllm serve TARGET --speculative-config '<json>'`, shell-quoted."""
    return " ".join(["vllm", "serve", shlex.quote(src.target), "--speculative-config",
                     shlex.quote(json.dumps(spec, separators=(",", ":")))])


def launch(src: Source, files: dict[str, str]) -> str:
    spec = json.loads(files[FILE])
    return fenced(command(src, spec), "sh") + "\n" + request_parameters(src.cfg) + "\n"
