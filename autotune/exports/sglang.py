"""SGLang: `python -m sglang.launch_server` speculative arguments, as JSON and as a shell line.

Argument names from SGLang's ServerArgs (python/sglang/srt/server_args.py, 2026 main,
and docs.sglang.io "Speculative Decoding"): `speculative_algorithm` (STANDALONE for a
separate draft model, NGRAM for n-grams; EAGLE/EAGLE3 need EAGLE draft heads),
`speculative_draft_model_path`, `speculative_num_steps`, `speculative_eagle_topk`,
`speculative_num_draft_tokens`, and the NGRAM group `speculative_ngram_min_bfs_breadth`,
`speculative_ngram_max_bfs_breadth`, `speculative_ngram_max_trie_depth` (was
`speculative_ngram_branch_length`, renamed in PR #21181). The JSON keys are ServerArgs
field names; the shell line uses the same names as `--kebab-case` flags.

Draft trees. STANDALONE's worker is a subclass of EAGLEWorker
(python/sglang/srt/speculative/standalone_worker.py: `class StandaloneWorker(EAGLEWorker)`,
`self.topk = server_args.speculative_eagle_topk`), so a separate draft model drafts the
same EAGLE-2 dynamic tree as EAGLE; the docs' STANDALONE example uses
`--speculative-num-steps 4 --speculative-eagle-topk 2 --speculative-num-draft-tokens 7`.
Each step expands the `topk` best nodes by `topk` children; the pool of
topk + (num_steps - 1)·topk² drafted nodes is then cut to its `num_draft_tokens - 1` best
by path score (`organize_draft_results` in python/sglang/srt/speculative/eagle_utils.py:
`torch.topk(score_list, num_draft_token - 1)`); the verify pass carries those nodes plus
the root, the last verified token. That is our tree exactly: tree_width -> eagle_topk,
tree_depth -> num_steps, DraftShape.tree_nodes (the root excluded) + 1 -> num_draft_tokens,
and the chain export (topk 1, num_draft_tokens = num_steps + 1, which SGLang enforces for
topk 1) is the same rule for a one-path tree. The experimental overlap scheduler
(SGLANG_ENABLE_SPEC_V2) takes topk 1 only (same docs), so a tree runs without it. SGLang
has no static tree (no counterpart of EAGLE's or
TensorRT-LLM's choices): tree_choices is a loss, approximated under `lossy` by the dynamic
tree of the same depth, width and size.

SGLang's n-gram drafter is a trie over the tokens seen so far; since PR #21225 (March
2026) it has no matching window (the older `--speculative-ngram-min/max-match-window-size`
are gone): every suffix up to `max_trie_depth` tokens is matched. So our ngram_min and
ngram_max have no exact SGLang counterpart and are reported as losses.
"""

from __future__ import annotations

import shlex
from typing import Any

from autotune.decoding.shape import DYNAMIC, STATIC, DraftShape
from autotune.exports._common import (
    STATIC_TREE_NOTE,
    Loss,
    Source,
    dump_json,
    engine_methods,
    fixed_k_policy_loss,
    method_loss,
)

NAME = "sglang"
ENGINE = "SGLang"
# SGLang's speculative algorithms autotune measures: STANDALONE (a separate draft model),
# NGRAM.
METHODS = engine_methods("draft_model", "ngram")


def check(src: Source) -> list[Loss]:
    cfg = src.cfg
    shape = src.shape
    losses = [
        method_loss(src, METHODS,
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
    if cfg.method == "draft_model" and shape.kind == STATIC and not shape.one_path:
        steps, topk, nodes = _static_tree_shape(shape)
        label, knobs = shape.loss_label()
        losses.append(Loss(label, knobs,
                           "SGLang drafts only dynamic (EAGLE-2) trees, no static one; "
                           f"exported as the dynamic tree of the same depth and width: "
                           f"speculative_num_steps={steps}, speculative_eagle_topk={topk}, "
                           f"speculative_num_draft_tokens={nodes + 1} (the best {nodes} "
                           "drafted nodes plus the root)",
                           note=STATIC_TREE_NOTE))
    return [loss for loss in losses if loss is not None]


def _static_tree_shape(shape: DraftShape) -> tuple[int, int, int]:
    """(num_steps, eagle_topk, tree nodes) of the dynamic tree nearest a static one: as
    deep, as wide as its widest node or its highest child rank, and as many nodes as it
    has, capped at what such a dynamic tree drafts."""
    children: dict[tuple[int, ...], int] = {}
    for path in shape.choices:
        children[path[:-1]] = children.get(path[:-1], 0) + 1
    steps = shape.levels
    topk = max(max(children.values()), max(rank for path in shape.choices for rank in path) + 1)
    pool = DraftShape(DYNAMIC, width=topk, depth=steps).pool_size
    return steps, topk, min(shape.tree_nodes, pool)


def _trie_depth(src: Source) -> int:
    # A trie path holds the matched suffix and its continuation, so it must be at least
    # ngram_max + k deep for a match of ngram_max tokens to yield k draft tokens.
    return src.cfg.ngram_max + src.cfg.k


def server_args(src: Source) -> dict[str, Any]:
    """ServerArgs field -> value for this config (model_path first)."""
    cfg = src.cfg
    args: dict[str, Any] = {"model_path": src.target}
    if cfg.method == "draft_model":
        steps, topk, nodes = _tree_shape(src.shape)
        args.update({
            "speculative_algorithm": "STANDALONE",
            "speculative_draft_model_path": src.draft,
            "speculative_num_steps": steps,
            "speculative_eagle_topk": topk,
            # The verify pass: the root (last verified token) plus the kept tree nodes.
            "speculative_num_draft_tokens": nodes + 1,
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


def _tree_shape(shape: DraftShape) -> tuple[int, int, int]:
    """(speculative_num_steps, speculative_eagle_topk, tree nodes excluding the root)."""
    if not shape.is_tree or shape.one_path:
        # A chain draft: one candidate per step (topk 1). SGLang then requires
        # num_draft_tokens = num_steps + 1 (the verified root plus the drafts) and
        # overrides any other value with a warning, so we write it consistently.
        n = shape.chain_length
        return n, 1, n
    if shape.kind == STATIC:
        return _static_tree_shape(shape)     # the lossy approximation (see check)
    return shape.depth, shape.width, shape.tree_nodes


def command_line(args: dict[str, Any]) -> str:
    """`python -m sglang.launch_server --model-path ... --speculative-...`, shell-quoted."""
    words = ["python", "-m", "sglang.launch_server"]
    for key, value in args.items():
        words += ["--" + key.replace("_", "-"), str(value)]
    return " ".join(shlex.quote(word) for word in words)


def render(src: Source, options: dict[str, Any]) -> dict[str, str]:
    args = server_args(src)
    return {"sglang.json": dump_json(args), "sglang.sh": command_line(args) + "\n"}
