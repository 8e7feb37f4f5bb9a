"""`ngram`: prompt lookup (Saxena, 2023; vLLM's, SGLang's, TensorRT-LLM's and HF's n-gram
drafting; llama-server's n-gram types are `llama_ngram`). The draft is the tokens that
followed an earlier occurrence of the sequence's last n tokens; no draft model, no layer
access."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from autotune.schema.method_spec import MethodSpec, Preset
from autotune.methods.ngram import checks

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter
    from autotune.replay.draft_cost import DraftCost


def _summary(c: Mapping[str, Any]) -> str:
    return f"n={c.get('ngram_min')}..{c.get('ngram_max')}"


def _presets(n_layers: int) -> list[Preset]:
    return [Preset("vllm_ngram", "vLLM ngram: num_speculative_tokens=5, prompt_lookup_min=5, "
                   "prompt_lookup_max=5",
                   {"method": "ngram", "k": 5, "ngram_min": 5, "ngram_max": 5,
                    "exit_policy": "fixed"}, rank=2, engine="vllm"),
            # PROVENANCE["hf"]: generation/utils.py: `max_matching_ngram_size or 2`;
            # 10 tokens is its prompt-lookup documentation's example.
            Preset("hf_prompt_lookup", "transformers prompt lookup: prompt_lookup_num_tokens=10, "
                   "max_matching_ngram_size=2 (its default)",
                   {"method": "ngram", "k": 10, "ngram_min": 1, "ngram_max": 2,
                    "exit_policy": "fixed"}, rank=7, engine="hf", targeted=True),
            # SGLang (arg_groups speculative_hook.py and fields spec.py, each at its
            # commit in PROVENANCE["sglang"]): NGRAM's num_draft_tokens defaults to 12
            # (11 drafts after the root) and max_trie_depth to 18, which our export maps
            # as ngram_max + k.
            Preset("sglang_ngram", "SGLang NGRAM defaults: speculative_num_draft_tokens=12, "
                   "speculative_ngram_max_trie_depth=18",
                   {"method": "ngram", "k": 11, "ngram_min": 1, "ngram_max": 7,
                    "exit_policy": "fixed"}, rank=8, engine="sglang", targeted=True)]


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.ngram.drafter import NgramDrafter
    return NgramDrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.ngram.agreement import scorer
    return scorer


def _replay() -> Callable[..., Any]:
    from autotune.methods.ngram.replay import source
    return source


def _draft_cost() -> type[DraftCost]:
    from autotune.methods.ngram.replay import NgramCost
    return NgramCost


def _shared_state() -> Callable[..., Any]:
    from autotune.methods.ngram.drafter import ngram_state
    return ngram_state


SPEC = MethodSpec(
    "ngram", label="ngram", color="#0072B2", confident_drafts=True, model_free=True,
    about="prompt lookup: drafts what followed an earlier occurrence of the last n tokens",
    drafter=_drafter, scorer=_scorer, replay=_replay, draft_cost=_draft_cost,
    shared_state=_shared_state, check=checks.check,
    check_every_config=checks.check_every_config, summary=_summary, presets=_presets)
