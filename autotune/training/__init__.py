"""`train-draft`'s work: the training data (the target's greedy continuations and
features) and the distillation loop of a drafter head under a time budget."""
