"""What a drafter is distilled from: the target's greedy continuations and features.

For each training prompt the target continues greedily (batched AR, a few prompts at a
time), and the passes of that generation give the features of every position they ran
over (the prompt's prefill, then one token per step): the final-normed hidden states
its LM head reads, collected at no extra cost (a separate pass over prompt +
continuation would cost a prefill of everything again). Features are the teacher:
an EAGLE head regresses the next position's feature and matches the distribution the
target's LM head gives there; Medusa head i matches the target's distribution i+1
positions further. Only the target's outputs are used, never a label, so the drafter
learns the model as it runs here.

Both are cached under $AUTOTUNE_CACHE/train/ per (model fingerprint, workload digest,
max new tokens), written atomically (float32 features: about 2.3 KB per token for a
576-wide model); a file that does not load or match is rebuilt.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from autotune.models.llama import LlamaForward
from autotune.models.loading import LoadedModel, cache_root
from autotune.workloads.prompts import (
    Prompt,
    encode_prompt,
    prompt_digest,
    workload_digest,
)

FORMAT = "autotune.train-data/v2"
GENERATION_BATCH = 16


@dataclass
class Sequence_:
    """One training sequence: ids [L] (prompt then continuation), features [L, H]
    (float32), the prompt's length and category."""

    ids: torch.Tensor
    features: torch.Tensor
    prompt_len: int
    category: str
    prompt_id: str


def _generate(target: LoadedModel, ids: list[list[int]], max_new_tokens: int,
              progress: Callable[[int, int], None]
              ) -> tuple[list[list[int]], list[torch.Tensor]]:
    """The target's greedy continuations (batched AR; rows leave when they end) and
    the features of prompt + continuation but its last token (the positions the passes
    ran over: the last token is never fed), collected from those same passes."""
    from autotune.decoding.batched import BatchedDecoder
    from autotune.schema.config import DecodeConfig

    decoder = BatchedDecoder(target, DecodeConfig())
    continuations: list[list[int]] = []
    features: list[torch.Tensor] = []
    for first in range(0, len(ids), GENERATION_BATCH):
        batch = ids[first:first + GENERATION_BATCH]
        parts: list[list[torch.Tensor]] = [[] for _ in batch]
        generation = decoder.generate(batch, max_new_tokens, lambda: 0.0,
                                      on_features=lambda row, f: parts[row].append(f.float().cpu()))
        for prompt, row, part in zip(batch, generation.rows, parts):
            continuations.append(row.tokens)
            features.append(torch.cat(part)[: len(prompt) + len(row.tokens) - 1])
        progress(len(continuations), len(ids))
    return continuations, features


def _cache_path(target: LoadedModel, prompts: Sequence[Prompt], max_new_tokens: int) -> Path:
    from autotune.models.fingerprint import model_fingerprint
    return (cache_root() / "train" /
            f"{model_fingerprint(target)}-{workload_digest(list(prompts))}-{max_new_tokens}.pt")


def _load(path: Path, ids: list[list[int]]) -> dict | None:
    """The cached {continuations, features} of these prompts, or None (one line said)."""
    if not path.is_file():
        return None
    try:
        doc = torch.load(path, weights_only=True)
        if doc.get("format") != FORMAT or doc.get("prompts") != ids:
            raise ValueError("made for other prompts")
        if len(doc["continuations"]) != len(ids) or len(doc["features"]) != len(ids):
            raise ValueError("truncated")
        return doc
    except Exception as exc:        # a truncated or foreign file: rebuild it
        print(f"autotune: warning: training cache {path.name} is unusable "
              f"({type(exc).__name__}); rebuilding it", file=sys.stderr, flush=True)
        return None


def training_sequences(target: LoadedModel, prompts: Sequence[Prompt], max_new_tokens: int,
                       progress: Callable[[str, int, int], None] = lambda what, done, total: None
                       ) -> list[Sequence_]:
    """Every prompt's sequence with its target features, from the cache when it holds
    them (a feature pass costs a prefill of the whole sequence: on a CPU, minutes for a
    few hundred prompts), else computed now and cached."""
    forward = target.forward
    assert isinstance(forward, LlamaForward)
    ids = [encode_prompt(target.tokenizer, p) for p in prompts]
    path = _cache_path(target, prompts, max_new_tokens)
    doc = _load(path, ids)
    if doc is None:
        continuations, features = _generate(
            target, ids, max_new_tokens, lambda done, total: progress("continuations", done, total))
        doc = {"format": FORMAT, "prompts": ids, "continuations": continuations,
               "features": features}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch = path.with_suffix(".tmp")
            torch.save(doc, scratch)
            scratch.replace(path)
        except OSError as exc:
            print(f"autotune: warning: training cache not written ({exc})", file=sys.stderr)
    # A sequence is the prompt and the continuation but its last token (whose feature
    # no pass computed).
    return [Sequence_(torch.tensor((p + list(map(int, c)))[: f.shape[0]]), f, len(p),
                      q.category, q.prompt_id)
            for p, c, f, q in zip(ids, doc["continuations"], doc["features"], prompts)]


def describe(prompts: Sequence[Prompt], workload: str, max_new_tokens: int) -> dict:
    """What drafter.json records of the training prompts."""
    return {"workload": workload, "max_new_tokens": max_new_tokens, "prompts": len(prompts),
            "categories": sorted({p.category for p in prompts}),
            "prompt_sha256": sorted(prompt_digest(p.text) for p in prompts)}

