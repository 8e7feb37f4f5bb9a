"""`sglang_ngram`'s rules on a config: a breadth range, and SGLang's own tree.

Its keys are `DecodeConfig` fields (`own_knob`, schema/config.py). Torch-free: the
method's `SPEC` names these checks.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError


def check(config: Any, n_layers: int | None) -> None:
    """A breadth range, and SGLang's own tree: no exit rule, no tree knobs."""
    if config.sglang_ngram_min_bfs_breadth > config.sglang_ngram_max_bfs_breadth:
        raise AutotuneError(
            f"sglang_ngram_min_bfs_breadth={config.sglang_ngram_min_bfs_breadth} exceeds "
            f"sglang_ngram_max_bfs_breadth={config.sglang_ngram_max_bfs_breadth}")
    if config.exit_policy != "fixed" or config.is_tree:
        raise AutotuneError("method=sglang_ngram drafts SGLang's own tree of k nodes "
                            "every step: it takes exit_policy=fixed and no tree knobs")
