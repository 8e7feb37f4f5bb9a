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
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from autotune.common.errors import AutotuneError
from autotune.common.files import read_json
from autotune.common.records import first_problem, parse_record
from autotune.schema.config import GENERAL_DRAFTER, ROUTED_DRAFTER

DRAFTER_FILE = "drafter.json"
WEIGHTS_FILE = "heads.safetensors"
FORMAT = "autotune.drafter/v1"
KINDS = ("eagle", "medusa", "exits")
Kind = Literal["eagle", "medusa", "exits"]


# The method a drafter of each kind serves (the decoder refuses it to every other
# method that would draft with it).
SERVES = {"eagle": "eagle", "medusa": "medusa", "exits": "sorted_exit"}


def is_drafter_folder(spec: str | None) -> bool:
    return spec is not None and (Path(spec).expanduser() / DRAFTER_FILE).is_file()


# ------------------------------------------------------------------ drafter.json

class _Geometry(BaseModel):
    """A head's geometry: exactly the keys its kind writes (a key of another kind's is
    an error, not a head silently built without it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class EagleGeometry(_Geometry):
    """An EAGLE head (fc + one decoder layer): the attention geometry it shares with its
    target (`models.heads.head_geometry`)."""

    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    attention_bias: bool = False        # folders written before it had no biases


class MedusaGeometry(EagleGeometry):
    """Medusa heads over the target's geometry: `medusa_heads` heads of
    `medusa_layers` residual blocks each."""

    medusa_heads: int
    medusa_layers: int = 1              # folders written before it: one block per head


class ExitsGeometry(_Geometry):
    """Exit adapters of rank `exit_rank` at `exit_layers` of a target of `n_layers`."""

    hidden: int
    eps: float
    n_layers: int
    exit_layers: list[int]
    exit_rank: int


HeadGeometry = Union[EagleGeometry, MedusaGeometry, ExitsGeometry]


class TargetRecord(BaseModel):
    """drafter.json's `target`: the model the head was distilled from (its path and
    dtype too, kept as written)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    name: str | None = None
    fingerprint: str | None = None      # `models.fingerprint.model_fingerprint`


class TrainedOn(BaseModel):
    """drafter.json's `trained_on`: a digest of every training prompt (the search keeps
    them out of its held-out prompts); the workload's description, kept as written."""

    model_config = ConfigDict(frozen=True, extra="allow")

    prompt_sha256: list[str] = []


class DrafterMeta(BaseModel):
    """drafter.json, read: what the head is (kind, geometry), the target it was
    distilled from, its training prompts and its weights' checksum. What else the file
    holds (how training went, the engines' checkpoints) is kept as written. One
    subclass per kind holds that kind's geometry (`from_json` picks it by `kind`)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    format: Literal["autotune.drafter/v1"]
    kind: Kind
    geometry: HeadGeometry
    target: TargetRecord = TargetRecord()
    trained_on: TrainedOn = TrainedOn()
    weights_sha256: str | None = None

    @staticmethod
    def from_json(doc: object, source: str = DRAFTER_FILE) -> "DrafterMeta":
        """A drafter.json document as its kind's record; one AutotuneError line
        (`source: key.path: problem`) otherwise."""
        try:
            return _META.validate_python(doc)
        except ValidationError as exc:
            raise AutotuneError(f"{source}: {first_problem(exc)}") from None

    def identity_json(self) -> str:
        """What the drafter *is* as sorted JSON (format, kind, geometry, target as the
        file holds them): the model fingerprint of a trained drafter hashes it."""
        return json.dumps(self.model_dump(include={"format", "kind", "geometry", "target"},
                                          exclude_unset=True), sort_keys=True)


class EagleMeta(DrafterMeta):
    kind: Literal["eagle"]
    geometry: EagleGeometry


class MedusaMeta(DrafterMeta):
    kind: Literal["medusa"]
    geometry: MedusaGeometry


class ExitsMeta(DrafterMeta):
    kind: Literal["exits"]
    geometry: ExitsGeometry


_META: TypeAdapter[DrafterMeta] = TypeAdapter(
    Annotated[Union[EagleMeta, MedusaMeta, ExitsMeta], Field(discriminator="kind")])


class DrafterConfig:
    """What `LoadedModel.hf_model.config` answers for a trained drafter (fingerprints,
    provenance records): its description as JSON, its kind as the model type."""

    def __init__(self, meta: DrafterMeta) -> None:
        self.meta = meta
        self.model_type = f"autotune_{meta.kind}"

    def to_json_string(self) -> str:
        return self.meta.identity_json()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_meta(folder: Path) -> DrafterMeta:
    """`folder`'s drafter.json, checked (one AutotuneError line for what does not fit)."""
    path = folder / DRAFTER_FILE
    return DrafterMeta.from_json(read_json(path), str(path))


# ------------------------------------------------------------------ drafters.json

SET_FILE = "drafters.json"
SET_FORMAT = "autotune.drafter-set/v1"
# The `drafter` knob's values besides a category (declared with the config's knobs).
GENERAL, ROUTED = GENERAL_DRAFTER, ROUTED_DRAFTER


class DrafterSetIndex(BaseModel):
    """drafters.json, read: the sub-folder of each member (a category, and `all`)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    format: Literal["autotune.drafter-set/v1"]
    members: dict[str, str]

    @model_validator(mode="after")
    def _general_and_sub_folders(self) -> "DrafterSetIndex":
        if GENERAL not in self.members:
            raise ValueError(f"not a per-category drafter folder ({SET_FORMAT} with an "
                             f"{GENERAL!r} member)")
        for name, sub in self.members.items():
            if Path(sub).is_absolute() or ".." in Path(sub).parts:
                raise ValueError(f"members: member {name!r} must name a sub-folder")
        return self


def read_set_index(folder: Path) -> DrafterSetIndex:
    """`folder`'s drafters.json, checked (one AutotuneError line for what does not fit)."""
    path = folder / SET_FILE
    return parse_record(DrafterSetIndex, read_json(path), str(path))


def is_drafter_set(spec: str | None) -> bool:
    return spec is not None and (Path(spec).expanduser() / SET_FILE).is_file()


def served_method(kind: str) -> str:
    """The method a trained drafter of `kind` drafts for."""
    return SERVES[kind]
