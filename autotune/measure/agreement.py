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

from autotune.common.errors import AutotuneError
from autotune.decoding.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.decoding.drafters.base import stack_model
from autotune.decoding.drafters.ngram import NgramProposer
from autotune.decoding.drafters.sorted_exit import (
    first_confident_exit,
    top1_probability,
)
from autotune.decoding.methods import get_method
from autotune.decoding.reference import Sequence
from autotune.models.loading import LoadedModel
from autotune.models.trained import exit_adapters


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
    # Its draft: the member a per-category folder's `drafter` names (sequences carry no
    # category, so `routed` is scored with the `all` member).
    scorer = _scorer(target, config, SpeculativeDecoder(target, config, draft).draft)
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
# A method's scorer factory (named by `MethodSpec.scorer`): (target, config, draft) -> Scorer.
ScorerFactory = Callable[[LoadedModel, DecodeConfig, "LoadedModel | None"], Scorer]


def _scorer(target: LoadedModel, config: DecodeConfig,
            draft: LoadedModel | None) -> Scorer | None:
    """The draft's top-1 prediction at every position of a sequence (index t predicts
    token t+1; -1 where the draft proposes nothing), or None for a method without a
    scorer (`none`: nothing is drafted)."""
    factory = get_method(config.method).scorer_factory()
    return factory(target, config, draft) if factory is not None else None


def _shared_vocab(target: LoadedModel, draft: LoadedModel | None) -> int:
    return target.forward.vocab_size if draft is None else min(
        target.forward.vocab_size, draft.forward.vocab_size)


def _top1(logits: torch.Tensor, vocab: int) -> list[int]:
    """logits [1, N, V] -> N ids; the decoder's drafts are confined to the shared vocab."""
    return logits[0, :, :vocab].argmax(dim=-1).tolist()


def layer_skip_scorer(target: LoadedModel, config: DecodeConfig,
                      draft: LoadedModel | None) -> Scorer:
    """The skipping pass over the whole sequence (see the module docstring for how it
    differs from the drafter's)."""
    forward, vocab = target.forward, _shared_vocab(target, draft)
    attn_skip, mlp_skip = frozenset(config.attn_skip), frozenset(config.mlp_skip)

    def layer_skip(ids: list[int]) -> list[int]:
        x = torch.tensor([ids], dtype=torch.long, device=target.device)
        cache = forward.new_cache(1, len(ids))
        return _top1(forward.forward(x, cache, attn_skip=attn_skip, mlp_skip=mlp_skip), vocab)

    return _no_grad(layer_skip)


def draft_model_scorer(target: LoadedModel, config: DecodeConfig,
                       draft: LoadedModel | None) -> Scorer:
    """The draft model's own pass over the whole sequence."""
    assert draft is not None                 # checked by SpeculativeDecoder
    vocab = _shared_vocab(target, draft)

    def draft_model(ids: list[int]) -> list[int]:
        x = torch.tensor([ids], dtype=torch.long, device=draft.device)
        return _top1(draft.forward.forward(x, draft.forward.new_cache(1, len(ids))), vocab)

    return _no_grad(draft_model)


def sorted_exit_scorer(target: LoadedModel, config: DecodeConfig,
                       draft: LoadedModel | None) -> Scorer:
    """S2D's exit rule (`first_confident_exit`, the drafter's own) at every position, in
    one pass through the stack: the top-1 of each position's exit (read through the
    trained adapters of an `exits` drafter, as the drafter reads them)."""
    stack = stack_model(get_method(config.method), target, draft)    # what exits index
    vocab = _shared_vocab(target, draft)
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

    return _no_grad(sorted_exit)


def ngram_scorer(target: LoadedModel, config: DecodeConfig,
                 draft: LoadedModel | None) -> Scorer:
    """The drafter's own lookup (under the config's engine rules), one token at every
    prefix."""
    eos = target.eos_token_ids

    def ngram(ids: list[int]) -> list[int]:
        out = []
        propose = NgramProposer(config, eos)     # asked at every prefix, in order
        for t in range(len(ids)):
            found = propose(ids[:t + 1], 1)
            out.append(found[0] if found else -1)
        return out

    return ngram


def _no_grad(fn: Scorer) -> Scorer:
    def wrapped(ids: list[int]) -> list[int]:
        with torch.inference_mode():
            return fn(ids)
    return wrapped


def trained_head_scorer(target: LoadedModel, config: DecodeConfig,
                        draft: LoadedModel | None) -> Scorer:
    """A trained head's first draft at every position, teacher-forced on the target's
    own features (what its drafter does for the first token of a round): index t
    predicts token t+1 from the target's feature of position t-1 (EAGLE: with token t;
    Medusa: head 0); index 0 has no feature before it (-1)."""
    assert draft is not None and draft.trained_kind == config.method   # the decoder's check
    forward, head, vocab = target.forward, draft.hf_model, _shared_vocab(target, draft)

    def trained(ids: list[int]) -> list[int]:
        x = torch.tensor([ids], dtype=torch.long, device=target.device)
        _, features = forward.forward_features(x, forward.new_cache(1, len(ids)))
        if config.method == "eagle":
            t = len(ids) - 1
            predicted = head(features[:, :-1], torch.nn.functional.embedding(
                x[:, 1:], forward.embed), forward.cos[:t], forward.sin[:t], forward.scaling)
        else:
            predicted = head(features[:, :-1])[:, :, 0]
        return [-1] + _top1(forward.head_logits(predicted), vocab)

    return _no_grad(trained)
