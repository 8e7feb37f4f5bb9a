"""The validation record's versions: the one place that knows how an older stored record
differs from the current one (`upgrade`), for `ValidationRecord.from_json`.

A record without `version` (all those written before versions) is brought to the current
one here, with the defaults and repairs its reader used to apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.common.errors import AutotuneError

__all__ = ["VERSION", "upgrade"]

# The version `to_json` writes. 1: every record written before versions (no `version`
# key); 2: the same keys, versioned.
VERSION = 2

# Version 1's reader filled these where a record lacked them (and wrote them back), and
# read a null as empty: keys of the record, of a finalist entry, of a race, of a look.
_V1_RECORD = ({"statistic": "", "level": 0.9, "prompts": 0, "repeats": 1, "finalists": [],
               "decision": "", "winner": None, "reason": "", "engine_finalists": {},
               "engines": {}, "engine_races": {}},
              ("prompt_ids", "categories", "rows", "finalists", "engine_finalists",
               "engines", "engine_races"))
_V1_ENTRY = ({"label": ""}, ("params", "search", "mismatched_prompts", "near_tie_prompts",
                             "by_category"))
_V1_RACE = ({"stopped": "sample", "measured": 0, "looks": [], "alpha_spent": 0.0,
             "budget_s": None, "spending": None}, ("twins",))
_V1_LOOK = ({"prompts": 0, "level": 0.0, "active": [], "dropped": []}, ())
_V1_JUDGEMENT = ({"decision": "", "winner": None, "reason": ""}, ())
# The empty value of each key above read as empty, by its field's type.
_EMPTY_LISTS = {"prompt_ids", "finalists", "mismatched_prompts", "near_tie_prompts"}


def upgrade(doc: Mapping[str, Any]) -> dict[str, Any]:
    """`doc`, a stored validation record of any version, as the current version's JSON
    (the one place that knows how a version differs from the next); an AutotuneError for
    one a newer autotune wrote."""
    version = doc.get("version", 1)
    if version == VERSION:
        return dict(doc)
    if version != 1:
        raise AutotuneError(f"the study's validation record is version {version!r}; this "
                            f"autotune reads versions up to {VERSION}: upgrade autotune")
    return {"version": VERSION, **_from_v1(doc)}


def _filled(doc: Mapping[str, Any], shape: tuple[Mapping[str, Any], tuple[str, ...]]
            ) -> dict[str, Any]:
    """`doc` with the keys its reader defaulted, and its nulls read as empty."""
    defaults, nullable = shape
    out = {**defaults, **doc}
    for key in nullable:
        if key in out and out[key] is None:
            out[key] = [] if key in _EMPTY_LISTS else {}
    return out


def _mappings(values: Any) -> list[Mapping[str, Any]]:
    return [v for v in values if isinstance(v, Mapping)] if isinstance(values, list) else []


def _from_v1(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A record written before versions (a race of `engine_races` too) as version 2:
    the same keys, with what version 1's reader read them as (its defaults, nulls as
    empty, entries that are no mapping dropped, a non-numeric `min_gain` as null)."""
    out = _filled(doc, _V1_RECORD)
    out["finalists"] = [_filled(f, _V1_ENTRY) for f in _mappings(out["finalists"])]
    out["engine_finalists"] = {name: [_filled(f, _V1_ENTRY) for f in _mappings(entries)]
                               for name, entries in out["engine_finalists"].items()}
    out["engines"] = {name: _filled(judged, _V1_JUDGEMENT)
                      for name, judged in out["engines"].items() if isinstance(judged, Mapping)}
    out["engine_races"] = {name: _from_v1(race) for name, race in out["engine_races"].items()
                           if isinstance(race, Mapping)}
    if "min_gain" in out and (isinstance(out["min_gain"], bool)
                              or not isinstance(out["min_gain"], (int, float))):
        out["min_gain"] = None
    if "race" in out:
        race = _filled(out["race"], _V1_RACE) if isinstance(out["race"], Mapping) else None
        if race is not None:
            race["looks"] = [_filled(look, _V1_LOOK) for look in _mappings(race["looks"])]
        out["race"] = race
    if "baseline" in out:
        baseline = out["baseline"]
        out["baseline"] = {"latency_ms_per_token": (baseline.get("latency_ms_per_token")
                                                    if isinstance(baseline, Mapping) else None)}
    return out
