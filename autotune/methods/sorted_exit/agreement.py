"""S2D early exits' agreement: the drafter's own exit rule (`first_confident_exit`) at
every position, in one pass through the stack. Exactly the first draft token of a round
that starts there: an exit at layer e sees the same first e layers as the full model."""

from __future__ import annotations

import torch

from autotune.schema.config import DecodeConfig
from autotune.decoding.drafters.base import stack_model
from autotune.schema.methods import get_method
from autotune.measure.agreement import Scorer, no_grad, shared_vocab
from autotune.methods.sorted_exit.drafter import first_confident_exit, top1_probability
from autotune.models.loading import LoadedModel
from autotune.models.trained import exit_adapters


def scorer(target: LoadedModel, config: DecodeConfig, draft: LoadedModel | None) -> Scorer:
    """S2D's exit rule at every position: the top-1 of each position's exit (read
    through the trained adapters of an `exits` drafter, as the drafter reads them)."""
    stack = stack_model(get_method(config.method), target, draft)    # what exits index
    vocab = shared_vocab(target, draft)
    exits, thresholds = config.exits, config.exit_thresholds()
    adapters = exit_adapters(draft)

    def sorted_exit(ids: list[int]) -> list[int]:
        forward = stack.forward
        x = torch.tensor([ids], dtype=torch.long, device=stack.device)
        state = forward.begin(x, forward.new_cache(1, len(ids)))
        choice = first_confident_exit(forward, state, exits, thresholds,
                                      top1_probability(vocab), adapters)
        probs = torch.softmax(choice.logits[:, :vocab].float(), dim=-1)
        return probs.max(dim=-1).indices.tolist()

    return no_grad(sorted_exit)
