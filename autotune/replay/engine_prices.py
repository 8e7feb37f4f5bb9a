"""A replayed round priced at an engine's own costs (`backends/profile.EngineProfile`).

The replay tier's rounds (what is drafted, verified, accepted) are exact for the
model-free drafters the engines' spaces hold; what a round costs is the engine's
business. `EngineCostModel` prices them with the profile measured in the engine: a
speculative round verifying v tokens costs the engine's verify(v) + its drafting + its
speculative overhead, the AR baseline's round the engine's AR step. It answers the
`CostModel` calls `Replayer.replay` makes, so the rest of the prediction (τ, the
speedup and its interval) is computed by the code that computes measured ones.

A config whose drafter the profile did not measure (a draft model in vLLM or HF, an
engine that does not run here) keeps our decoder's prices (`prices_for` says which, and
why, for the replay's notes).
"""

from __future__ import annotations

from autotune.backends.profile import EngineProfile, drafter_of
from autotune.replay.costs import CostModel
from autotune.replay.simulate import ReplayRound
from autotune.schema.config import DecodeConfig

__all__ = ["EngineCostModel", "prices_for", "price_note"]


def prices_for(profiles: dict[str, EngineProfile], config: DecodeConfig
               ) -> EngineProfile | None:
    """The profile that prices `config` (its engine's, when it measured its drafter),
    else None: our decoder's prices."""
    profile = profiles.get(config.engine)
    if profile is None or not profile.prices(drafter_of(config)):
        return None
    return profile


def price_note(profiles: dict[str, EngineProfile], config: DecodeConfig) -> str | None:
    """The replay note saying whose costs priced `config` (None for our own engine's
    configs at our decoder's prices)."""
    profile = prices_for(profiles, config)
    if profile is not None:
        key = profile.key
        return (f"priced at {key.engine}'s own costs, measured in {key.engine} "
                f"{key.version} ({key.mode}, {key.threads} threads) at context "
                f"{key.context}")
    if config.engine == "autotune":
        return None
    if config.engine in profiles:
        return (f"{config.engine}'s profile measured no {config.method} drafting: priced "
                "at autotune's decoder's costs (a prediction, not the engine's prices)")
    return (f"no profile of {config.engine} measured on this machine: priced at "
            "autotune's decoder's costs (a prediction, not the engine's prices)")


class EngineCostModel:
    """A config's rounds priced by its engine's profile; prefill (not in a decode
    speedup) at our decoder's curve."""

    def __init__(self, profile: EngineProfile, config: DecodeConfig, ours: CostModel
                 ) -> None:
        self.profile = profile
        self.config = config
        self.drafter = drafter_of(config)
        self.ours = ours

    def round_seconds(self, r: ReplayRound) -> tuple[float, float, float]:
        """(draft, verify, other) seconds of one round in the engine: its lookup every
        round (a miss verifies one token), its verify step, its overhead (on a miss only
        where the engine pays it there: `EngineProfile.overhead_on_misses`)."""
        p = self.profile
        overhead = p.spec_overhead_ms if r.drafted > 0 or p.overhead_on_misses else 0.0
        return (p.draft_ms.get(self.drafter, 0.0) / 1000,
                p.verify_ms(max(r.verified, 1)) / 1000, overhead / 1000)

    def draft_floor_seconds(self, r: ReplayRound) -> float:
        """A model-free lookup runs none of the target's layers."""
        return 0.0

    def ar_round_seconds(self) -> tuple[float, float]:
        """(verify, other) of one step of the engine without speculation."""
        return self.profile.ar_ms / 1000, 0.0

    def prefill_seconds(self, prompt_tokens: int) -> float:
        return self.ours.prefill_seconds(prompt_tokens)
