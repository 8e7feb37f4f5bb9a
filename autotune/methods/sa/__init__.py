"""`sa`: TensorRT-LLM's suffix automaton drafter (`decoding_type: "SA"`). A suffix
automaton over this request's prompt and generated tokens finds the longest suffix of
the sequence that occurred before (or, with `sa_max_matching_ngram_size` n, at most n
tokens of it); the draft is what followed its first occurrence; no draft model, no layer
access. Every step verifies the full draft length: slots the lookup leaves unwritten
hold what earlier lookups left in the engine's draft buffer (`SAState`, kept across
requests)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from autotune.schema.method_spec import MethodSpec
from autotune.methods.sa import checks

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter
    from autotune.replay.draft_cost import DraftCost


def _summary(c: Mapping[str, Any]) -> str:
    n = c.get("sa_max_matching_ngram_size")
    return "longest match" if n in (None, -1) else f"match<={n}"


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.sa.drafter import SADrafter
    return SADrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.sa.agreement import scorer
    return scorer


def _replay() -> Callable[..., Any]:
    from autotune.methods.sa.replay import source
    return source


def _draft_cost() -> type[DraftCost]:
    from autotune.methods.sa.replay import SACost
    return SACost


def _shared_state() -> Callable[..., Any]:
    from autotune.methods.sa.drafter import SAState
    return SAState


SPEC = MethodSpec(
    "sa", label="suffix automaton", color="#882255", model_free=True,
    confident_drafts=True,
    about="TensorRT-LLM's suffix automaton: drafts what followed the first occurrence of "
          "the longest repeated suffix",
    drafter=_drafter, scorer=_scorer, replay=_replay, draft_cost=_draft_cost,
    shared_state=_shared_state, check_every_config=checks.check_every_config,
    summary=_summary)
