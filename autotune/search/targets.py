"""`autotune search --target ENGINE`: tune for the engine the config will be deployed on.

A target picks two things. The space (`engine_<name>.yaml`, unless `--space` names
another): only the drafters and knobs that engine expresses. And the rules every
candidate is measured under (DecodeConfig's `engine` knob, autotune/schema/engines.py):
that engine's n-gram match rule, draft-length schedule, confidence rule and drafting under
sampling. Any candidate the engine's exporter could not write exactly is refused before it
is measured, whatever the space, so the winner exports to that engine without `--lossy`.
`autotune` is every knob of our own decoder, under our own rules.

`all` (the default) answers for every engine at once: autotune's own search (the
ceiling: what an engine could gain by adopting our rules), then, per engine whose
drafting rules autotune reproduces (`answered_engines`), a replay screen of that
engine's space under its rules whose best configs and documented default race in the
same race against the same AR baseline, each engine judged among its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from autotune.schema.config import DecodeConfig
from autotune.schema.engines import AUTOTUNE, ENGINES, engine_rules

DEFAULT_TARGET = AUTOTUNE.name
ALL_TARGETS = "all"


@dataclass(frozen=True)
class EngineTarget:
    """What `--target` knows of one engine (autotune/schema/engines.py), declared once
    in `TARGET_RECORDS`: `space`, the shipped space a `--target <engine>` search tunes
    ("": `engine_<name>`; read as `space_name`); `screen_space`, the one `--target all`
    screens it over ("": the same; `screen_space_name`); `answered`, whether `--target
    all` answers for it; `needs_backend`, whether it answers only where the engine's
    backend runs here."""

    engine: str
    space: str = ""
    screen_space: str = ""
    answered: bool = True
    needs_backend: bool = False

    @property
    def space_name(self) -> str:
        """The shipped space a `--target <engine>` search tunes."""
        return self.space or f"engine_{self.engine}"

    @property
    def screen_space_name(self) -> str:
        """The shipped space `--target all` screens the engine over."""
        return self.screen_space or self.space_name


# One record per engine, in ENGINES' order (the order the summary lists answers in).
TARGET_RECORDS: dict[str, EngineTarget] = {record.engine: record for record in (
    # Every knob of our own decoder: the ceiling `--target all` answers beside the engines.
    EngineTarget(DEFAULT_TARGET, space="joint", answered=False),
    EngineTarget("vllm"),
    EngineTarget("sglang"),
    EngineTarget("trtllm"),
    EngineTarget("hf"),
    # Screened over the drafter our decoder runs exactly as the server does (its other
    # drafters run in the server only); answered only where its binary is installed
    # (its answer's launch notes start it).
    EngineTarget("llama_server", screen_space="_all_llama_server", needs_backend=True),
)}
TARGETS: tuple[str, ...] = (ALL_TARGETS, *ENGINES)
# The engines `--target all` answers for, in the order the summary lists them.
ANSWERED: tuple[str, ...] = tuple(name for name, record in TARGET_RECORDS.items()
                                  if record.answered)


def answered_engines(model: str, draft: str | None) -> tuple[str, ...]:
    """The engines `--target all` answers for: every engine of `ANSWERED`, those that
    need their backend (llama-server) only where it runs here."""
    from autotune.backends import unavailable   # probes the binary: only when asked

    return tuple(engine for engine in ANSWERED
                 if not TARGET_RECORDS[engine].needs_backend
                 or unavailable(engine, model, draft) is None)


def engine_space(engine: str) -> str:
    """The shipped space an engine is screened over under `--target all`: its own
    (`engine_<name>`), or for llama-server the drafter our decoder runs exactly as the
    server does (`_all_llama_server`: its other drafters run in the server only)."""
    record = TARGET_RECORDS.get(engine)
    return record.screen_space_name if record is not None else f"engine_{engine}"


def default_space(target: str) -> str:
    """The shipped space of `target`: `joint` for autotune, else `engine_<target>`."""
    engine_rules(target)                         # one-line error for an unknown engine
    record = TARGET_RECORDS.get(target)
    return record.space_name if record is not None else f"engine_{target}"


def refusal(target: str, has_draft: bool, measured: tuple[str, ...] | None = None
            ) -> Callable[[DecodeConfig], str | None] | None:
    """For a search with `--target`: config -> why the engine cannot run it exactly (its
    exporter's first loss), or None. None for the autotune target (nothing to refuse).
    `measured`: where the answer is raced in the engine itself, the methods its backend
    runs there (`backends.measured_methods`); any other is refused too, since its
    answer could never come from that race."""
    if target == DEFAULT_TARGET:
        return None
    from autotune.exports import engine_losses  # the exporters read the registry only
    label = engine_rules(target).label

    def refuse(config: DecodeConfig) -> str | None:
        if measured is not None and config.method != "none" and config.method not in measured:
            return (f"its answer is raced in {label} itself here, which autotune runs with "
                    f"{', '.join(measured)} only")
        losses = engine_losses(config, target, has_draft)
        return f"{label} cannot run it exactly: {losses[0]}" if losses else None

    return refuse

