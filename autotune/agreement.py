"""Teacher-forced top-1 agreement: a cheap proxy for how well a draft would do.

Decoding a candidate costs a whole generation per prompt. A far cheaper signal (the one
SWIFT uses to pick skipped layers) is to take the target's own greedy continuation of
each prompt once, then run the candidate's draft ONE forward pass over prompt +
continuation and count the positions where the draft's top-1 equals the next token of
the continuation, i.e. the target's greedy top-1 there. High agreement means long
accepted runs under greedy verification; nothing is generated and nothing is timed.

Positions: a sequence is `prompt (P tokens) + continuation (C tokens)`. The first
continuation token comes from the target's prefill in the decoder, never from a draft,
so the draft is scored at positions t = P .. P+C-2, predicting token t+1: C-1 positions
per sequence. Prompt positions are never scored (teacher forcing is over the
continuation only).

How close each method's pass is to its drafter in the decoder:
- `draft_model`, `sorted_exit`, `ngram`: exactly the first draft token of a round that
  starts at t (a separate draft keeps its own keys/values of verified tokens; an exit at
  layer e of the target sees the same first e layers as the full model; the n-gram
  lookup is the drafter's own function).
- `layer_skip`: the draft pass skips its sublayers at every position, so its keys and
  values at the non-skipped layers come from the skipped path, where the decoder's
  drafter would attend to the full model's. Errors compound along the sequence, so this
  proxy ranks skip sets the way SWIFT does but reads lower than real first-token
  acceptance.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from autotune.decoding.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.decoding.drafters import _lookup
from autotune.errors import AutotuneError
from autotune.models.loading import LoadedModel

Sequence = tuple[int, list[int]]      # (prompt length P, prompt + continuation ids)


def _no_clock() -> float:
    # The decoder reads a clock around each phase; nothing here is timed.
    return 0.0


def reference_continuations(target: LoadedModel, prompt_ids: list[list[int]],
                            max_new_tokens: int) -> list[list[int]]:
    """The target's greedy continuation of each prompt (up to `max_new_tokens` ids each,
    stopping after an EOS), decoded by the AR baseline (`DecodeConfig()`)."""
    decoder = SpeculativeDecoder(target, DecodeConfig())
    return [decoder.generate(ids, max_new_tokens, _no_clock).tokens for ids in prompt_ids]


def teacher_forced_agreement(target: LoadedModel, config: DecodeConfig,
                             sequences: list[Sequence],
                             draft: LoadedModel | None = None) -> tuple[int, int]:
    """(agreements, positions) of `config`'s draft against the given continuations.

    `sequences`: (P, ids) pairs, ids = prompt + the target's greedy continuation (as
    from `reference_continuations`). Each sequence is one batch-1 pass of the draft:
    logits [1, len(ids), V], argmax over the shared vocabulary at positions P..len-2,
    compared with ids[P+1:]. `method=none` drafts nothing: 0 agreements.
    """
    # The decoder's own checks: a valid config, a draft where one is needed, layer
    # access for layer methods, a shared vocabulary, layer indices inside the model.
    SpeculativeDecoder(target, config, draft)
    scorer = _scorer(target, config, draft)
    agreements = positions = 0
    for prompt_len, ids in sequences:
        if prompt_len < 1:
            raise AutotuneError("teacher-forced agreement needs a non-empty prompt")
        n = len(ids) - prompt_len - 1          # continuation positions after the first token
        if n <= 0:
            continue
        if scorer is not None:
            predicted = scorer(ids)[prompt_len:len(ids) - 1]
            agreements += sum(int(p == t) for p, t in zip(predicted, ids[prompt_len + 1:]))
        positions += n
    return agreements, positions


Scorer = Callable[[list[int]], list[int]]


def _scorer(target: LoadedModel, config: DecodeConfig,
            draft: LoadedModel | None) -> Scorer | None:
    """The draft's top-1 prediction at every position of a sequence (index t predicts
    token t+1; -1 where the draft proposes nothing), or None for `none`."""
    method = config.method
    vocab = target.forward.vocab_size if draft is None else min(
        target.forward.vocab_size, draft.forward.vocab_size)

    def top1(logits: torch.Tensor) -> list[int]:
        # logits [1, N, V] -> N ids; the decoder's drafts are confined to the shared vocab.
        return logits[0, :, :vocab].argmax(dim=-1).tolist()

    if method == "layer_skip":
        forward = target.forward

        def layer_skip(ids: list[int]) -> list[int]:
            x = torch.tensor([ids], dtype=torch.long, device=target.device)
            cache = forward.new_cache(1, len(ids))
            return top1(forward.forward(x, cache, attn_skip=frozenset(config.attn_skip),
                                        mlp_skip=frozenset(config.mlp_skip)))

        return _no_grad(layer_skip)
    if method == "draft_model":
        assert draft is not None                 # checked by SpeculativeDecoder

        def draft_model(ids: list[int]) -> list[int]:
            x = torch.tensor([ids], dtype=torch.long, device=draft.device)
            return top1(draft.forward.forward(x, draft.forward.new_cache(1, len(ids))))

        return _no_grad(draft_model)
    if method == "sorted_exit":
        stack = draft if draft is not None else target
        return _no_grad(lambda ids: _sorted_exit(stack, config, ids, vocab))
    if method == "ngram":
        def ngram(ids: list[int]) -> list[int]:
            out = []
            for t in range(len(ids)):
                found = _lookup(ids[:t + 1], config.ngram_min, config.ngram_max, 1)
                out.append(found[0] if found else -1)
            return out

        return ngram
    return None


def _sorted_exit(stack: LoadedModel, config: DecodeConfig, ids: list[int],
                 vocab: int) -> list[int]:
    """S2D's rule at every position: the top-1 of the first exit whose top-1 probability
    reaches its threshold, else the deepest exit's top-1 (SortedExitDrafter's loop).
    One pass through the stack: each exit continues from the previous exit's state."""
    forward = stack.forward
    x = torch.tensor([ids], dtype=torch.long, device=stack.device)
    step = forward.begin(x, forward.new_cache(1, len(ids)))
    chosen = torch.zeros(len(ids), dtype=torch.long, device=stack.device)
    decided = torch.zeros(len(ids), dtype=torch.bool, device=stack.device)
    done = 0
    last = chosen
    for exit_layer, threshold in zip(config.exits, config.exit_thresholds()):
        forward.run_layers(step, done, exit_layer)
        done = exit_layer
        logits = forward.logits(step)[0, :, :vocab]
        confidence, token = torch.softmax(logits.float(), dim=-1).max(dim=-1)
        take = ~decided & (confidence >= threshold)
        chosen = torch.where(take, token, chosen)
        decided |= take
        last = token
    # The deepest exit always emits (the drafter keeps the last exit's token).
    chosen = torch.where(decided, chosen, last)
    return chosen.tolist()


def _no_grad(fn: Scorer) -> Scorer:
    def wrapped(ids: list[int]) -> list[int]:
        with torch.inference_mode():
            return fn(ids)
    return wrapped
