"""The hardware profile's file (`PROFILE_FILE` in a run folder, written by
`autotune.measure.profile`) and what is read off it: how many tokens one verify pass
checks at nearly one token's cost (`free_tokens`).

Here, below measuring, so the report's hardware panel reads a profile without the code
that measures one (issue 62).
"""

from __future__ import annotations

from typing import Any

__all__ = ["FREE_FACTOR", "PROFILE_FILE", "free_tokens"]

PROFILE_FILE = "hardware_profile.json"
# The "free" band of `free_tokens` (and of the report's hardware panel): verifying n
# tokens within this factor of one token's cost.
FREE_FACTOR = 1.10


def free_tokens(profile: dict[str, Any], factor: float = FREE_FACTOR) -> int | None:
    """The most tokens whose median forward costs at most `factor` x the smallest
    size's (one token's, with the default sizes): how far verifying stays nearly free."""
    points = profile.get("points") or []
    if not points:
        return None
    base = points[0]["ms"]
    best = None
    for point in points:
        if point["ms"] <= factor * base:
            best = point["tokens"]
    return best
