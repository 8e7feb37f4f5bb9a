"""`sglang_ngram`'s config keys: SGLang's `speculative_ngram_*` fields and defaults.

python/sglang/srt/arg_groups/fields/spec.py L252-275 (the release in PROVENANCE["sglang"],
autotune/schema/engines.py); `k` is
speculative_num_draft_tokens - 1, the tree nodes verified with the root. Torch-free:
the method's `SPEC` reads this when the registry lists the methods.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.knobs import MethodKnob

KNOBS = (
    MethodKnob("sglang_ngram_max_trie_depth", "int", 18,
               "suffixes matched and inserted, up to this "
               "many tokens (SGLang speculative_ngram_max_trie_depth)", low=2),
    MethodKnob("sglang_ngram_min_bfs_breadth", "int", 1,
               "BFS children taken per node at the longest "
               "match (SGLang speculative_ngram_min_bfs_breadth)", low=1),
    MethodKnob("sglang_ngram_max_bfs_breadth", "int", 10,
               "BFS children per node at a one-token match; "
               "PROB: children weighed per node (SGLang speculative_ngram_max_bfs_breadth)",
               low=1),
    MethodKnob("sglang_ngram_match_type", "str", "BFS",
               "draft tree by recency (BFS) or by frequency "
               "(PROB) (SGLang speculative_ngram_match_type)", choices=("BFS", "PROB")),
    MethodKnob("sglang_ngram_capacity", "int", 10_000_000,
               "trie nodes kept, least recently used evicted "
               "(SGLang speculative_ngram_capacity)", low=2),
)


def check(config: Any, n_layers: int | None) -> None:
    """A breadth range, and SGLang's own tree: no exit rule, no tree knobs."""
    if config.sglang_ngram_min_bfs_breadth > config.sglang_ngram_max_bfs_breadth:
        raise AutotuneError(
            f"sglang_ngram_min_bfs_breadth={config.sglang_ngram_min_bfs_breadth} exceeds "
            f"sglang_ngram_max_bfs_breadth={config.sglang_ngram_max_bfs_breadth}")
    if config.exit_policy != "fixed" or config.is_tree:
        raise AutotuneError("method=sglang_ngram drafts SGLang's own tree of k nodes "
                            "every step: it takes exit_policy=fixed and no tree knobs")
