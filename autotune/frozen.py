"""FrozenConfig: the versioned JSON document (`autotune.frozen/v3`; v1 and v2 still read) a search leaves behind.

It carries the canonical knobs (`params`), what was measured (`metrics`), on what
(`model`, `draft`, `hardware`, `workload`) and by which run (`provenance`), so that
`autotune measure --config`, `generate` and `export` can consume it and a reader can
tell whether a re-measurement is comparable. The structure is checked by the JSON
Schema in `autotune/schemas/frozen-v3.schema.json` (v1, v2: frozen-v1, frozen-v2); the meaning of the knobs by
`DecodeConfig.validate`.

This module is the one reader of the format: its schema id, `problems` (everything wrong,
for `autotune validate`), `load_frozen` (a file, for measure / generate / export) and
`read_parts` (the validated knobs and model records that consumers such as the exporters
act on).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.resources import files
from pathlib import Path
from typing import Any, Mapping

from autotune import __version__
from autotune.common.errors import AutotuneError
from autotune.common.files import write_atomically
from autotune.common.yaml_source import did_you_mean
from autotune.decoding.config import DecodeConfig, config_from_mapping
from autotune.decoding.methods import find_method, method_names

SCHEMA = "autotune.frozen/v3"
SCHEMA_PREFIX = "autotune.frozen/"
# Every version this autotune reads, with its JSON Schema file. v2 added `validation`
# (the finalists re-measured on held-out prompts); v3 added the `engine` knob (whose
# drafting rules the figures were measured under; absent = autotune's own, as every
# older file was measured) and, additively, the optional `schedule` (K per batch size,
# issue 17). Older files read as they always did.
_SCHEMA_FILES = {"autotune.frozen/v1": "schemas/frozen-v1.schema.json",
                 "autotune.frozen/v2": "schemas/frozen-v2.schema.json",
                 SCHEMA: "schemas/frozen-v3.schema.json"}
READABLE = tuple(_SCHEMA_FILES)
# Weight files whose bytes define a model; hashed in name order.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
_HASH_CHUNK = 1 << 22


def shipped_schema(version: str = SCHEMA) -> dict[str, Any]:
    """The JSON Schema file of `version` as shipped: its `params.method` enum lists the
    built-in methods, so a reader without autotune sees a complete schema."""
    return json.loads(files("autotune").joinpath(_SCHEMA_FILES[version]).read_text())


def _schema(version: str = SCHEMA) -> dict[str, Any]:
    """The schema documents are checked against: the shipped file with its method enum
    read from the registry, so a method registered at run time (a plug-in, a test's toy
    drafter) validates too. The file itself never changes."""
    schema = shipped_schema(version)
    schema["properties"]["params"]["properties"]["method"]["enum"] = list(method_names())
    return schema


# ------------------------------------------------------------------ records
def _hash_cache_file() -> Path:
    from autotune.models.loading import cache_root
    return cache_root() / "weight-hashes.json"


def _hash_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as fh:
            while chunk := fh.read(_HASH_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def content_hash(model_path: str) -> tuple[str, str]:
    """(sha256, what was hashed) for a model folder: its weight files' bytes, or, when
    there are none on disk (an in-memory model), its config.

    Hashing half a gigabyte takes about a second, so the result is cached by path,
    size and modification time (a changed file is hashed again).
    """
    folder = Path(model_path)
    weights = sorted(p for p in folder.iterdir() if p.suffix in _WEIGHT_SUFFIXES) \
        if folder.is_dir() else ([folder] if folder.suffix in _WEIGHT_SUFFIXES
                                 and folder.is_file() else [])
    if not weights:
        config = folder / "config.json"
        data = config.read_bytes() if config.is_file() else model_path.encode()
        return hashlib.sha256(data).hexdigest(), "config"
    key = json.dumps([[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns]
                      for p in weights])
    cache_file = _hash_cache_file()
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    if key not in cache:
        cache[key] = _hash_files(weights)
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(cache_file, json.dumps(cache, indent=1))
        except OSError:
            pass                      # a read-only cache only costs a re-hash next time
    return cache[key], "weights"


def model_record(model: Any, spec: str) -> dict[str, Any]:
    """The `model` (or `draft`) entry for a LoadedModel loaded from `spec`."""
    if model.path.startswith("<memory:"):
        digest = hashlib.sha256(model.hf_model.config.to_json_string().encode()).hexdigest()
        hash_of = "config"
    else:
        digest, hash_of = content_hash(model.path)
    return {"id": model.name, "spec": spec, "path": model.path, "sha256": digest,
            "hash_of": hash_of, "dtype": str(model.dtype).removeprefix("torch."),
            "n_layers": model.n_layers,
            "model_type": str(getattr(model.hf_model.config, "model_type", ""))}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_record(device: Any) -> dict[str, Any]:
    """Device, CPU and library versions: what a latency figure depends on."""
    import torch
    import transformers

    cuda = device.type == "cuda"
    return {
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else _cpu_model(),
        "cpu": _cpu_model(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def frozen_document(params: Mapping[str, Any], *, metrics: Mapping[str, Any] | None = None,
                    objective: Mapping[str, Any] | None = None,
                    context: Mapping[str, Any] | None = None,
                    trial: Mapping[str, Any] | None = None,
                    pareto_front: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Assemble a document of the current version. `context` is a run's record (run.json's `frozen`
    entry: model, draft, hardware, workload, provenance); `trial` adds the trial's
    number, preset and label to the provenance."""
    context = context or {}
    doc: dict[str, Any] = {"schema": SCHEMA,
                           "params": config_from_mapping(params).to_dict(),
                           "metrics": _json_safe(dict(metrics or {}))}
    if objective is not None:
        doc["objective"] = dict(objective)
    for key in ("model", "draft", "hardware", "workload"):
        if key in context:
            doc[key] = context[key]
    provenance = {"autotune_version": __version__, "created": now(),
                  **dict(context.get("provenance", {}))}
    if trial is not None:
        provenance.update({k: trial[k] for k in ("trial", "preset", "label", "optuna_params")
                           if k in trial})
    doc["provenance"] = provenance
    if pareto_front is not None:
        doc["pareto_front"] = _json_safe(pareto_front)
    return doc


