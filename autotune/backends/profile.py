"""An engine's own cost profile: what a decode step costs in the engine, measured there.

The replay tier prices a round at our decoder's measured costs (`replay/costs.py`). An
engine pays its own: vLLM's CPU build takes about 2x our decoder's AR step, mostly fixed
per step (scheduler, input preparation, sampler), which a wide verify step pays once;
llama.cpp's step is a fifth of ours; HF `generate()` has its own loop (issue 60). So
each engine that runs on this machine is profiled in itself (`backends/profiling.py`
measures it) and its screen prices its candidates with this record
(`replay/engine_prices.py`):

- `ar_ms`: one step of the engine without speculation at the workload's context;
- `verify_curve`: [[tokens, ms], ...], a step that verifies that many tokens (1: the AR
  step), drafting and the speculative bookkeeping excluded;
- `draft_ms`: the drafting one step costs, per drafter the engine ran (its n-gram
  lookup), where the engine lets it be timed apart (else 0 and in `spec_overhead_ms`,
  which `notes` say);
- `spec_overhead_ms`: what a speculative step costs beyond its verify pass and drafting.

A speculative round verifying v tokens is priced verify(v) + draft + overhead; the AR
baseline's step `ar_ms`.

Profiles are kept in the run folder and in the cache folder (`engine_profiles.json`,
`AUTOTUNE_CACHE` moves it), one per `ProfileKey` (engine, its release, its mode,
threads, device, model and the workload's context), and reused: a rerun measures
nothing. Torch-free, so that a budget can price a profile before any model loads.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from autotune.common.files import cache_root, write_atomically

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig

__all__ = ["FORMAT", "PROFILES_FILE", "EngineProfile", "ProfileKey", "drafter_of",
           "interpolate", "load_profile", "profile_file", "store_profile",
           "stored_keys"]

# v2: `overhead_on_misses` (a v1 profile is measured again).
FORMAT = "autotune.engine-profile/v2"
PROFILES_FILE = "engine_profiles.json"


def drafter_of(config: "DecodeConfig") -> str:
    """The drafter a profile prices a config's steps by: its method (an engine's n-gram
    lookups, whatever their type, share one entry: llama.cpp's types differ in a
    lookup of microseconds against steps of milliseconds)."""
    return config.method


@dataclass(frozen=True)
class ProfileKey:
    """What an engine's step costs depend on: the engine, its release, its mode
    (compiled or eager), the CPU threads it may use, the device, the model it loads and
    the workload's context (tokens cached when a step runs: a step's cost grows with
    it)."""

    engine: str
    version: str
    mode: str
    threads: int
    device: str
    model: str
    context: int

    def text(self) -> str:
        return (f"{self.engine} {self.version} {self.mode} threads={self.threads} "
                f"{self.device} {self.model} context={self.context}")


@dataclass
class ProfilePoint:
    """One measured decode: `k` drafted per step at most (0: the engine without
    speculation), its steps, the tokens they verified on average and the ms a step took
    (the engine's decode time ÷ its steps, counted by the engine)."""

    k: int
    steps: int
    verified: float
    step_ms: float


@dataclass
class EngineProfile:
    """One engine's step costs on this machine (see the module docstring), in ms."""

    format: str
    key: ProfileKey
    ar_ms: float
    verify_curve: list[list[float]]
    draft_ms: dict[str, float]
    spec_overhead_ms: float
    # The seconds measuring it took here (what a budget prices the next one at).
    measured_s: float = 0.0
    # What it was measured from: the decodes behind it, and what is approximate.
    points: list[ProfilePoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Whether `spec_overhead_ms` is paid on a step whose lookup found no draft too (the
    # engine's registry record says; HF's loop pays it only where it drafted).
    overhead_on_misses: bool = True

    def verify_ms(self, tokens: int) -> float:
        """A step verifying `tokens` tokens (drafting and bookkeeping apart)."""
        return interpolate(self.verify_curve, tokens)

    def step_ms(self, tokens: int, drafter: str) -> float:
        """A speculative step of `drafter` verifying `tokens` tokens, all in."""
        return (self.verify_ms(tokens) + self.draft_ms.get(drafter, 0.0)
                + self.spec_overhead_ms)

    def prices(self, drafter: str) -> bool:
        """Whether this profile measured `drafter`'s steps (its prices are the engine's
        own for it)."""
        return drafter in self.draft_ms

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> "EngineProfile":
        """ValueError (pydantic's) when `doc` does not hold a profile."""
        return _PROFILE.validate_python(doc)


_PROFILE: TypeAdapter[EngineProfile] = TypeAdapter(EngineProfile)


def interpolate(curve: list[list[float]], n: float) -> float:
    """Piecewise-linear ms at n tokens; straight on past either end (flat below one
    point's curve)."""
    points = sorted((float(a), float(b)) for a, b in curve)
    if not points:
        return 0.0
    if len(points) == 1:
        return points[0][1]
    if n <= points[0][0]:
        (x0, y0), (x1, y1) = points[0], points[1]
    elif n >= points[-1][0]:
        (x0, y0), (x1, y1) = points[-2], points[-1]
    else:
        (x0, y0), (x1, y1) = next(((a, b) for a, b in zip(points, points[1:])
                                   if a[0] <= n <= b[0]))
    return y0 + (y1 - y0) * (n - x0) / (x1 - x0) if x1 != x0 else y0


def profile_file() -> Path:
    return cache_root() / PROFILES_FILE


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def stored_keys(path: Path) -> list[str]:
    """The keys (`ProfileKey.text`) of the profiles stored at `path` in this format (an
    older one is measured again, and its cost counted)."""
    return [key for key, doc in _read(path).items()
            if isinstance(doc, dict) and doc.get("format") == FORMAT]


def load_profile(key: ProfileKey, paths: list[Path]) -> EngineProfile | None:
    """The profile stored for `key` in the first of `paths` that holds one (a file that
    does not read, or holds another format, is passed over); None when none does."""
    for path in paths:
        doc = _read(path).get(key.text())
        if doc is None:
            continue
        try:
            profile = EngineProfile.from_json(doc)
        except (ValueError, TypeError):
            continue
        if profile.format == FORMAT and profile.key == key:
            return profile
    return None


def store_profile(profile: EngineProfile, paths: list[Path]) -> None:
    """Add `profile` to each of `paths` (atomically). A folder that cannot be written
    loses the profile there, never the run."""
    for path in paths:
        data = _read(path)
        data[profile.key.text()] = profile.to_json()
        try:
            write_atomically(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        except OSError:
            pass
