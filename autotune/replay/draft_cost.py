"""A method's drafting time per replayed round, from the measured cost parts.

The cost model (costs.py) predicts a round as the drafter's passes + the target's pass
over the verified tokens + the loop's overhead. Only the first differs by method, so
each method says it: `MethodSpec.draft_cost` names a `DraftCost` subclass in its
package's replay.py, and `CostModel.draft_seconds` asks it. The method's class also
says how the cost parts calibrate it against the real decoder (`calibration_config`,
`chain_passes`) and measures the parts only its drafter has (`measure`: a trained
head's passes). The base class drafts at no cost (the AR baseline, and a method
registered without a draft cost).

Two shapes of drafting are shared by several methods and written here once:
`PassDraftCost` (one forward pass per chain draft or tree level: a draft model, a
skipping or early-exit pass over a layer stack) and `HeadDraftCost` (a trained head's
passes, measured with that head as --draft).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from autotune.common.errors import AutotuneError

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig
    from autotune.models.loading import LoadedModel
    from autotune.replay.simulate import ReplayRound


@dataclass
class HeadParts:
    """A trained head's passes, in ms. kind: the method whose head was measured (the
    trained --draft's kind: "eagle" | "medusa"); layer: EAGLE's fc +
    decoder layer over n pairs after the context's entries, [[n, ms], ...] (empty for
    Medusa); logits: the target's LM head over n features [[n, ms], ...]; blocks:
    Medusa's residual blocks of every head over one feature (0 for EAGLE); n_heads:
    Medusa's heads (the LM head's rows in its one pass)."""

    kind: str
    layer: list[list[float]]
    logits: list[list[float]]
    blocks: float = 0.0
    n_heads: int = 0


class CostView(Protocol):
    """What a method's draft cost reads of the cost model (`replay.costs.CostModel`):
    the measured parts, the config whose rounds are priced, and the target pass's cost
    ratio against its one-token pass."""

    parts: Any
    config: "DecodeConfig"

    def ratio(self, tokens: int) -> float:
        """The target's pass over `tokens` tokens ÷ its one-token pass."""
        ...

    def target(self, tokens: int) -> float:
        """ms of the target's pass over `tokens` tokens, as the decoder's loop runs it."""
        ...


class DraftCost:
    """Drafting time of one config's rounds (`round_ms`), from `model.parts`."""

    def __init__(self, model: CostView) -> None:
        self.model = model
        self.parts, self.config = model.parts, model.config

    @property
    def factor(self) -> float:
        """The method's in-loop factor (the decoder's measured drafting time ÷ the bare
        parts' prediction for the same rounds; 1 where none was measured)."""
        return self.parts.draft_factor.get(self.config.method, 1.0)

    def round_ms(self, r: "ReplayRound") -> float:
        """ms of drafting in round r (a round that drafted something)."""
        return 0.0

    def floor_round_ms(self, r: "ReplayRound") -> float:
        """The least round r's drafting can cost from the target's measured passes: 0
        for a drafter that runs none of the target's layers (see `PassDraftCost`)."""
        return 0.0

    # -- calibrating and measuring the parts (parts.measure_parts) -------------------------

    @staticmethod
    def calibration_config(target: "LoadedModel", draft: "LoadedModel | None"
                           ) -> "DecodeConfig | None":
        """A chain config of this method that the real decoder runs to measure its
        in-loop factor with these models; None: no factor (1)."""
        return None

    @staticmethod
    def chain_passes(generation: Any) -> list[list[int]]:
        """Tokens fed per draft pass in each chain round of a real generation, as the
        replay's source counts them (default: one token per draft)."""
        return [[1] * r.drafted for r in generation.rounds]

    @staticmethod
    def loop_parts(rounds: Callable[["DecodeConfig"], list[Any]]) -> dict[str, float]:
        """Parts only this method's drafting has, timed in the real decoder loop:
        `rounds(config)` decodes the cost parts' sample prompts with `config` and returns
        the decoder's rounds. {name: ms}, kept in `CostParts.method_parts` for `round_ms`
        to read; {}: none (the default)."""
        return {}

    @staticmethod
    def measure(target: "LoadedModel", draft: "LoadedModel", clock: Callable[[], float],
                context: int) -> HeadParts | None:
        """The parts only this method's trained `draft` has, measured now (a trained
        head's passes); None: nothing of its own."""
        return None


