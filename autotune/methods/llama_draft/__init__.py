"""`llama_draft`: llama-server's `draft-simple` type, a draft model as a GGUF file (`-md`).

The draft is the draft stack's first `exits[0]` layers: the target's (a truncated-layer
draft autotune writes as a GGUF, `autotune.models.gguf_draft`) or, with `--draft
FILE.gguf`, that draft's (all of it when `exits` is empty). llama-server drafts greedily
from it (top-10 sampler, argmax) up to `k` tokens (--spec-draft-n-max), stops at a token
whose probability is below `llama_draft_p_min`, and drops a draft shorter than
`llama_draft_n_min` (common/speculative.cpp L218-478 in PROVENANCE["llama_server"]). It runs
in the server only: trials are measured there (`--target llama_server`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from autotune.schema.method_spec import DRAFT_OR_TARGET_STACK, MethodSpec, Preset
from autotune.methods.llama_draft import checks

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter


def _summary(c: Mapping[str, Any]) -> str:
    exits = c.get("exits") or []
    layers = f"first {exits[0]} layers" if exits else "the whole --draft"
    return (f"{layers} n_min={c.get('llama_draft_n_min')} "
            f"p_min={float(c.get('llama_draft_p_min') or 0.0):.2f}")


def _presets(n_layers: int) -> list[Preset]:
    # llama.cpp's draft-simple defaults, common/common.h L328-333 (n_max 3, n_min 0,
    # p_min 0) in PROVENANCE["llama_server"], on a draft of the target's first quarter
    # (llama.cpp ships no default draft: the depth is autotune's starting point).
    depth = max(1, n_layers // 4)
    return [Preset("llama_server_draft_simple", "llama-server --spec-type draft-simple "
                   f"with its defaults (n_max 3, n_min 0, p_min 0), a {depth}-layer draft",
                   {"method": "llama_draft", "exits": [depth], "k": 3,
                    "llama_draft_n_min": 0, "llama_draft_p_min": 0.0,
                    "exit_policy": "fixed"}, rank=5, engine="llama_server", targeted=True)]


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.llama_draft.drafter import LlamaDraftDrafter
    return LlamaDraftDrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.llama_draft.agreement import scorer
    return scorer


SPEC = MethodSpec(
    "llama_draft", label="llama.cpp draft", color="#661100", uses_draft=True,
    layer_stack=DRAFT_OR_TARGET_STACK,
    about="llama-server's draft-simple: a GGUF draft (the target's first layers, or "
          "--draft FILE.gguf), measured in the server",
    drafter=_drafter, scorer=_scorer, check=checks.check, summary=_summary,
    presets=_presets)
