"""`llama_ngram`: llama.cpp's model-free drafters as `llama-server --spec-type` runs them
(ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache, or a chain of them).
No draft model, no layer access. autotune's decoder drafts ngram-simple exactly as the
server does (the drafter's docstring says where it was read); the other types are
measured in the server itself (`--target llama_server`, `measure --in llama_server`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from autotune.schema.method_spec import MethodSpec, Preset
from autotune.methods.llama_ngram import checks

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter
    from autotune.replay.draft_cost import DraftCost


def _summary(c: Mapping[str, Any]) -> str:
    types = str(c.get("llama_spec_type", "ngram-simple"))
    parts = [types]
    if any(t in types for t in ("ngram-simple", "ngram-map-k")):
        parts.append(f"n={c.get('llama_ngram_size_n')}")
    if "ngram-mod" in types:
        parts.append(f"match={c.get('llama_ngram_mod_n_match')} "
                     f"min={c.get('llama_ngram_mod_n_min')}")
    return " ".join(parts)


def _presets(n_layers: int) -> list[Preset]:
    # llama.cpp common/common.h L357-368 and arg.cpp L4747-4760 (`--spec-default`), in
    # PROVENANCE["llama_server"].
    return [Preset("llama_server_spec_default", "llama-server --spec-default: ngram-mod, "
                   "n_match 24, n_min 48, n_max 64",
                   {"method": "llama_ngram", "llama_spec_type": "ngram-mod", "k": 64,
                    "llama_ngram_mod_n_match": 24, "llama_ngram_mod_n_min": 48,
                    "exit_policy": "fixed"}, rank=3, engine="llama_server", targeted=True),
            Preset("llama_server_ngram_simple", "llama-server --spec-type ngram-simple with "
                   "its defaults: size_n 12, size_m 48",
                   {"method": "llama_ngram", "llama_spec_type": "ngram-simple", "k": 48,
                    "llama_ngram_size_n": 12, "exit_policy": "fixed"}, rank=4,
                   engine="llama_server", targeted=True)]


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.llama_ngram.drafter import LlamaNgramDrafter
    return LlamaNgramDrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.llama_ngram.agreement import scorer
    return scorer


def _replay() -> Callable[..., Any]:
    from autotune.methods.llama_ngram.replay import source
    return source


def _draft_cost() -> type[DraftCost]:
    from autotune.methods.llama_ngram.replay import LlamaNgramCost
    return LlamaNgramCost


SPEC = MethodSpec(
    "llama_ngram", label="llama.cpp n-gram", color="#999933", model_free=True,
    confident_drafts=True,
    about="llama-server's model-free drafters (ngram-simple, -map-k, -map-k4v, -mod, "
          "-cache); ngram-simple decoded here, the others measured in the server",
    drafter=_drafter, scorer=_scorer, replay=_replay, draft_cost=_draft_cost,
    check=checks.check, summary=_summary, presets=_presets)
