"""HF's sampled prompt lookup against transformers' own PromptLookupCandidateGenerator:
with do_sample and top_p < 1 it runs the sampling warpers on uniform stand-in logits
and cuts a draft at the first token they mask (candidate_generator.py L1111-1129 in
transformers 5.24.0), which `engine=hf` reproduces (methods/ngram/hf_stand_in.py)."""

from __future__ import annotations

import random

import pytest
import torch
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.methods.ngram.drafter import NgramProposer, ngram_proposal
from autotune.methods.ngram.hf_stand_in import stand_in_masked

VOCAB = 1000
EOS = 999


def _transformers_draft(ids: list[int], k: int, ngram_max: int, temperature: float,
                        top_p: float) -> list[int]:
    # The warpers utils.py L1617-1629 (5.24.0) build for do_sample with autotune's HF
    # backend's settings (top_k=0 adds no top-k warper), handed to the generator as
    # utils.py L1324-1331 do.
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature),
                                   TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1)])
    generator = PromptLookupCandidateGenerator(
        eos_token_id=torch.tensor([EOS]), num_output_tokens=k,
        max_matching_ngram_size=ngram_max, max_length=10_000, logits_processor=warpers,
        vocab_size=VOCAB)
    candidates, _ = generator.get_candidates(torch.tensor([ids]))
    return candidates[0, len(ids):].tolist()


@pytest.mark.parametrize("top_p", [0.9, 0.5])
def test_sampled_prompt_lookup_drafts_what_transformers_drafts(top_p: float) -> None:
    masked = sorted(stand_in_masked(VOCAB, 0.7, top_p))
    kept = sorted(set(range(VOCAB - 1)) - set(masked))
    rng = random.Random(0)
    alphabet = masked[:3] + kept[:4] + [EOS]
    config = DecodeConfig(method="ngram", k=4, ngram_max=3, engine="hf", temperature=0.7,
                          top_p=top_p)
    unfiltered = DecodeConfig(method="ngram", k=4, ngram_max=3, engine="hf")   # greedy
    cropped = 0
    for _ in range(60):
        tokens = [rng.choice(alphabet) for _ in range(rng.randint(4, 30))]
        proposer = NgramProposer(config, {EOS}, vocab_size=VOCAB)
        for length in range(2, len(tokens) + 1):
            prefix = tokens[:length]
            expected = _transformers_draft(prefix, 4, 3, 0.7, top_p)
            assert proposer(prefix, 4) == expected, prefix
            cropped += expected != ngram_proposal(prefix, unfiltered, 4, {EOS})
    assert cropped > 0          # the stand-in filter changed drafts in this sample


def test_greedy_and_top_p_one_are_not_filtered() -> None:
    seq = [5, 700, 8, 5, 700]
    for extra in (dict(), dict(temperature=0.7, top_p=1.0)):
        config = DecodeConfig(method="ngram", k=2, ngram_max=1, engine="hf", **extra)
        assert NgramProposer(config, {EOS})(seq, 2) == [8, 5]
    assert stand_in_masked(VOCAB, 0.7, 1.0) == frozenset()
    assert len(stand_in_masked(VOCAB, 0.7, 0.9)) == 100      # (1 - top_p) of 1000


def test_a_sampled_hf_draft_needs_the_vocabulary_size() -> None:
    config = DecodeConfig(method="ngram", k=2, engine="hf", temperature=0.7, top_p=0.9)
    with pytest.raises(AutotuneError, match="vocabulary size") as error:
        NgramProposer(config, {EOS})
    assert "\n" not in str(error.value)
