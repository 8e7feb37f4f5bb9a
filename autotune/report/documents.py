"""The run folder's documents as the report reads them: run.json (`RunFacts`) and
best.json (`FrozenConfig`, the frozen config's own record), read leniently.

The report never fails on a document it can do without: best.json is rebuilt from the
study, and run.json only names things. So where `FrozenConfig.from_json` (the run's own
reader) refuses a whole file for one bad key, the report keeps every top-level part that
reads and leaves the others out (`readable_parts`): a hand-edited `schedule` costs the
batch-size panel its figures (read apart, item by item, by `report.schedule`), never
the header its model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import ConfigDict, ValidationError

from autotune.common.errors import AutotuneError
from autotune.common.records import JsonRecord
from autotune.frozen.record import FrozenConfig, upgrade

__all__ = ["RunFacts", "best_record", "readable_parts"]

Part = TypeVar("Part", bound=JsonRecord)


class RunFacts(JsonRecord):
    """run.json as the report reads it (`pipeline.record.write_run_record` writes it):
    the facts it names by key; the rest (the search's settings, the workload's) kept as
    written for the header's tables (`to_json`). Strict: a value of another type (a
    hand-edited file's) reads as absent, as the report always took it."""

    model_config = ConfigDict(strict=True)

    study: str | None = None
    storage: str | None = None
    objective: str | None = None
    objective_file: str | None = None
    prompts: int | None = None
    model: str | None = None
    model_spec: str | None = None
    draft: str | None = None
    dtype: str | None = None
    device_type: str | None = None
    workload: str | None = None
    n_layers: int | None = None

    @classmethod
    def read(cls, doc: Mapping[str, Any] | None) -> RunFacts:
        """run.json's parsed content (None: no run.json) with its readable keys."""
        return readable_parts(cls, doc or {})


def readable_parts(model: type[Part], doc: Mapping[str, Any]) -> Part:
    """`doc` as a `model` record, less the top-level keys whose value does not read (each
    left out as if absent)."""
    doc = dict(doc)
    while True:
        try:
            return model.model_validate(doc)
        except ValidationError as exc:
            bad = {error["loc"][0] for error in exc.errors() if error["loc"]}
            if not bad & doc.keys():
                raise AutotuneError(f"cannot read the document as {model.__name__}") from None
            for key in bad:
                doc.pop(str(key), None)


def best_record(doc: Mapping[str, Any] | None) -> FrozenConfig:
    """best.json's parsed content as its record (any readable version, upgraded), with
    the parts that read; an empty record without one, or for a version this autotune
    does not read."""
    if not doc:
        return FrozenConfig()
    try:
        return readable_parts(FrozenConfig, upgrade(doc))
    except AutotuneError:
        return FrozenConfig()
