"""Draft-exit policies: how many tokens a drafter proposes in a round.

Each policy answers two questions for the decoder loop: the most tokens this round
(`limit`), and after each draft token with top-1 probability c, whether to go on
(`keep_going`). After verification it is told how many drafts were accepted and the
drafts' confidences (`update`). A new policy object is made for every run, so no state
leaks between runs or trials.
"""

from __future__ import annotations

from typing import Sequence

from autotune.schema.config import DecodeConfig
from autotune.schema.engines import engine_rules
from autotune.schema.methods import get_method


class ExitPolicy:
    """`fixed`: always k tokens."""

    def __init__(self, config: DecodeConfig) -> None:
        self.k = config.k

    def limit(self) -> int:
        return self.k

    def keep_going(self, confidence: float) -> bool:
        return True

    def update(self, drafted: int, accepted: int, confidences: Sequence[float] = ()) -> None:
        """After a round: `drafted` tokens proposed, the first `accepted` kept;
        `confidences` holds each drafted token's probability."""


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

    def update(self, drafted: int, accepted: int, confidences: Sequence[float] = ()) -> None:
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

    def update(self, drafted: int, accepted: int, confidences: Sequence[float] = ()) -> None:
        if drafted == 0:
            return
        self.k = self.k + 2 if accepted == drafted else max(1, self.k - 1)


class RocConfidencePolicy(ConfidencePolicy):
    """`confidence` as transformers runs it for an assistant model: γ is only the
    starting threshold. After every round the drafted tokens' probabilities and whether
    each matched (1 per accepted token, then one 0 for the first rejected) are kept, and
    once there are more than 5 with both outcomes present the threshold becomes the
    `sklearn.metrics.roc_curve` threshold minimising fpr + 3·fnr (PROVENANCE["hf"],
    generation/candidate_generator.py, AssistedCandidateGenerator.update_candidate_strategy).
    A threshold of 0 stops nothing and is never re-tuned there (the rule is skipped for a
    falsy threshold)."""

    def __init__(self, config: DecodeConfig) -> None:
        super().__init__(config)
        self.probs: list[float] = []
        self.matches: list[int] = []

    def keep_going(self, confidence: float) -> bool:
        # transformers' ConfidenceCriteria: stop when p < threshold, only for a threshold > 0.
        return not (self.gamma > 0 and confidence < self.gamma)

    def update(self, drafted: int, accepted: int, confidences: Sequence[float] = ()) -> None:
        if not self.gamma:
            return
        self.probs.extend(float(c) for c in confidences[:drafted])
        self.matches.extend([1] * accepted)
        if len(self.probs) > len(self.matches):
            self.matches.append(0)
        excess = len(self.probs) - len(self.matches)
        if excess > 0:
            del self.probs[-excess:]
        if len(self.probs) > 5 and {0, 1}.issubset(self.matches):
            from sklearn.metrics import roc_curve  # a dependency; slow to import
            fpr, tpr, thresholds = roc_curve(self.matches, self.probs)
            costs = fpr + 3 * (1 - tpr)
            self.gamma = float(thresholds[int(costs.argmin())])


POLICIES: dict[str, type[ExitPolicy]] = {
    "fixed": ExitPolicy,
    "confidence": ConfidencePolicy,
    "adaptive": AdaptivePolicy,
    "heuristic": HeuristicPolicy,
}


def make_policy(config: DecodeConfig) -> ExitPolicy:
    """The policy object for one run of `config`, under its engine's rules (an engine
    that re-tunes a separate draft model's threshold gets `RocConfidencePolicy`)."""
    if (config.exit_policy == "confidence" and engine_rules(config.engine).roc_threshold
            and get_method(config.method).needs_draft):
        return RocConfidencePolicy(config)
    return POLICIES[config.exit_policy](config)
