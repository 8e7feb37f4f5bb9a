"""Reference continuations: the target's greedy output for each prompt, made once.

Under greedy verification every lossless config emits exactly these tokens, so they are
what every replay is teacher-forced on. They are cached on disk per (model fingerprint,
workload digest, max new tokens) under `$AUTOTUNE_CACHE/replay/`, with a checksum over
the content: a file that does not parse, whose checksum or key does not match, or whose
prompts differ is reported in one line and rebuilt (written atomically, so a kill never
leaves half of one).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Sequence

from pydantic import BaseModel, ConfigDict
from typing_extensions import TypedDict       # pydantic reads typing's only from 3.12

from autotune.common.files import write_atomically

if TYPE_CHECKING:
    from autotune.models.loading import LoadedModel
    from autotune.workloads.prompts import Prompt

FORMAT = "autotune.reference/v1"


@dataclass(frozen=True)
class Reference:
    """One prompt's ids and the target's greedy continuation (`tokens`, EOS included,
    at most max_new_tokens; tokens[0] comes from the prefill)."""

    prompt_id: str
    category: str
    prompt: list[int]
    tokens: list[int]

    @property
    def sequence(self) -> list[int]:
        return self.prompt + self.tokens


def cache_dir() -> Path:
    from autotune.models.loading import cache_root
    return cache_root() / "replay"


class ReferenceKey(TypedDict):
    """What a reference file was made for (its name and its `key`)."""

    model: str                  # `models.fingerprint.model_fingerprint`
    workload: str               # `workloads.prompts.workload_digest`
    max_new_tokens: int


class _ReferenceFile(BaseModel):
    """A reference file as written: its key, a checksum over its entries, the entries."""

    model_config = ConfigDict(frozen=True)

    format: Literal["autotune.reference/v1"]
    key: ReferenceKey
    sha256: str
    entries: list[Reference]


def _checksum(refs: list[Reference]) -> str:
    entries = [asdict(r) for r in refs]
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


def _read(path: Path, key: ReferenceKey, ids: list[list[int]],
          prompts: Sequence["Prompt"]) -> list[Reference] | None:
    """The cached references, or None with a one-line warning when the file is absent,
    corrupted or made for something else."""
    if not path.is_file():
        return None
    try:
        stored = _ReferenceFile.model_validate_json(path.read_bytes())
        refs = stored.entries
        if (stored.key == key and stored.sha256 == _checksum(refs) and len(refs) == len(ids)
                and all(r.prompt == p and r.prompt_id == q.prompt_id
                        for r, p, q in zip(refs, ids, prompts))):
            return refs
        reason = "its checksum, key or prompts do not match"
    except (OSError, ValueError) as exc:         # pydantic's ValidationError is one
        reason = f"{type(exc).__name__}"
    print(f"autotune: warning: reference cache {path.name} is unusable ({reason}); "
          "rebuilding it", file=sys.stderr, flush=True)
    return None


def reference_set(target: "LoadedModel", prompts: Sequence["Prompt"], max_new_tokens: int,
                  directory: Path | None = None) -> list[Reference]:
    """Each prompt's greedy continuation by the AR baseline, from the cache when a valid
    entry exists, else decoded now and cached."""
    from autotune.decoding.reference import reference_continuations
    from autotune.models.fingerprint import model_fingerprint
    from autotune.workloads.prompts import encode_prompt, workload_digest

    ids = [encode_prompt(target.tokenizer, p) for p in prompts]
    key = ReferenceKey(model=model_fingerprint(target),
                       workload=workload_digest(list(prompts)), max_new_tokens=max_new_tokens)
    folder = directory if directory is not None else cache_dir()
    path = folder / f"{key['model']}-{key['workload']}-{max_new_tokens}.json"
    cached = _read(path, key, ids, prompts)
    if cached is not None:
        return cached
    continuations = reference_continuations(target, ids, max_new_tokens)
    refs = [Reference(p.prompt_id, p.category, i, c)
            for p, i, c in zip(prompts, ids, continuations)]
    try:
        write_atomically(path, json.dumps({"format": FORMAT, "key": key,
                                           "sha256": _checksum(refs),
                                           "entries": [asdict(r) for r in refs]}) + "\n")
    except OSError as exc:      # a read-only cache costs a rebuild next time, nothing more
        print(f"autotune: warning: reference cache not written ({exc})", file=sys.stderr)
    return refs
