"""Run an HF export in transformers itself: the exported generation configs loaded from
their files onto the target and the assistant, then `generate()`'s assisted decoding.

What it returns per prompt is what transformers did: the tokens it generated and, per
assisted round, the draft tokens it proposed and accepted. Rounds are counted where
transformers itself counts them: it calls `update_candidate_strategy(input_ids, scores,
num_matches)` once per assisted round, after verification, with the target's logits over
the candidates plus one (`scores` [1, drafted + 1, V]) and the number of candidate tokens
the target accepted (after its EOS / length crop); this module records those calls.

transformers drafts its first round right after the prompt (that verify pass is its
prefill), whereas autotune's decoder first takes the prefill's token and drafts after it.
`start_after` gives transformers the prompt plus that first token, so that both decoders'
first rounds start at the same place and their rounds can be compared one by one.
"""

from __future__ import annotations

import contextlib
import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from transformers import GenerationConfig
from transformers.generation import candidate_generator as hf_candidates

TARGET_FILE = "generation_config.json"
ASSISTANT_FILE = "assistant_generation_config.json"
KWARGS_FILE = "generate_kwargs.json"         # arguments of the generate() call itself


@dataclass
class AssistedRun:
    """tokens: what generate() appended after its input; drafted / accepted: per
    assisted round, the candidate tokens proposed and transformers' num_matches (the
    round's emitted tokens - 1: in a round cut by the budget or an EOS every emitted
    token may be a draft, and it still counts one less)."""

    tokens: list[int]
    drafted: list[int]
    accepted: list[int]

    @property
    def tau(self) -> float:
        """Tokens per assisted round (accepted + the target's own), or 0 without rounds."""
        return (sum(self.accepted) / len(self.accepted) + 1.0) if self.accepted else 0.0


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[int, int]]]:
    """Record (candidates, num_matches) of every update_candidate_strategy call while
    inside."""
    seen: list[tuple[int, int]] = []
    classes = (hf_candidates.AssistedCandidateGenerator,
               hf_candidates.PromptLookupCandidateGenerator)
    originals = {cls: cls.__dict__.get("update_candidate_strategy") for cls in classes}

    def wrap(original: Any) -> Any:
        def wrapped(self: Any, input_ids: Any, scores: Any, num_matches: int) -> Any:
            seen.append((int(scores.shape[-2]) - 1, int(num_matches)))
            return original(self, input_ids, scores, num_matches)
        return wrapped

    try:
        for cls in classes:
            cls.update_candidate_strategy = wrap(cls.update_candidate_strategy)
        yield seen
    finally:
        for cls, original in originals.items():
            if original is None:
                del cls.update_candidate_strategy
            else:
                cls.update_candidate_strategy = original


def load_configs(folder: Path) -> tuple[GenerationConfig, GenerationConfig | None]:
    """The target's generation config and the assistant's (None when the export has
    none: prompt lookup and early exit run on the target's alone)."""
    target = GenerationConfig.from_pretrained(folder, TARGET_FILE)
    assistant = (GenerationConfig.from_pretrained(folder, ASSISTANT_FILE)
                 if (folder / ASSISTANT_FILE).exists() else None)
    return target, assistant


@contextlib.contextmanager
def applied(folder: Path, target_model: Any,
            assistant_model: Any | None = None) -> Iterator[dict[str, Any]]:
    """The export in `folder` applied as its launch.md says, while inside: each file's
    values onto the generation config of the model that reads it (for early exit
    transformers reads the draft length and threshold from the target model's own
    `generation_config`, not from a config passed to generate()), put back afterwards.
    Yields generate_kwargs.json's entries: arguments of the generate() call."""
    target_config, assistant_config = load_configs(folder)
    models = [(target_model, target_config)]
    if assistant_model is not None and assistant_config is not None:
        models.append((assistant_model, assistant_config))
    saved = [(model, copy.deepcopy(model.generation_config)) for model, _ in models]
    try:
        for model, config in models:
            model.generation_config.update(**config.to_diff_dict())
        yield (json.loads((folder / KWARGS_FILE).read_text())
               if (folder / KWARGS_FILE).exists() else {})
    finally:
        for model, config in saved:
            model.generation_config = config


@torch.no_grad()
def run_assisted(target_model: Any, folder: Path, prompt: list[int], first_token: int,
                 max_new_tokens: int, assistant_model: Any | None = None) -> AssistedRun:
    """transformers' assisted generate() with the HF export in `folder` (an exports/hf
    directory, applied as `applied` says), from `prompt` + `first_token` for
    `max_new_tokens - 1` more tokens."""
    start = prompt + [first_token]
    with applied(folder, target_model, assistant_model) as kwargs:
        with recording() as rounds:
            seq = target_model.generate(
                torch.tensor([start]), max_new_tokens=max_new_tokens - 1,
                assistant_model=assistant_model,
                attention_mask=torch.ones(1, len(start), dtype=torch.long), **kwargs)
    return AssistedRun(tokens=seq[0, len(start):].tolist(),
                       drafted=[d for d, _ in rounds], accepted=[a for _, a in rounds])
