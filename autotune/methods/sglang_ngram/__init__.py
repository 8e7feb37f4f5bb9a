"""`sglang_ngram`: SGLang's NGRAM speculative algorithm as PROVENANCE["sglang"] runs it. One trie
of token suffixes is shared by every request the server serves; each step matches the
request's suffixes in it and drafts a tree (by recency, BFS, or by frequency, PROB) of
`speculative_num_draft_tokens - 1` nodes, verified whole. No draft model, no layer
access. The trie is the method's state across requests (`NgramState`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from autotune.schema.method_spec import MethodSpec, Preset
from autotune.methods.sglang_ngram import checks

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter
    from autotune.replay.draft_cost import DraftCost


def _summary(c: Mapping[str, Any]) -> str:
    return (f"{c.get('sglang_ngram_match_type')} depth={c.get('sglang_ngram_max_trie_depth')}"
            f" breadth={c.get('sglang_ngram_min_bfs_breadth')}.."
            f"{c.get('sglang_ngram_max_bfs_breadth')}")


def _presets(n_layers: int) -> list[Preset]:
    # PROVENANCE["sglang"]: arg_groups/fields/spec.py L252-275 (breadth 1..10, BFS, trie depth
    # 18, capacity 10M) and arg_groups/speculative_hook.py `_handle_ngram` (num draft
    # tokens 12 when unset).
    return [Preset("sglang_ngram_default", "SGLang NGRAM defaults: num_draft_tokens 12, "
                   "BFS breadth 1..10, max_trie_depth 18, capacity 10M",
                   {"method": "sglang_ngram", "k": 11, "sglang_ngram_max_trie_depth": 18,
                    "sglang_ngram_min_bfs_breadth": 1, "sglang_ngram_max_bfs_breadth": 10,
                    "sglang_ngram_match_type": "BFS", "sglang_ngram_capacity": 10_000_000,
                    "exit_policy": "fixed"}, rank=3, engine="sglang", targeted=True)]


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.sglang_ngram.drafter import SglangNgramDrafter
    return SglangNgramDrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.sglang_ngram.agreement import scorer
    return scorer


def _replay() -> Callable[..., Any]:
    from autotune.methods.sglang_ngram.replay import source
    return source


def _draft_cost() -> type[DraftCost]:
    from autotune.methods.sglang_ngram.replay import NgramCost
    return NgramCost


def _shared_state() -> Callable[..., Any]:
    from autotune.methods.sglang_ngram.drafter import NgramState
    return NgramState


SPEC = MethodSpec(
    "sglang_ngram", label="SGLang n-gram trie", color="#44AA99", model_free=True,
    confident_drafts=True, own_trees=True,
    about="SGLang's NGRAM: a trie of suffixes shared by all requests drafts a tree "
          "(BFS by recency or PROB by frequency)",
    drafter=_drafter, scorer=_scorer, replay=_replay, draft_cost=_draft_cost,
    shared_state=_shared_state, check=checks.check, summary=_summary, presets=_presets)
