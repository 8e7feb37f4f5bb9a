"""The validation record's names where the pipeline and the engines' races import them.

The record is declared in `autotune.records.validation` (its parts in
`validation_parts`, its upgrader in `validation_upgrade`), below the search, so the run
folder and the report read it without the search's code (issue 62). New code imports
from there; this module goes once `pipeline/fitting.py` and `search/engine_races.py` do.
"""

from __future__ import annotations

from autotune.records.validation import (
    POOLED_FIGURES,
    VERSION,
    Baseline,
    FinalistEntry,
    FinalistFigures,
    Judgement,
    Look,
    RaceLog,
    ValidationRecord,
    upgrade,
)

__all__ = ["POOLED_FIGURES", "VERSION", "Baseline", "FinalistEntry", "FinalistFigures",
           "Judgement", "Look", "RaceLog", "ValidationRecord", "upgrade"]
