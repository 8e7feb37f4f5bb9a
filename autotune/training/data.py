"""What a drafter is distilled from: the target's greedy continuations and features.

For each training prompt the target continues greedily (batched AR, a few prompts at a
time), then one target pass over prompt + continuation gives the features of every
position: the final-normed hidden states its LM head reads. Features are the teacher:
an EAGLE head regresses the next position's feature and matches the distribution the
target's LM head gives there; Medusa head i matches the target's distribution i+1
positions further. Only the target's outputs are used, never a label, so the drafter
learns the model as it runs here.

Both are cached under $AUTOTUNE_CACHE/train/ per (model fingerprint, workload digest,
max new tokens), written atomically (float32 features: about 2.3 KB per token for a
576-wide model); a file that does not load or match is rebuilt.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from autotune.models.llama import LlamaForward
from autotune.models.loading import LoadedModel, cache_root
from autotune.workloads import Prompt, encode_prompt, workload_digest

FORMAT = "autotune.train-data/v2"
FORMAT_V1 = "autotune.train-data/v1"
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


def prompt_digest(text: str) -> str:
    """A prompt's identity in drafter.json (the search checks its held-out prompts
    against these: a drafter must never have seen a validation prompt)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _continuations(target: LoadedModel, ids: list[list[int]], max_new_tokens: int,
                   progress: Callable[[int, int], None]) -> list[list[int]]:
    """The target's greedy continuations, batched AR (rows leave when they end)."""
    from autotune.decoding.batched import BatchedDecoder
    from autotune.decoding.config import DecodeConfig

    decoder = BatchedDecoder(target, DecodeConfig())
    out: list[list[int]] = []
    for first in range(0, len(ids), GENERATION_BATCH):
        batch = ids[first:first + GENERATION_BATCH]
        generation = decoder.generate(batch, max_new_tokens, lambda: 0.0)
        out.extend(row.tokens for row in generation.rows)
        progress(len(out), len(ids))
    return out


@torch.inference_mode()
def _features(forward: LlamaForward, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids], dtype=torch.long, device=forward.device)
    _, features = forward.forward_features(x, forward.new_cache(1, len(ids)))
    return features[0].float().cpu()


def _cache_path(target: LoadedModel, prompts: Sequence[Prompt], max_new_tokens: int) -> Path:
    from autotune.replay.reference import model_fingerprint
    return (cache_root() / "train" /
            f"{model_fingerprint(target)}-{workload_digest(list(prompts))}-{max_new_tokens}.pt")


def _load(path: Path, ids: list[list[int]]) -> dict | None:
    """The cached {continuations, features} of these prompts, or None (one line said)."""
    if not path.is_file():
        return None
    try:
        doc = torch.load(path, weights_only=True)
        # v1 files hold the continuations only: their features are computed and added.
        if doc.get("format") not in (FORMAT, FORMAT_V1) or doc.get("prompts") != ids:
            raise ValueError("made for other prompts")
        if len(doc["continuations"]) != len(ids) or len(doc.get("features", ids)) != len(ids):
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
    if doc is None or "features" not in doc:
        continuations = [list(map(int, c)) for c in doc["continuations"]] if doc else \
            _continuations(target, ids, max_new_tokens,
                           lambda done, total: progress("continuations", done, total))
        features = []
        for i, (p, c) in enumerate(zip(ids, continuations)):
            features.append(_features(forward, p + c))
            if (i + 1) % GENERATION_BATCH == 0 or i + 1 == len(ids):
                progress("features", i + 1, len(ids))
        doc = {"format": FORMAT, "prompts": ids, "continuations": continuations,
               "features": features}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch = path.with_suffix(".tmp")
            torch.save(doc, scratch)
            scratch.replace(path)
        except OSError as exc:
            print(f"autotune: warning: training cache not written ({exc})", file=sys.stderr)
    return [Sequence_(torch.tensor(p + list(map(int, c))), f, len(p), q.category, q.prompt_id)
            for p, c, f, q in zip(ids, doc["continuations"], doc["features"], prompts)]


def describe(prompts: Sequence[Prompt], workload: str, max_new_tokens: int) -> dict:
    """What drafter.json records of the training prompts."""
    return {"workload": workload, "max_new_tokens": max_new_tokens, "prompts": len(prompts),
            "categories": sorted({p.category for p in prompts}),
            "prompt_sha256": sorted(prompt_digest(p.text) for p in prompts)}