class PassDraftCost(DraftCost):
    """A drafter that runs one forward pass per chain draft, or per tree level: each
    pass's bare time (`pass_ms`) times the in-loop factor, plus a tree's per-node
    bookkeeping."""

    # Whether the drafter's passes feed the tokens its own cache catches up on (a draft
    # model's first pass of a round); otherwise each chain pass feeds one token.
    feeds_catch_up = False

    def pass_ms(self, tokens: int, exit_layer: int | None) -> float:
        """ms of one bare pass over `tokens` tokens (exiting at `exit_layer`, for an
        early-exit drafter's chain draft; None: its deepest)."""
        raise NotImplementedError

    def run_share(self, exit_layer: int | None) -> float | None:
        """The share of the target's own one-token pass that one of this drafter's passes
        runs (embedding, the sublayers it does not skip, the head): 1 for a pass through
        every layer; None where the drafter's passes are not the target's layers (a
        separate draft model)."""
        return None

    def floor_ms(self, tokens: int, exit_layer: int | None) -> float:
        """The least a pass can cost: the measured cost of the target's layers it runs,
        i.e. `run_share` of the target's one-token pass as the decoder's own loop
        measured it (the target curve), scaled to `tokens`. The bare parts and the
        method's in-loop factor are fitted on other passes (the factor on a calibration
        config's mix of exits or masks) and can price a pass below it: an exit at the
        last layer, which runs the whole target, was priced at a fifth of a target pass
        (issue 51). 0 where `run_share` is None."""
        share = self.run_share(exit_layer)
        if share is None:
            return 0.0
        return share * self.model.target(1) * self.model.ratio(tokens)

    def priced_pass_ms(self, tokens: int, exit_layer: int | None) -> float:
        """One in-loop pass: the parts' price times the in-loop factor, never below
        `floor_ms`."""
        return max(self.pass_ms(tokens, exit_layer) * self.factor,
                   self.floor_ms(tokens, exit_layer))

    def floor_round_ms(self, r: "ReplayRound") -> float:
        """The least round r's drafting can cost: `floor_ms` of each of its passes
        (`CostModel.draft_floor_seconds`, the replay tier's check)."""
        total = 0.0
        for i, tokens in enumerate(r.passes):
            if self.config.is_tree:
                fed, exit_layer = tokens + (r.catch_up if i == 0 and self.feeds_catch_up
                                            else 0), None
            else:
                fed = tokens if self.feeds_catch_up else 1
                exit_layer = r.exits[i] if i < len(r.exits) else None
            total += self.floor_ms(fed, exit_layer)
        return total

    def tree_catch_up_ms(self, tokens: int) -> float:
        """ms of catching a tree round's drafter up on `tokens` tokens outside its level
        passes (S2D's own cache over a stack); 0 where its root pass feeds them."""
        return 0.0

    def round_ms(self, r: "ReplayRound") -> float:
        total = 0.0
        if self.config.is_tree:
            if r.catch_up:
                total += self.tree_catch_up_ms(r.catch_up)
            for i, tokens in enumerate(r.passes):
                fed = tokens + (r.catch_up if i == 0 and self.feeds_catch_up else 0)
                total += self.priced_pass_ms(fed, None)
            return total + self.parts.tree_node * r.drafted
        for i, tokens in enumerate(r.passes):
            exit_layer = r.exits[i] if i < len(r.exits) else None
            fed = tokens if self.feeds_catch_up else 1
            total += self.priced_pass_ms(fed, exit_layer)
        return total


class HeadDraftCost(DraftCost):
    """A trained head's drafting, from its measured passes (`parts.head`)."""

    @property
    def head(self) -> HeadParts:
        """The parts' head passes, if they are this method's (one line otherwise)."""
        head, method = self.parts.head, self.config.method
        if head is None or head.kind != method:
            raise AutotuneError(f"the replay cost parts have no {method} head passes "
                                f"(they were measured without a trained {method} "
                                "--draft): delete them to measure again")
        return head
