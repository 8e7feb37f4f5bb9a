"""Draft-exit policies: how many tokens a drafter proposes in a round.

Each policy answers two questions for the decoder loop: the most tokens this round
(`limit`), and after each draft token with top-1 probability c, whether to go on
(`keep_going`). After verification it is told how many drafts were accepted (`update`).
A new policy object is made for every run, so no state leaks between runs or trials.
"""

from __future__ import annotations

from autotune.decoding.config import DecodeConfig


class ExitPolicy:
    """`fixed`: always k tokens."""

    def __init__(self, config: DecodeConfig) -> None:
        self.k = config.k

    def limit(self) -> int:
        return self.k

    def keep_going(self, confidence: float) -> bool:
        return True

    def update(self, drafted: int, accepted: int) -> None:
        pass


class ConfidencePolicy(ExitPolicy):
    """`confidence`: stop after a draft token whose top-1 probability is below gamma.

    The low-confidence token itself is kept (as HF's assistant_confidence_threshold
    does): it is already paid for, and verifying one more token costs almost nothing.
    """

    def __init__(self, config: DecodeConfig) -> None:
        super().__init__(config)
        self.gamma = config.gamma

    def keep_going(self, confidence: float) -> bool:
        return confidence >= self.gamma


class AdaptivePolicy(ConfidencePolicy):
    """`adaptive`: Draft & Verify's rule for the threshold γ (Zhang et al. 2024, §3.3).

    After a round with acceptance rate AR_e:  AR <- β1·AR + (1-β1)·AR_e (β1 = 0 in the
    first round); γ~ = γ + ε if AR <= α else γ - ε;  γ <- β2·γ + (1-β2)·γ~.
    """

    def __init__(self, config: DecodeConfig) -> None:
        super().__init__(config)
        self.alpha = config.target_acceptance
        self.epsilon = config.epsilon
        self.beta1 = config.beta1
        self.beta2 = config.beta2
        self.acceptance: float | None = None

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        round_rate = accepted / drafted
        beta1 = 0.0 if self.acceptance is None else self.beta1
        self.acceptance = beta1 * (self.acceptance or 0.0) + (1.0 - beta1) * round_rate
        step = self.epsilon if self.acceptance <= self.alpha else -self.epsilon
        self.gamma = self.beta2 * self.gamma + (1.0 - self.beta2) * (self.gamma + step)


class HeuristicPolicy(ExitPolicy):
    """`heuristic`: HF's num_assistant_tokens schedule, starting at k: K+2 after a round
    in which every draft was accepted, else max(1, K-1)."""

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.k = self.k + 2 if accepted == drafted else max(1, self.k - 1)


POLICIES: dict[str, type[ExitPolicy]] = {
    "fixed": ExitPolicy,
    "confidence": ConfidencePolicy,
    "adaptive": AdaptivePolicy,
    "heuristic": HeuristicPolicy,
}


def make_policy(config: DecodeConfig) -> ExitPolicy:
    return POLICIES[config.exit_policy](config)