def _json_safe(value: Any) -> Any:
    """Plain JSON values: tuples become lists, NaN/inf become null (strict JSON has
    neither), anything else unknown its string."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


# --------------------------------------------------------------- validation
@dataclass(frozen=True)
class FrozenParts:
    """What consumers act on in a frozen config: its knobs, validated for meaning, and the
    records of the models they were tuned on (None when not recorded)."""

    config: DecodeConfig
    model: Mapping[str, Any] | None
    draft: Mapping[str, Any] | None
    # The per-batch-size K of the config's method (v3's optional `schedule`); None: the
    # config was tuned at batch size 1 only.
    schedule: Schedule | None = None


@dataclass(frozen=True)
class ScheduleRange:
    """Batch sizes `start`..`end` (inclusive) run `k` draft tokens per round (0: no
    speculation there)."""

    start: int
    end: int
    k: int

    def span(self) -> str:
        """`1` or `2-3`."""
        return str(self.start) if self.start == self.end else f"{self.start}-{self.end}"

    def label(self) -> str:
        """`1: K=4` or `2-3: K=3`."""
        return f"{self.span()}: K={self.k}"


@dataclass(frozen=True)
class Schedule:
    """A frozen config's `schedule` (issue 17): which K its method runs at each batch size.

    `ranges` are sorted, contiguous and start at batch size 1; the last one ends at the
    largest tuned batch size (`largest`), beyond which nothing was measured. `points`
    (every measured batch size and K) stay in the document: exporters need only these."""

    method: str
    batch_sizes: tuple[int, ...]
    ranges: tuple[ScheduleRange, ...]
    objective: str | None = None

    @property
    def max_k(self) -> int:
        """The largest K of any range: what an engine must size its buffers for."""
        return max(r.k for r in self.ranges)

    @property
    def largest(self) -> int:
        """The largest tuned batch size (the last range's end)."""
        return self.ranges[-1].end

    def describe(self) -> str:
        """`1: K=4, 2-3: K=3, 4-8: K=0`."""
        return ", ".join(r.label() for r in self.ranges)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _schedule_ranges(raw: Any) -> tuple[ScheduleRange, ...]:
    """`schedule.ranges` as ScheduleRanges, or the first problem (sorted, contiguous,
    starting at 1: every batch size up to the last end has exactly one K)."""
    if not isinstance(raw, list) or not raw:
        raise AutotuneError("schedule.ranges: must be a non-empty list of {start, end, k}")
    ranges = []
    for i, item in enumerate(raw):
        where = f"schedule.ranges.{i}"
        if not isinstance(item, Mapping) or not all(_is_int(item.get(key))
                                                    for key in ("start", "end", "k")):
            raise AutotuneError(f"{where}: needs integer start, end and k")
        r = ScheduleRange(item["start"], item["end"], item["k"])
        if r.start < 1 or r.end < r.start or r.k < 0:
            raise AutotuneError(f"{where}: needs 1 <= start <= end and k >= 0, got "
                                f"start={r.start}, end={r.end}, k={r.k}")
        expected = ranges[-1].end + 1 if ranges else 1
        if r.start != expected:
            raise AutotuneError(
                f"{where}: starts at {r.start}, not {expected} (ranges must be sorted and "
                "contiguous, the first starting at batch size 1)")
        ranges.append(r)
    return tuple(ranges)


def read_schedule(doc: Mapping[str, Any], method: str | None = None) -> Schedule | None:
    """The document's `schedule`, None when it has none, or an AutotuneError naming its
    first problem in one `schedule.key: message` line. The JSON Schema checks the
    structure; this checks what it cannot: the ranges tile 1..largest tuned batch size,
    each later range starts at a tuned batch size (a range runs from one to the next
    minus 1), and a schedule that speculates is for the config's own `method` when one
    is given."""
    raw = doc.get("schedule")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise AutotuneError("schedule: must be a mapping")
    ranges = _schedule_ranges(raw.get("ranges"))
    sizes = raw.get("batch_sizes")
    if (not isinstance(sizes, list) or not sizes
            or not all(_is_int(b) and b >= 1 for b in sizes)):
        raise AutotuneError("schedule.batch_sizes: must be a non-empty list of the tuned "
                            "batch sizes (integers >= 1)")
    tuned = tuple(sorted(set(sizes)))
    # The first range starts at 1 whatever the smallest tuned size (its K covers the
    # sizes below it); every later one at a tuned size.
    for i, r in enumerate(ranges[1:], start=1):
        if r.start not in tuned:
            raise AutotuneError(f"schedule.ranges.{i}: starts at {r.start}, which is not a "
                                f"tuned batch size ({', '.join(map(str, tuned))})")
    if ranges[-1].end != tuned[-1]:
        raise AutotuneError(f"schedule.ranges.{len(ranges) - 1}: ends at {ranges[-1].end}, "
                            f"not at the largest tuned batch size {tuned[-1]} (nothing "
                            "beyond it was measured)")
    owner = raw.get("method")
    if not isinstance(owner, str):
        raise AutotuneError("schedule.method: must name the method the schedule is for")
    # A schedule that never speculates says so whatever its method (the search writes
    # method "none" when the batch-1 answer is not to speculate).
    if method is not None and owner != method and any(r.k for r in ranges):
        raise AutotuneError(f"schedule.method: {owner!r} is not the config's method "
                            f"{method!r} (the schedule sets K for the params' method)")
    objective = raw.get("objective")
    return Schedule(owner, tuned, ranges, objective if isinstance(objective, str) else None)


def _version_problem(doc: Mapping[str, Any]) -> str | None:
    """A different version of this format (a newer autotune's file): one line saying so."""
    version = doc.get("schema")
    if isinstance(version, str) and version.startswith(SCHEMA_PREFIX) and version not in READABLE:
        return (f"schema: {version!r} is not supported by this autotune (reads "
                f"{', '.join(map(repr, READABLE))})")
    return None


def _n_layers(record: Mapping[str, Any] | None) -> int | None:
    value = (record or {}).get("n_layers")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_parts(doc: Any) -> FrozenParts:
    """The knobs and model records of a frozen document, or an AutotuneError naming the
    first problem in one `key: message` line.

    Checks the structure consumers rely on (a mapping of this version, with a `params`
    mapping; `model` and `draft` mappings when present) and the knobs' meaning:
    `DecodeConfig.validate` against the layers of the stack the method's layer keys index
    (the method registry's rule), a recorded draft when the method needs one, and the
    `schedule`'s ranges when there is one (`read_schedule`). The full structural check
    of every field is the JSON Schema's (`problems`)."""
    if not isinstance(doc, Mapping):
        raise AutotuneError("a frozen config must be a mapping (the contents of best.json)")
    version = doc.get("schema", SCHEMA)
    if version not in READABLE:
        raise AutotuneError(_version_problem(doc)
                            or f"schema: {version!r} is not one of {', '.join(READABLE)}")
    params, model, draft = doc.get("params"), doc.get("model"), doc.get("draft")
    if not isinstance(params, Mapping):
        raise AutotuneError("frozen config has no 'params' mapping")
    if model is not None and not isinstance(model, Mapping):
        raise AutotuneError("frozen config's 'model' must be a mapping")
    if draft is not None and not isinstance(draft, Mapping):
        raise AutotuneError("frozen config's 'draft' must be a mapping or null")
    draft = draft or None                  # an empty record names no draft model
    try:
        config = config_from_mapping(params)
        spec = find_method(config.method)  # None: validate says the method is unknown
        # Layer keys are checked against the stack they index (exits: the draft's when
        # sorted_exit runs over one); None skips the check, e.g. a method without any.
        role = spec.stack_role(draft is not None) if spec is not None else None
        stack = draft if role == "draft" else model if role == "target" else None
        config.validate(n_layers=_n_layers(stack))
    except AutotuneError as exc:
        raise AutotuneError(f"params: {exc}") from None
    if spec is not None and spec.needs_draft and draft is None:
        raise AutotuneError(f"draft: method={config.method} needs the draft model recorded "
                            "under 'draft'")
    return FrozenParts(config, model, draft, read_schedule(doc, config.method))


def problems(doc: Any) -> list[str]:
    """Everything wrong with a document, one `key.path: message` line each (empty if
    it is valid). Structure first (the JSON Schema); then, if that holds, the knobs'
    meaning (`read_parts`)."""
    import jsonschema  # ~90 ms, and only validation needs it (not the report)

    if not isinstance(doc, dict):
        return ["a frozen config must be a JSON object"]
    version = _version_problem(doc)
    if version is not None:
        return [version]
    version = doc.get("schema")
    validator = jsonschema.Draft202012Validator(
        _schema(version if version in READABLE else SCHEMA))
    found = []
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path))):
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        found.append(f"{where}: {_schema_message(error)}")
    if found:
        return found
    try:
        read_parts(doc)
    except AutotuneError as exc:
        return [str(exc)]
    return []


