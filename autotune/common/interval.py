"""A figure's 90% interval: one type for what every record and file writes as
`"ci90": [low, high]` (the validation record, best.json, trials' summaries, schedules).

Readers take `Interval.of(figures)` (None where a figure has no interval: one prompt,
a baseline, an older file) instead of unpacking a list; writers put `to_json()` under
`CI_KEY`. `speedup_text` is the one way a speedup and its interval are printed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["CI_KEY", "Interval", "speedup_text"]

# The JSON key of a figure's interval in every record and file autotune writes.
CI_KEY = "ci90"


@dataclass(frozen=True)
class Interval:
    """A closed interval [low, high] of a figure (a speedup's 90% bootstrap interval)."""

    low: float
    high: float

    @classmethod
    def from_json(cls, value: Any) -> Interval | None:
        """`[low, high]` as written, or None for anything else (null, a missing key, a
        malformed entry of a hand-edited file)."""
        if (isinstance(value, (list, tuple)) and len(value) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                        and math.isfinite(v) for v in value)):
            return cls(float(value[0]), float(value[1]))
        return None

    @classmethod
    def of(cls, figures: Mapping[str, Any] | None, key: str = CI_KEY) -> Interval | None:
        """The interval `figures` carries under `key`, or None."""
        return cls.from_json((figures or {}).get(key))

    def to_json(self) -> list[float]:
        return [self.low, self.high]

    def above(self, value: float) -> bool:
        """The whole interval lies above `value`."""
        return self.low > value

    def below(self, value: float) -> bool:
        """The whole interval lies below `value`."""
        return self.high < value

    def __str__(self) -> str:
        return f"[{self.low:.3f}, {self.high:.3f}]"


def speedup_text(figures: Mapping[str, Any] | None, missing: str = "-") -> str:
    """`1.118x [1.065, 1.172]` from a figures mapping (`speedup` and its interval),
    `1.118x` without an interval, `missing` without a speedup."""
    value = (figures or {}).get("speedup")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return missing
    ci = Interval.of(figures)
    return f"{value:.3f}x" + (f" {ci}" if ci is not None else "")
