"""What a frozen config records about where its figures were measured: the model and draft
(`model_record`, with a hash of their weights), the hardware and library versions
(`hardware_of`), the command (`command_line`), and what differs from that now
(`describe_environment_change`: why recorded and re-measured figures may disagree).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, TypeVar

from autotune.common.files import write_atomically
from autotune.frozen.record import FrozenConfig, HardwareRecord, ModelRecord

_Part = TypeVar("_Part", ModelRecord, HardwareRecord)

# Weight files whose bytes define a model; hashed in name order.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
_HASH_CHUNK = 1 << 22


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


def model_record(model: Any, spec: str) -> ModelRecord:
    """The `model` (or `draft`) entry for a LoadedModel loaded from `spec`."""
    if model.path.startswith("<memory:"):
        digest = hashlib.sha256(model.hf_model.config.to_json_string().encode()).hexdigest()
        hash_of = "config"
    else:
        digest, hash_of = content_hash(model.path)
    return ModelRecord(id=model.name, spec=spec, path=model.path, sha256=digest,
                       hash_of=hash_of, dtype=str(model.dtype).removeprefix("torch."),
                       n_layers=model.n_layers,
                       model_type=str(getattr(model.hf_model.config, "model_type", "")))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_of(device: Any) -> HardwareRecord:
    """Device, CPU and library versions: what a latency figure depends on."""
    import torch
    import transformers

    cuda = device.type == "cuda"
    return HardwareRecord(
        device=device.type,
        device_name=torch.cuda.get_device_name(device) if cuda else _cpu_model(),
        cpu=_cpu_model(),
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        cuda=torch.version.cuda if cuda else None,
        transformers=transformers.__version__,
        python=platform.python_version())


def hardware_record(device: Any) -> dict[str, Any]:
    """`hardware_of` as JSON, for callers that read it by key (the replay's cost parts
    key); new code reads the record."""
    return hardware_of(device).to_json()


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def describe_environment_change(doc: FrozenConfig | Mapping[str, Any],
                                model: ModelRecord | Mapping[str, Any] | None,
                                hardware: HardwareRecord | Mapping[str, Any] | None, *,
                                draft: ModelRecord | Mapping[str, Any] | None = None,
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
    record = FrozenConfig.of(doc)
    now_model, now_draft = _as(ModelRecord, model), _as(ModelRecord, draft)
    now_hardware = _as(HardwareRecord, hardware)
    notes = []
    recorded = record.model
    if (now_model is not None and recorded is not None and recorded.sha256
            and recorded.sha256 != now_model.sha256):
        notes.append(f"model differs: recorded {recorded.id} ({recorded.sha256[:12]}), now "
                     f"{now_model.id} ({str(now_model.sha256)[:12]})")
    notes.extend(_draft_change(record.draft, now_draft))
    if record.hardware is not None and now_hardware is not None:
        written, current = record.hardware.to_json(), now_hardware.to_json()
        for key in ("device", "device_name", "threads", "torch", "cuda", "transformers"):
            if key in written and written[key] != current.get(key):
                notes.append(f"{key} differs: recorded {written[key]!r}, now "
                             f"{current.get(key)!r}")
    if prompts_sha256 is not None:
        notes.extend(_prompts_change(record, prompts_sha256, prompts_count))
    return notes


def _as(kind: type[_Part], value: _Part | Mapping[str, Any] | None) -> _Part | None:
    """`value` as a `kind` record (a `model_record` / `hardware_record` dict is read)."""
    if value is None or isinstance(value, kind):
        return value
    return kind.model_validate(value)


def _model_label(record: ModelRecord | None) -> str:
    if record is None:
        return "none"
    return f"{record.id} ({record.sha256[:12]})" if record.sha256 else str(record.id)


def _draft_change(recorded: ModelRecord | None, now: ModelRecord | None) -> list[str]:
    """One line when the draft model now is another one (or none) than the recorded:
    a draft's weights set its acceptance, so every speculative figure moves with them."""
    if recorded is None and now is None:
        return []
    if recorded is not None and now is not None:
        if not recorded.sha256 or not now.sha256 or recorded.sha256 == now.sha256:
            return []
    return [f"draft differs: recorded {_model_label(recorded)}, now {_model_label(now)}"]


def _prompts_change(doc: FrozenConfig, sha256: str, count: int | None) -> list[str]:
    """A line when the prompts measured now are not the ones the recorded figures came
    from (`workload.sha256`: the search's prompts; `validation.workload_sha256`: the
    held-out prompts of the validated figure)."""
    workload, validation = doc.workload, doc.validation
    searched = workload.sha256 if workload is not None else None
    validated = validation.workload_sha256 if validation is not None else None
    now = f"{count if count is not None else '?'} prompts ({sha256[:12]})"
    search_part = (f"the recorded metrics from the search's "
                   f"{workload.prompts if workload is not None else '?'} "
                   f"prompts ({searched[:12] if searched else 'no hash recorded'})")
    if validation is None or not validated:
        if not searched or searched == sha256:
            return []
        return [f"prompts differ: {search_part}, now {now}"]
    if sha256 == searched:
        return []                  # the table compares the search's figures on them
    held_out = (f"the validated speedup {validation.speedup_text()} from "
                f"{validation.prompts} held-out prompts "
                f"({validation.source or 'validation'}; {validated[:12]})")
    if sha256 == validated:
        return [f"prompts: measured on the validation prompts; compare speedup with "
                f"{held_out}; {search_part}"]
    return [f"prompts: measured on {now}, neither figure's prompts: {search_part}; "
            f"{held_out}"]


def command_line() -> str:
    """The command that made this process, for provenance."""
    return " ".join([os.path.basename(sys.argv[0]) or "autotune", *sys.argv[1:]])
