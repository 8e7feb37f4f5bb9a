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

Each method scores with its own scorer (`MethodSpec.scorer`, in its package's
agreement.py), whose docstring says how close its pass is to its drafter in the
decoder; this module is the driver they share and the helpers they build on.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.compatibility import check_decodable
from autotune.schema.methods import get_method
from autotune.decoding.reference import Sequence
from autotune.models.loading import LoadedModel


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
    scorer = _scorer(target, config, check_decodable(target, config, draft).draft)
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


def shared_vocab(target: LoadedModel, draft: LoadedModel | None) -> int:
    """The ids a draft may propose: the target's vocabulary, cut to the draft's."""
    return target.forward.vocab_size if draft is None else min(
        target.forward.vocab_size, draft.forward.vocab_size)


def top1(logits: torch.Tensor, vocab: int) -> list[int]:
    """logits [1, N, V] -> N ids; the decoder's drafts are confined to the shared vocab."""
    return logits[0, :, :vocab].argmax(dim=-1).tolist()


def no_grad(fn: Scorer) -> Scorer:
    """`fn` run under `torch.inference_mode` (a scorer builds no graph)."""
    def wrapped(ids: list[int]) -> list[int]:
        with torch.inference_mode():
            return fn(ids)
    return wrapped


# A trained head's first draft at every position from the target's features:
# (features [1, N-1, H] of positions 0..N-2, ids [1, N]) -> predicted features [1, N-1, H].
FeaturePredictor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def feature_scorer(target: LoadedModel, draft: LoadedModel | None,
                   predict: FeaturePredictor) -> Scorer:
    """A scorer for a drafter that reads the target's features (a trained head), teacher-
    forced on them as its drafter is for the first token of a round: index t predicts
    token t+1 from `predict`'s feature for position t-1 (through the target's LM head);
    index 0 has no feature before it (-1)."""
    forward, vocab = target.forward, shared_vocab(target, draft)

    def trained(ids: list[int]) -> list[int]:
        x = torch.tensor([ids], dtype=torch.long, device=target.device)
        _, features = forward.forward_features(x, forward.new_cache(1, len(ids)))
        return [-1] + top1(forward.head_logits(predict(features[:, :-1], x)), vocab)

    return no_grad(trained)
