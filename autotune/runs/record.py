"""run.json as a typed record: what one `autotune search` run is.

- `StudyIdentity`: what makes two runs the same experiment (space, objective, models,
  workload, each with its hash). It is stored in the study's user attributes, and a
  resumed study must match it field for field (`StudyRunner` checks).
- `FrozenContext`: what every frozen config of the run records besides its params
  (model and draft, hardware, workload, provenance): run.json's `frozen`, handed to the
  run-folder writers and the exporters.
- `RunRecord`: run.json itself: the run's settings, its identity and its frozen context.

`to_json()` gives the exact dicts the files hold (same keys, same order as they always
had), so readers of run.json (report, measure, exports) see no difference. Torch-free:
the model and hardware entries are built by `autotune.frozen` (as records, or as the
dicts `model_record` / `hardware_record` give, read into records).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from autotune.frozen import record as frozen_record

__all__ = ["FileRecord", "FrozenContext", "Provenance", "RunRecord", "StudyIdentity",
           "WorkloadRecord"]


@dataclass(frozen=True)
class StudyIdentity:
    """The study's defining attributes; every field must match on resume."""

    space: str
    space_sha256: str
    objective: str
    objective_sha256: str
    model: str                        # the target's id
    draft: str | None                 # the draft model's id
    device_type: str                  # "cpu" / "cuda"
    dtype: str                        # "float32", "bfloat16", ...
    workload: str                     # --workload as given
    categories: list[str] | None
    prompts: int                      # prompts loaded
    workload_sha256: str              # over the loaded prompts (id, category, text)
    max_new_tokens: int
    temperature: float
    top_p: float
    engine: str = "autotune"          # --target: whose rules every trial is measured under
    bit_params: str = "categorical"   # how a layer set's bits are suggested (`BIT_PARAMS`)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# run.json's `frozen` entry and its parts are best.json's records (`autotune.frozen.record`),
# under the names this module has always given them.
WorkloadRecord = frozen_record.WorkloadRecord     # the workload a frozen config was tuned on
Provenance = frozen_record.ProvenanceRecord       # how the run was made (its settings' part)
FrozenContext = frozen_record.FrozenContext       # what every frozen config of the run records


class FileRecord(frozen_record.FileRef):
    """A space or objective file: its name, where it was read and its hash (all given,
    in that order)."""

    def __init__(self, name: str, file: str, sha256: str) -> None:
        super().__init__(name=name, file=file, sha256=sha256)


@dataclass(frozen=True)
class RunRecord:
    """run.json: written when the study has accepted the run, rewritten on resume."""

    study: str
    storage: str                      # masked: no password
    run_dir: str
    sampler: str
    seed: int
    trials: int
    prune: bool
    space_file: str
    objective_file: str
    model_spec: str                   # --model as given
    draft_spec: str | None            # --draft as given
    autotune_version: str
    updated: str                      # ISO time, UTC, seconds
    argv: list[str]
    identity: StudyIdentity           # flattened into the top level of run.json
    n_layers: int                     # the target's decoder layers
    frozen: FrozenContext

    def to_json(self) -> dict[str, Any]:
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("identity", "n_layers", "frozen")}
        return {**own, "argv": list(self.argv), **self.identity.to_json(),
                "n_layers": self.n_layers, "frozen": self.frozen.to_json()}
