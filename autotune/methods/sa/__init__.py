"""`sa`: TensorRT-LLM's suffix automaton drafter (`decoding_type: "SA"`). A suffix
automaton over this request's prompt and generated tokens finds the longest suffix of
the sequence that occurred before (or, with `sa_max_matching_ngram_size` n, at most n
tokens of it); the draft is what followed its first occurrence; no draft model, no layer
access. Every step verifies the full draft length: slots the lookup leaves unwritten
hold what earlier lookups left in the engine's draft buffer (`SAState`, kept across
requests)."""

from __future__ import annotations

from typing import Any, Mapping

from autotune.schema.method_spec import MethodSpec
from autotune.methods.sa import knobs


def _summary(c: Mapping[str, Any]) -> str:
    n = c.get("sa_max_matching_ngram_size")
    return "longest match" if n in (None, -1) else f"match<={n}"


SPEC = MethodSpec(
    "sa", label="suffix automaton", color="#882255", order=47, model_free=True,
    confident_drafts=True,
    about="TensorRT-LLM's suffix automaton: drafts what followed the first occurrence of "
          "the longest repeated suffix",
    drafter=f"{__name__}.drafter:SADrafter", scorer=f"{__name__}.agreement:scorer",
    replay=f"{__name__}.replay:source",
    draft_cost=f"{__name__}.replay:SACost", shared_state=f"{__name__}.drafter:SAState",
    knobs=knobs.KNOBS, check_every_config=knobs.check_every_config, summary=_summary)
