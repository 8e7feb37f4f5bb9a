"""DecodeConfig: the canonical knobs of one speculative-decoding candidate.

Parsing (`key=value` strings, JSON/YAML files) and validation live here, so the CLI,
the search and exported configs all agree on names, types and defaults.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from autotune.errors import AutotuneError

METHODS = ("none", "draft_model", "layer_skip", "sorted_exit", "ngram")
EXIT_POLICIES = ("fixed", "confidence", "adaptive", "heuristic")
# Methods that read or skip individual layers and so need the compact Llama forward.
LAYER_METHODS = frozenset({"layer_skip", "sorted_exit"})


@dataclass(frozen=True)
class DecodeConfig:
    """One candidate: every knob of the decoder, with canonical names.

    Knobs a method does not use are ignored by it (e.g. `exits` under `layer_skip`), so
    one flat record serves every method. The adaptive-rule defaults (γ0 0.6, α 0.85,
    ε 0.01, β1 0.5, β2 0.9) are our starting point, not values a paper prescribes.
    """

    method: str = "none"
    k: int = 4                               # most draft tokens per round (policy cap)
    attn_skip: tuple[int, ...] = ()          # layers whose attention the draft skips
    mlp_skip: tuple[int, ...] = ()           # layers whose MLP the draft skips
    exits: tuple[int, ...] = ()              # S2D exit depths n1 < ... < nm (layers run)
    thresholds: tuple[float, ...] = ()       # S2D top-1 thresholds per exit (deepest ignored)
    exit_policy: str = "fixed"
    gamma: float = 0.6                       # confidence threshold; γ0 for adaptive
    target_acceptance: float = 0.85          # α of Draft & Verify's adaptive rule
    epsilon: float = 0.01                    # ε: step of γ per round
    beta1: float = 0.5                       # β1: smoothing of the acceptance rate
    beta2: float = 0.9                       # β2: smoothing of γ
    ngram_min: int = 1
    ngram_max: int = 3
    temperature: float = 0.0                 # 0 = greedy
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        """Canonical keys and JSON-ready values (lists for sets)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def validate(self, n_layers: int | None = None) -> "DecodeConfig":
        """Raise AutotuneError on the first bad value; `n_layers` enables layer checks."""
        if self.method not in METHODS:
            raise AutotuneError(f"method={self.method!r} is not one of {', '.join(METHODS)}")
        if self.exit_policy not in EXIT_POLICIES:
            raise AutotuneError(
                f"exit_policy={self.exit_policy!r} is not one of {', '.join(EXIT_POLICIES)}")
        if self.k < 1:
            raise AutotuneError(f"k={self.k} must be at least 1")
        for name in ("gamma", "target_acceptance", "beta1", "beta2", "top_p"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise AutotuneError(f"{name}={value} must lie in [0, 1]")
        if self.top_p == 0.0:
            raise AutotuneError("top_p=0 keeps no token; use temperature=0 for greedy")
        if not 0.0 <= self.epsilon <= 1.0:
            raise AutotuneError(f"epsilon={self.epsilon} must lie in [0, 1]")
        if self.temperature < 0.0:
            raise AutotuneError(f"temperature={self.temperature} must be >= 0")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise AutotuneError(
                f"ngram_min={self.ngram_min}, ngram_max={self.ngram_max}: need 1 <= min <= max")
        if self.method == "sorted_exit":
            if not self.exits:
                raise AutotuneError("method=sorted_exit needs exits, e.g. exits=8,16")
            if any(b <= a for a, b in zip(self.exits, self.exits[1:])) or self.exits[0] < 1:
                raise AutotuneError(f"exits={list(self.exits)} must be increasing and >= 1")
            if len(self.thresholds) not in (0, len(self.exits) - 1, len(self.exits)):
                raise AutotuneError(
                    f"thresholds has {len(self.thresholds)} values for {len(self.exits)} "
                    "exits: give one per exit (the deepest always emits)")
            if any(not 0.0 <= t <= 1.0 for t in self.thresholds):
                raise AutotuneError(f"thresholds={list(self.thresholds)} must lie in [0, 1]")
        if n_layers is not None:
            for name in ("attn_skip", "mlp_skip"):
                bad = [i for i in getattr(self, name) if not 0 <= i < n_layers]
                if bad:
                    raise AutotuneError(
                        f"{name} has layer(s) {bad} outside 0..{n_layers - 1} of this model")
            if self.exits and self.exits[-1] > n_layers:
                raise AutotuneError(
                    f"exits={list(self.exits)} goes past the draft stack's {n_layers} layers")
        return self

    def exit_thresholds(self) -> tuple[float, ...]:
        """One threshold per exit; missing entries are 0 (always emit), deepest ignored."""
        padded = tuple(self.thresholds) + (0.0,) * (len(self.exits) - len(self.thresholds))
        return padded[: len(self.exits)]


_FIELDS = {f.name: f for f in dataclasses.fields(DecodeConfig)}
_INT_LISTS = {"attn_skip", "mlp_skip", "exits"}
_FLOAT_LISTS = {"thresholds"}
_INTS = {"k", "ngram_min", "ngram_max"}
_STRS = {"method", "exit_policy"}


def _unknown_key(key: str) -> AutotuneError:
    close = difflib.get_close_matches(key, list(_FIELDS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return AutotuneError(f"unknown config key {key!r}{hint}; keys: {', '.join(_FIELDS)}")


def _coerce(key: str, value: Any) -> Any:
    """Turn a CLI string or a file value into the field's type, or raise one clear line."""
    try:
        if key in _INT_LISTS or key in _FLOAT_LISTS:
            cast = int if key in _INT_LISTS else float
            if isinstance(value, str):
                items = [v for v in value.replace(" ", "").split(",") if v != ""]
            elif isinstance(value, (list, tuple)):
                items = list(value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                items = [value]
            else:
                raise ValueError
            if cast is int and any(isinstance(v, float) and not v.is_integer() for v in items):
                raise ValueError
            values = tuple(cast(v) for v in items)
            return tuple(sorted(set(values))) if key in {"attn_skip", "mlp_skip"} else values
        if key in _INTS:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if key in _STRS:
            if not isinstance(value, str):
                raise ValueError
            return value.strip()
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        kind = ("a comma-separated list of integers" if key in _INT_LISTS else
                "a comma-separated list of numbers" if key in _FLOAT_LISTS else
                "an integer" if key in _INTS else "a string" if key in _STRS else "a number")
        raise AutotuneError(f"bad value for {key}: {value!r} is not {kind}") from None


def config_from_mapping(values: Mapping[str, Any], base: DecodeConfig | None = None) -> DecodeConfig:
    """Overlay `values` (canonical keys) on `base` (defaults when None)."""
    updates = {}
    for key, value in values.items():
        if key not in _FIELDS:
            raise _unknown_key(str(key))
        updates[key] = _coerce(key, value)
    return dataclasses.replace(base or DecodeConfig(), **updates)


def parse_assignments(assignments: list[str]) -> dict[str, str]:
    """`["k=4", "attn_skip=12,17"]` -> `{"k": "4", "attn_skip": "12,17"}`."""
    out: dict[str, str] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AutotuneError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def load_config_file(path: str | Path, allow_list: bool = False) -> Any:
    """Read a JSON or YAML mapping of config keys; a top-level `params` mapping (an
    exported frozen config) is used when present. `allow_list` also accepts a list of
    such mappings (returned as is, for `--enqueue`)."""
    path = Path(path)
    if not path.is_file():
        raise AutotuneError(f"config file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise AutotuneError(f"cannot read config file {path}: {first}") from None
    if isinstance(data, dict) and isinstance(data.get("params"), dict):
        data = data["params"]
    if allow_list and isinstance(data, list):
        return data
    if not isinstance(data, dict):
        raise AutotuneError(f"config file {path} must hold a mapping of config keys")
    return data
