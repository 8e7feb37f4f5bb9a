"""`autotune search --target ENGINE`: tune for the engine the config will be deployed on.

A target picks two things. The space (`engine_<name>.yaml`, unless `--space` names
another): only the drafters and knobs that engine expresses. And the rules every
candidate is measured under (DecodeConfig's `engine` knob, autotune/decoding/engines.py):
that engine's n-gram match rule, draft-length schedule, confidence rule and drafting under
sampling. Any candidate the engine's exporter could not write exactly is refused before it
is measured, whatever the space, so the winner exports to that engine without `--lossy`.
`autotune` (the default) is every knob of our own decoder, under our own rules.
"""

from __future__ import annotations

from typing import Callable

from autotune.decoding.config import DecodeConfig
from autotune.decoding.engines import ENGINES, engine_rules

DEFAULT_TARGET = "autotune"
TARGETS: tuple[str, ...] = tuple(ENGINES)


def default_space(target: str) -> str:
    """The shipped space of `target`: `joint` for autotune, else `engine_<target>`."""
    engine_rules(target)                         # one-line error for an unknown engine
    return "joint" if target == DEFAULT_TARGET else f"engine_{target}"


def refusal(target: str, has_draft: bool) -> Callable[[DecodeConfig], str | None] | None:
    """For a search with `--target`: config -> why the engine cannot run it exactly (its
    exporter's first loss), or None. None for the autotune target (nothing to refuse)."""
    if target == DEFAULT_TARGET:
        return None
    from autotune.exports import engine_losses  # the exporters read the registry only
    label = engine_rules(target).label

    def refuse(config: DecodeConfig) -> str | None:
        losses = engine_losses(config, target, has_draft)
        return f"{label} cannot run it exactly: {losses[0]}" if losses else None

    return refuse