def _schema_message(error: Any) -> str:
    """jsonschema's message, with a did-you-mean for an unknown knob."""
    if (error.validator == "additionalProperties"
            and list(error.path) in ([], ["params"], ["schedule"])):
        allowed = list(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        hints = [f"{key!r}{did_you_mean(key, allowed, inline=True)}" for key in unknown]
        return f"unknown key {', '.join(hints)}"
    if error.validator == "enum":
        return f"{error.instance!r} is not one of {', '.join(map(repr, error.validator_value))}"
    return error.message


def read_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise AutotuneError(f"file not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise AutotuneError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise AutotuneError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None


def is_frozen(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("schema", "")).startswith(SCHEMA_PREFIX)


def load_frozen(path: str | Path) -> dict[str, Any]:
    """Read and validate a frozen config; one line naming the first problem otherwise."""
    doc = read_json(path)
    if not is_frozen(doc):
        raise AutotuneError(f"{path}: not a frozen config (no \"schema\": \"{SCHEMA}\")")
    found = problems(doc)
    if found:
        more = f" (and {len(found) - 1} more; run autotune validate {path})" if len(found) > 1 else ""
        raise AutotuneError(f"{path}: {found[0]}{more}")
    return doc


def describe_environment_change(doc: Mapping[str, Any], model: Mapping[str, Any] | None,
                                hardware: Mapping[str, Any] | None, *,
                                draft: Mapping[str, Any] | None = None,
                                prompts_sha256: str | None = None,
                                prompts_count: int | None = None) -> list[str]:
    """Lines saying what differs between the recorded run and now (model and draft
    weights, device, library versions, prompts): why recorded and measured figures may
    disagree.

    `model`, `draft`: `model_record`s of what runs now (`draft` None: no draft model now);
    `prompts_sha256`, `prompts_count`: `workload_digest` and number of the prompts
    measured now (None: not compared). A search records the hash of its search prompts;
    a config validated on held-out prompts (`validation`) was judged on others, so a
    re-measurement on other prompts is expected there and the line says which prompts
    each recorded figure came from."""
    notes = []
    recorded_model = doc.get("model") or {}
    if model and recorded_model.get("sha256") and recorded_model["sha256"] != model.get("sha256"):
        notes.append(f"model differs: recorded {recorded_model.get('id')} "
                     f"({recorded_model['sha256'][:12]}), now {model.get('id')} "
                     f"({str(model.get('sha256'))[:12]})")
    notes.extend(_draft_change(doc.get("draft") or None, draft))
    recorded_hw = doc.get("hardware") or {}
    for key in ("device", "device_name", "threads", "torch", "cuda", "transformers"):
        if hardware and key in recorded_hw and recorded_hw[key] != hardware.get(key):
            notes.append(f"{key} differs: recorded {recorded_hw[key]!r}, now {hardware.get(key)!r}")
    if prompts_sha256 is not None:
        notes.extend(_prompts_change(doc, prompts_sha256, prompts_count))
    return notes


def _model_label(record: Mapping[str, Any] | None) -> str:
    if not record:
        return "none"
    digest = record.get("sha256")
    return f"{record.get('id')} ({str(digest)[:12]})" if digest else str(record.get("id"))


def _draft_change(recorded: Mapping[str, Any] | None, now: Mapping[str, Any] | None
                  ) -> list[str]:
    """One line when the draft model now is another one (or none) than the recorded:
    a draft's weights set its acceptance, so every speculative figure moves with them."""
    if recorded is None and now is None:
        return []
    if recorded is not None and now is not None:
        old, new = recorded.get("sha256"), now.get("sha256")
        if not old or not new or old == new:
            return []
    return [f"draft differs: recorded {_model_label(recorded)}, now {_model_label(now)}"]


def _speedup_text(figures: Mapping[str, Any]) -> str:
    value, ci = figures.get("speedup"), figures.get("ci90")
    text = f"{value:.3f}x" if isinstance(value, (int, float)) else "-"
    if isinstance(ci, list) and len(ci) == 2:
        text += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    return text


def _prompts_change(doc: Mapping[str, Any], sha256: str, count: int | None) -> list[str]:
    """A line when the prompts measured now are not the ones the recorded figures came
    from (`workload.sha256`: the search's prompts; `validation.workload_sha256`: the
    held-out prompts of the validated figure)."""
    workload = doc.get("workload") or {}
    searched = workload.get("sha256")
    validation = doc.get("validation") or {}
    validated = validation.get("workload_sha256")
    now = f"{count if count is not None else '?'} prompts ({sha256[:12]})"
    search_part = (f"the recorded metrics from the search's {workload.get('prompts', '?')} "
                   f"prompts ({searched[:12] if searched else 'no hash recorded'})")
    if not validated:
        if not searched or searched == sha256:
            return []
        return [f"prompts differ: {search_part}, now {now}"]
    if sha256 == searched:
        return []                  # the table compares the search's figures on them
    held_out = (f"the validated speedup {_speedup_text(validation)} from "
                f"{validation.get('prompts', '?')} held-out prompts "
                f"({validation.get('source') or 'validation'}; {validated[:12]})")
    if sha256 == validated:
        return [f"prompts: measured on the validation prompts; compare speedup with "
                f"{held_out}; {search_part}"]
    return [f"prompts: measured on {now}, neither figure's prompts: {search_part}; "
            f"{held_out}"]


def command_line() -> str:
    """The command that made this process, for provenance."""
    return " ".join([os.path.basename(sys.argv[0]) or "autotune", *sys.argv[1:]])
