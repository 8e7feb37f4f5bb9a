"""The HF export, run by transformers itself: the exported generation configs are loaded
from their files onto the target and the assistant, `generate()` runs assisted decoding
on the default model, and

- its output equals greedy decoding (transformers' own, and ours), and
- the draft tokens it proposes and the tokens it emits per round equal our decoder's
  for the same config on the same prompts, round by round.

How rounds are counted (autotune/hf_assisted.py): transformers calls
`update_candidate_strategy(..., scores, num_matches)` once per assisted round with the
target's logits over the candidates (their count) and num_matches, which is the round's
emitted tokens − 1 (after its budget / EOS crop: in a round cut there, every emitted
token may be a draft); ours are `RoundTrace.drafted` and `.emitted` − 1. τ is mean(accepted)
+ 1 on both sides. transformers' first round drafts right after the prompt (its verify
pass is the prefill), ours after the prefill's token: transformers is given the prompt
plus that token, so both first rounds start at the same place. This is the check that
catches an export whose fields transformers ignores (a draft length read from the wrong
model's config, the 0.4 threshold default turning on confidence stopping).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from conftest import real_prompts

from autotune.backends.hf_assisted import run_assisted
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.exports import export
from autotune.frozen.schema import SCHEMA
from autotune.models.loading import LoadedModel
from autotune.workloads.prompts import encode_prompt, round_robin

MAX_NEW = 20
N_PROMPTS = 2

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
    # Summaries and code repeat their input, so prompt lookup finds matches there (on a
    # writing prompt it may accept nothing in 20 tokens).
    every = real_prompts(500)
    # The shortest of each (coding and summarization: 47 and 193 tokens, about 35 rounds
    # per config): what is checked is per round, and a long prompt's prefill in both
    # transformers and our decoder is most of the time (Spec-Bench's shortest rag
    # prompt, 767 tokens, was half of this file's).
    copying = sorted((p for p in every if p.category in ("summarization", "coding")),
                     key=lambda p: len(p.text))
    prompts = round_robin(copying or every, N_PROMPTS)
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


@pytest.mark.parametrize("name", list(CONFIGS))
def test_transformers_runs_the_hf_export_as_we_measured_it(
        name: str, default_model: LoadedModel, truncated_draft: LoadedModel,
        prompt_ids: list[list[int]], greedy_tokens: list[list[int]], tmp_path: Path) -> None:
    uses_draft = name in USES_DRAFT
    config = DecodeConfig(**CONFIGS[name], engine="hf")
    files = export(_frozen(config, uses_draft), "hf").files
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    folder = tmp_path / "hf"
    assert (folder / "assistant_generation_config.json").exists() == uses_draft

    ours = SpeculativeDecoder(default_model, config, truncated_draft if uses_draft else None)
    hf_rounds: list[list[tuple[int, int]]] = []
    our_rounds: list[list[tuple[int, int]]] = []
    for ids, expected in zip(prompt_ids, greedy_tokens):
        theirs = run_assisted(default_model.hf_model, folder, ids, expected[0], MAX_NEW,
                              truncated_draft.hf_model if uses_draft else None)
        assert theirs.tokens == expected[1:], "transformers' assisted output is not greedy"
        generation = ours.generate(ids, MAX_NEW, time.perf_counter)
        assert generation.tokens == expected, "our output is not greedy"
        hf_rounds.append(list(zip(theirs.drafted, theirs.accepted)))
        our_rounds.append([(r.drafted, r.emitted - 1) for r in generation.rounds])
    assert hf_rounds == our_rounds, (name, hf_rounds, our_rounds)
    # The config drafted and accepted something somewhere (the comparison is not vacuous).
    assert sum(a for rounds in our_rounds for _, a in rounds) > 0, name


def test_a_dropped_assistant_file_is_caught(default_model: LoadedModel,
                                            truncated_draft: LoadedModel,
                                            prompt_ids: list[list[int]],
                                            greedy_tokens: list[list[int]],
                                            tmp_path: Path) -> None:
    """The check has power: without the assistant's file transformers drafts up to its
    default 20 tokens under a 0.4 threshold, and its rounds differ from a fixed K of 3."""
    config = DecodeConfig(**CONFIGS["assistant_fixed"], engine="hf")
    files = export(_frozen(config, True), "hf").files
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "generation_config.json").write_text(files["hf/generation_config.json"])
    ids, expected = prompt_ids[0], greedy_tokens[0]
    theirs = run_assisted(default_model.hf_model, tmp_path / "hf", ids, expected[0], MAX_NEW,
                          truncated_draft.hf_model)
    ours = SpeculativeDecoder(default_model, config, truncated_draft).generate(
        ids, MAX_NEW, time.perf_counter)
    assert theirs.tokens == expected[1:]
    assert theirs.drafted != [r.drafted for r in ours.rounds]
    assert max(theirs.drafted) > 3
