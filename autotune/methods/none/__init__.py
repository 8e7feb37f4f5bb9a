"""`none`: the AR baseline. It drafts nothing, so every round is one plain target step
through the same loop as every speculative method; every speedup is measured against it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from autotune.schema.method_spec import MethodSpec

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.none.drafter import NoDraft
    return NoDraft


def _replay() -> Callable[..., Any]:
    from autotune.methods.none.replay import source
    return source


SPEC = MethodSpec(
    "none", label="AR baseline", color="#7f7f7f", drafts=False,
    about="the AR baseline: plain decoding, no draft",
    drafter=_drafter, replay=_replay)
