"""The trained drafter folder format (torch-free): what `autotune train-draft` writes and
`--draft DIR` reads.

A folder holds `drafter.json` (what it is: kind, the target it was distilled from, the
prompts it was trained on, how training went), `heads.safetensors` (the head's weights,
named as the engines' checkpoints name them) and the target's tokenizer. A per-category
folder (`train-draft --per-category`) holds `drafters.json`, an index of one such folder
per category plus `all`.

Kinds and the method each serves (`SERVES`): `eagle` and `medusa` heads draft as
methods of their own name; `exits` (trained S2D exit adapters) serve `sorted_exit`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from autotune.common.errors import AutotuneError

DRAFTER_FILE = "drafter.json"
WEIGHTS_FILE = "heads.safetensors"
FORMAT = "autotune.drafter/v1"
KINDS = ("eagle", "medusa", "exits")


# The method a drafter of each kind serves (the decoder refuses it to every other
# method that would draft with it).
SERVES = {"eagle": "eagle", "medusa": "medusa", "exits": "sorted_exit"}


def is_drafter_folder(spec: str | None) -> bool:
    return spec is not None and (Path(spec).expanduser() / DRAFTER_FILE).is_file()


class DrafterConfig:
    """What `LoadedModel.hf_model.config` answers for a trained drafter (fingerprints,
    provenance records): its description as JSON, its kind as the model type."""

    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        self.model_type = f"autotune_{meta['kind']}"

    def to_json_string(self) -> str:
        return json.dumps({k: self.meta[k] for k in ("format", "kind", "geometry", "target")},
                          sort_keys=True)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_meta(folder: Path) -> dict[str, Any]:
    try:
        meta = json.loads((folder / DRAFTER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AutotuneError(f"cannot read {folder / DRAFTER_FILE}: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise AutotuneError(f"{folder / DRAFTER_FILE} is not an autotune drafter "
                            f"({FORMAT})")
    if meta.get("kind") not in KINDS:
        raise AutotuneError(f"{folder / DRAFTER_FILE}: kind {meta.get('kind')!r} is not "
                            f"one of {', '.join(KINDS)}")
    return meta
SET_FILE = "drafters.json"
SET_FORMAT = "autotune.drafter-set/v1"
# The `drafter` knob's values besides a category: the member trained on every category
# (the default, and what a plain drafter is), and each prompt's own category's member.
GENERAL = "all"
ROUTED = "routed"


def is_drafter_set(spec: str | None) -> bool:
    return spec is not None and (Path(spec).expanduser() / SET_FILE).is_file()


def served_method(kind: str) -> str:
    """The method a trained drafter of `kind` drafts for."""
    return SERVES[kind]
