"""Reading a frozen config: the one reader of the format.

`problems` lists everything wrong with a document (for `autotune validate`), `load_frozen`
reads and checks a file (for measure / generate / export), and `read_parts` gives the
validated knobs and model records that consumers such as the exporters act on. The
structure is checked by the version's JSON Schema (`autotune.frozen.schema`), the meaning
of the knobs by `DecodeConfig.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from autotune.common.errors import AutotuneError
from autotune.common.files import read_json
from autotune.common.yaml_source import did_you_mean
from autotune.schema.config import DecodeConfig
from autotune.schema.engines import retirement
from autotune.schema.methods import find_method
from autotune.frozen.engines import engine_answers
from autotune.frozen.record import FrozenConfig, ModelRecord
from autotune.frozen.schedule import Schedule, read_schedule
from autotune.frozen.schema import READABLE, SCHEMA, SCHEMA_PREFIX, validation_schema


@dataclass(frozen=True)
class FrozenParts:
    """What consumers act on in a frozen config: its knobs, validated for meaning, and the
    records of the models they were tuned on (None when not recorded)."""

    config: DecodeConfig
    model: ModelRecord | None
    draft: ModelRecord | None
    # The per-batch-size K of the config's method (v3's optional `schedule`); None: the
    # config was tuned at batch size 1 only.
    schedule: Schedule | None = None


def _version_problem(doc: Mapping[str, Any]) -> str | None:
    """A different version of this format (a newer autotune's file): one line saying so."""
    version = doc.get("schema")
    if isinstance(version, str) and version.startswith(SCHEMA_PREFIX) and version not in READABLE:
        return (f"schema: {version!r} is not supported by this autotune (reads "
                f"{', '.join(map(repr, READABLE))})")
    return None


def read_parts(doc: FrozenConfig | Mapping[str, Any]) -> FrozenParts:
    """The knobs and model records of a frozen config (a record, or a document of any
    readable version), or an AutotuneError naming the first problem in one
    `key: message` line.

    Checks the structure consumers rely on (`FrozenConfig`) and the knobs' meaning:
    `DecodeConfig.validate` against the layers of the stack the method's layer keys index
    (the method registry's rule), a recorded draft when the method needs one, and the
    `schedule`'s ranges when there is one (`read_schedule`). The full structural check
    of every field is the JSON Schema's (`problems`)."""
    record = FrozenConfig.of(doc)
    config, model, draft = record.config, record.model, record.draft
    try:
        spec = find_method(config.method)  # None: validate says the method is unknown
        # Layer keys are checked against the stack they index (exits: the draft's when
        # sorted_exit runs over one); None skips the check, e.g. a method without any.
        role = spec.stack_role(draft is not None) if spec is not None else None
        stack = draft if role == "draft" else model if role == "target" else None
        config.validate(n_layers=stack.n_layers if stack is not None else None)
    except AutotuneError as exc:
        raise AutotuneError(f"params: {exc}") from None
    if spec is not None and spec.needs_draft and draft is None:
        raise AutotuneError(f"draft: method={config.method} needs the draft model recorded "
                            "under 'draft'")
    return FrozenParts(config, model, draft, read_schedule(record.schedule, config.method))


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
    # A retired engine is no longer in the schema's enum: name the retirement and the
    # replacement rather than list the engines it is not one of.
    params = doc.get("params")
    if isinstance(params, dict) and (retired := retirement(params.get("engine"))):
        return [f"params.engine: {retired}"]
    validator = jsonschema.Draft202012Validator(
        validation_schema(version if version in READABLE else SCHEMA))
    found = []
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path))):
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        found.append(f"{where}: {_schema_message(error)}")
    if found:
        return found
    for where, part in (("", doc), *((f"engines.{name}.", answer)
                                     for name, answer in engine_answers(doc).items())):
        try:
            read_parts(part)
        except AutotuneError as exc:
            return [f"{where}{exc}"]
    return []


def _schema_message(error: Any) -> str:
    """jsonschema's message, with a did-you-mean for an unknown knob."""
    if (error.validator == "additionalProperties"
            and list(error.path) in ([], ["params"], ["schedule"])):
        allowed = list(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        hints = [f"{key!r}{did_you_mean(key, allowed, inline=True)}" for key in unknown]
        return f"unknown key {', '.join(hints)}"
    if error.validator == "not" and list(error.path)[:1] == ["engines"]:
        return "an engine's answer holds no `engines` of its own"
    if error.validator == "enum":
        return f"{error.instance!r} is not one of {', '.join(map(repr, error.validator_value))}"
    return error.message


def is_frozen(data: Any) -> bool:
    """Whether `data` claims to be a frozen config (any version): a JSON object whose
    `schema` is `autotune.frozen/...`."""
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


def load_frozen_config(path: str | Path) -> FrozenConfig:
    """Read, check (the version's JSON Schema and the knobs' meaning, as `autotune
    validate` does) and upgrade a frozen config file into its record; one line naming its
    first problem otherwise. Here, not in `record.py`: the record reads a document, the
    checks read a file (so the record imports no checks)."""
    return FrozenConfig.from_json(load_frozen(path))
