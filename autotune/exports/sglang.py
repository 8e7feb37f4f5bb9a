"""SGLang: `python -m sglang.launch_server` speculative arguments, as JSON and as a shell line.

Argument names from SGLang's ServerArgs (python/sglang/srt/server_args.py, 2026 main,
and docs.sglang.io "Speculative Decoding"): `speculative_algorithm` (STANDALONE for a
separate draft model, NGRAM for n-grams; EAGLE is left for draft trees),
`speculative_draft_model_path`, `speculative_num_steps`, `speculative_eagle_topk`,
`speculative_num_draft_tokens`, and the NGRAM group `speculative_ngram_min_bfs_breadth`,
`speculative_ngram_max_bfs_breadth`, `speculative_ngram_max_trie_depth` (was
`speculative_ngram_branch_length`, renamed in PR #21181). The JSON keys are ServerArgs
field names; the shell line uses the same names as `--kebab-case` flags.

SGLang's n-gram drafter is a trie over the tokens seen so far; since PR #21225 (March
2026) it has no matching window (the older `--speculative-ngram-min/max-match-window-size`
are gone): every suffix up to `max_trie_depth` tokens is matched. So our ngram_min and
ngram_max have no exact SGLang counterpart and are reported as losses.
"""

from __future__ import annotations

import shlex
from typing import Any

from autotune.exports._common import Loss, Source, dump_json, fixed_k_policy_loss, method_loss

NAME = "sglang"
ENGINE = "SGLang"


def check(src: Source) -> list[Loss]:
    cfg = src.cfg
    losses = [
        method_loss(src, ("draft_model", "ngram"),
                    "SGLang speculates with a draft model (STANDALONE/EAGLE) or n-grams, not "
                    "with the target's own layers"),
        fixed_k_policy_loss(src, ENGINE),
    ]
    if cfg.method == "ngram":
        if cfg.ngram_min > 1:
            losses.append(Loss(f"ngram_min={cfg.ngram_min}", (),
                               "SGLang's n-gram trie matches suffixes down to one token; "
                               "exported without a minimum"))
        losses.append(Loss(f"ngram_max={cfg.ngram_max}", (),
                           "SGLang has no n-gram matching window; exported as "
                           f"speculative_ngram_max_trie_depth={_trie_depth(src)} "
                           "(ngram_max + k, so a longest match still leaves k draft tokens), "
                           "which also lets longer suffixes match"))
    return [loss for loss in losses if loss is not None]


def _trie_depth(src: Source) -> int:
    # A trie path holds the matched suffix and its continuation, so it must be at least
    # ngram_max + k deep for a match of ngram_max tokens to yield k draft tokens.
    return src.cfg.ngram_max + src.cfg.k


def server_args(src: Source) -> dict[str, Any]:
    """ServerArgs field -> value for this config (model_path first)."""
    cfg = src.cfg
    args: dict[str, Any] = {"model_path": src.target}
    if cfg.method == "draft_model":
        # A chain draft: one candidate per step (topk 1). SGLang then requires
        # num_draft_tokens = num_steps + 1 (the verified root plus k drafts) and
        # overrides any other value with a warning, so we write it consistently.
        args.update({
            "speculative_algorithm": "STANDALONE",
            "speculative_draft_model_path": src.draft,
            "speculative_num_steps": cfg.k,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": cfg.k + 1,
        })
    else:
        # NGRAM sets eagle_topk to max_bfs_breadth itself; breadth 1 gives a chain like our
        # drafter, and num_draft_tokens counts the root plus up to k continuation tokens.
        args.update({
            "speculative_algorithm": "NGRAM",
            "speculative_num_draft_tokens": cfg.k + 1,
            "speculative_ngram_min_bfs_breadth": 1,
            "speculative_ngram_max_bfs_breadth": 1,
            "speculative_ngram_max_trie_depth": _trie_depth(src),
        })
    return args


def command_line(args: dict[str, Any]) -> str:
    """`python -m sglang.launch_server --model-path ... --speculative-...`, shell-quoted."""
    words = ["python", "-m", "sglang.launch_server"]
    for key, value in args.items():
        words += ["--" + key.replace("_", "-"), str(value)]
    return " ".join(shlex.quote(word) for word in words)


def render(src: Source, options: dict[str, Any]) -> dict[str, str]:
    args = server_args(src)
    return {"sglang.json": dump_json(args), "sglang.sh": command_line(args) + "\n"}
