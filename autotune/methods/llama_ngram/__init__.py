"""`llama_ngram`: llama.cpp's model-free drafters as `llama-server --spec-type` runs them
(ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache, or a chain of them).
No draft model, no layer access. autotune's decoder drafts ngram-simple exactly as the
server does (the drafter's docstring says where it was read); the other types are
measured in the server itself (`--target llama_server`, `measure --in llama_server`)."""

from __future__ import annotations

from typing import Any, Mapping

from autotune.schema.method_spec import MethodSpec, Preset
from autotune.methods.llama_ngram import knobs


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


SPEC = MethodSpec(
    "llama_ngram", label="llama.cpp n-gram", color="#999933", order=48, model_free=True,
    confident_drafts=True,
    about="llama-server's model-free drafters (ngram-simple, -map-k, -map-k4v, -mod, "
          "-cache); ngram-simple decoded here, the others measured in the server",
    drafter=f"{__name__}.drafter:LlamaNgramDrafter", scorer=f"{__name__}.agreement:scorer",
    replay=f"{__name__}.replay:source", draft_cost=f"{__name__}.replay:LlamaNgramCost",
    knobs=knobs.KNOBS, check=knobs.check, summary=_summary, presets=_presets)
