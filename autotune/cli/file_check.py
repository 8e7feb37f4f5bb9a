"""`autotune validate FILE`: say whether a frozen config, a search space, an objective
or a plain config file is valid, and exactly what is wrong when it is not.

The kind is read from the content, not the name: a JSON object with
`"schema": "autotune.frozen/..."` is a frozen config; YAML with `knobs`/`include` is a
space, with `metrics` an objective; any other mapping is a plain config of knobs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import display_path
from autotune.schema.config import config_from_mapping
from autotune.frozen.checks import is_frozen, problems
from autotune.frozen.record import FrozenConfig

SPACE_KEYS = ("knobs", "include", "fixed")


@dataclass
class Verdict:
    """What `validate_file` found: the kind of file, and its problems (none = valid)."""

    path: str
    kind: str                 # "frozen config", "search space", "objective", "config"
    problems: list[str]       # one `file[:line]: key: message` line each
    summary: str = ""         # one line describing a valid file


def _read(path: Path) -> Any:
    if not path.is_file():
        raise AutotuneError(f"file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AutotuneError(f"cannot read {path}: {exc}") from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise AutotuneError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise AutotuneError(f"{where}: not valid YAML: {problem}") from None


def validate_file(path_text: str, n_layers: int = 32) -> Verdict:
    """Check one file; raise AutotuneError only when it cannot be read at all."""
    path = Path(path_text)
    data = _read(path)
    # A `params` mapping without a schema is most likely a frozen config that lost
    # (or predates) its schema key: check it as one, which says what is missing.
    if is_frozen(data) or (isinstance(data, dict) and ("schema" in data or "params" in data)):
        found = [_located(path, line) for line in problems(data)]
        return Verdict(str(path), "frozen config", found,
                       "" if found else _frozen_summary(FrozenConfig.from_json(data)))
    if isinstance(data, dict) and any(k in data for k in SPACE_KEYS):
        return _loaded(path, "search space", lambda p: _space_summary(p, n_layers))
    if isinstance(data, dict) and "metrics" in data:
        return _loaded(path, "objective", _objective_summary)
    if isinstance(data, dict):
        return _plain_config(path, data)
    return Verdict(str(path), "unknown", [
        f"{path}: not a frozen config, search space, objective or config: expected a mapping, "
        f"found {type(data).__name__}"])


def _loaded(path: Path, kind: str, summarise: Any) -> Verdict:
    try:
        return Verdict(str(path), kind, [], summarise(path))
    except AutotuneError as exc:
        # The loaders already say `file:line: key: message`.
        return Verdict(str(path), kind, [_located(path, str(exc))])


def _located(path: Path, message: str) -> str:
    """`message` as `file[:line]: ...`, adding the file when the message lacks it."""
    if message.startswith((str(path), display_path(path))):
        return message
    return f"{path}: {message}"


# The space, the objectives and the run folder load optuna, pandas or the measuring code
# (torch): imported only for the kind of file that needs them.
def _space_summary(path: Path, n_layers: int) -> str:
    from autotune.space import load_space
    space = load_space(str(path))
    # Binding checks layer candidates and conditions too; the real model's layer count
    # is checked again when a search binds it.
    try:
        bound = space.bind(n_layers, n_layers)
    except AutotuneError as exc:
        raise AutotuneError(f"{exc} (checked against a {n_layers}-layer model; "
                            "--layers N sets yours)") from None
    names = sorted({row["key"] for row in bound.knobs()})
    return f"{len(bound.knobs())} params over knobs {', '.join(names)}"


def _objective_summary(path: Path) -> str:
    from autotune.search.objectives import load_objective
    objective = load_objective(str(path))
    return (f"{' and '.join(f'{m} ({d})' for m, d in zip(objective.metrics, objective.directions))}"
            + (f", {len(objective.constraints)} constraint(s)" if objective.constraints else ""))


def _plain_config(path: Path, data: dict[str, Any]) -> Verdict:
    from autotune.schema.label import describe
    try:
        config = config_from_mapping(data).validate()
    except AutotuneError as exc:
        return Verdict(str(path), "config", [_located(path, str(exc))])
    return Verdict(str(path), "config", [], describe(config.to_dict()))


def _frozen_summary(record: FrozenConfig) -> str:
    """A checked frozen config in one line: its config, search figures and model."""
    from autotune.schema.label import describe
    parts = [describe(record.config.to_dict())]
    metrics = record.metrics
    if metrics is not None and metrics.latency_ms_per_token is not None:
        parts.append(f"{metrics.latency_ms_per_token:.2f} ms/token")
    if metrics is not None and metrics.speedup is not None:
        parts.append(f"{metrics.speedup:.3f}x AR")
    if record.model is not None and record.model.id:
        parts.append(f"on {record.model.id}")
    return ", ".join(parts)
