"""The HF export, run by transformers itself: the exported generation configs are loaded
from their files onto the target and the assistant, `generate()` runs assisted decoding
on the default model, and

- its output equals greedy decoding (transformers' own, and ours), and
- its accepted tokens per round equal our decoder's for the same config on the same
  prompts, round by round.

How rounds are counted: transformers calls `update_candidate_strategy(input_ids, scores,
num_matches)` once per assisted round, after verification, with the number of candidate
tokens the target accepted (after its EOS / length crop); the test records those calls.
Ours: `RoundTrace.accepted` per round. τ (tokens per round) is mean(accepted) + 1 on both
sides. transformers' first round drafts right after the prompt (its verify pass is the
prefill), ours after the prefill's token: transformers is given the prompt plus that token,
so both first rounds start at the same place. This is the check that catches an export whose fields transformers ignores (a
draft length read from the wrong model's config, the 0.4 threshold default turning on
confidence stopping): the rounds would differ.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from transformers import GenerationConfig
from transformers.generation import candidate_generator as hf_candidates

from autotune.decoding.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.exports import export
from autotune.frozen import SCHEMA
from autotune.models.loading import LoadedModel
from autotune.workloads import encode_prompt
from conftest import real_prompts

MAX_NEW = 20
N_PROMPTS = 3

CONFIGS = {
    "prompt_lookup": dict(method="ngram", k=4, ngram_min=1, ngram_max=3),
    "early_exit_fixed": dict(method="sorted_exit", exits=(20,), k=3),
    "early_exit_confidence": dict(method="sorted_exit", exits=(20,), k=6,
                                  exit_policy="confidence", gamma=0.5),
    "assistant_fixed": dict(method="draft_model", k=3),
    "assistant_heuristic": dict(method="draft_model", k=2, exit_policy="heuristic"),
    "assistant_confidence_roc": dict(method="draft_model", k=6, exit_policy="confidence",
                                     gamma=0.4),
}
USES_DRAFT = {"assistant_fixed", "assistant_heuristic", "assistant_confidence_roc"}


@pytest.fixture(scope="module")
def prompt_ids(default_model: LoadedModel) -> list[list[int]]:
    # Code and extraction prompts repeat their input, so prompt lookup finds matches.
    prompts = real_prompts(N_PROMPTS)
    return [encode_prompt(default_model.tokenizer, p) for p in prompts]


@pytest.fixture(scope="module")
def greedy_tokens(default_model: LoadedModel, prompt_ids: list[list[int]]) -> list[list[int]]:
    out = []
    for ids in prompt_ids:
        with torch.no_grad():
            seq = default_model.hf_model.generate(
                torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False,
                attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        out.append(seq[0, len(ids):].tolist())
    return out


def _frozen(config: DecodeConfig, draft: bool) -> dict:
    doc = {"schema": SCHEMA, "params": config.to_dict(),
           "model": {"spec": "HuggingFaceTB/SmolLM2-135M-Instruct", "id": "smollm2",
                     "n_layers": 30}}
    if draft:
        doc["draft"] = {"spec": "smollm2-first10", "id": "first10", "n_layers": 10}
    return doc


class RoundLog:
    """Wraps transformers' update_candidate_strategy to record num_matches per round."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.matches: list[int] = []
        for cls in (hf_candidates.AssistedCandidateGenerator,
                    hf_candidates.PromptLookupCandidateGenerator):
            original = cls.update_candidate_strategy

            def wrapped(self_, input_ids, scores, num_matches, _original=original):
                self.matches.append(int(num_matches))
                return _original(self_, input_ids, scores, num_matches)

            monkeypatch.setattr(cls, "update_candidate_strategy", wrapped)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_transformers_runs_the_hf_export_as_we_measured_it(
        name: str, default_model: LoadedModel, truncated_draft: LoadedModel,
        prompt_ids: list[list[int]], greedy_tokens: list[list[int]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    uses_draft = name in USES_DRAFT
    config = DecodeConfig(**CONFIGS[name], engine="hf")
    files = export(_frozen(config, uses_draft), "hf").files
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    folder = tmp_path / "hf"
    target_config = GenerationConfig.from_pretrained(folder, "generation_config.json")
    assistant = None
    if uses_draft:
        assistant = truncated_draft.hf_model
        monkeypatch.setattr(assistant, "generation_config", GenerationConfig.from_pretrained(
            folder, "assistant_generation_config.json"))
    else:
        assert not (folder / "assistant_generation_config.json").exists()

    ours = SpeculativeDecoder(default_model, config,
                              truncated_draft if uses_draft else None)
    hf_rounds: list[list[int]] = []
    our_rounds: list[list[int]] = []
    log = RoundLog(monkeypatch)
    for ids, expected in zip(prompt_ids, greedy_tokens):
        log.matches = []
        # transformers drafts its first round right after the prompt (that verify pass is
        # its prefill); ours drafts after the prefill's token. Given the prompt and that
        # token, both start their first round at the same place.
        start = ids + expected[:1]
        with torch.no_grad():
            seq = default_model.hf_model.generate(
                torch.tensor([start]), generation_config=target_config,
                max_new_tokens=MAX_NEW - 1, assistant_model=assistant,
                attention_mask=torch.ones(1, len(start), dtype=torch.long))
        assert seq[0, len(start):].tolist() == expected[1:], \
            "transformers' assisted output is not greedy"
        generation = ours.generate(ids, MAX_NEW, time.perf_counter)
        assert generation.tokens == expected, "our output is not greedy"
        hf_rounds.append(log.matches)
        our_rounds.append([r.accepted for r in generation.rounds])
    # Every assisted round, prompt by prompt (the prefill's token is a round of neither).
    assert hf_rounds == our_rounds, (name, hf_rounds, our_rounds)
    # The config drafted and accepted something somewhere (the comparison is not vacuous).
    assert sum(map(sum, our_rounds)) > 0, name
