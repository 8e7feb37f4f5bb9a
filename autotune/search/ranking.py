"""The order of trials, where the pipeline imports it (`from autotune.search import ranking`).

The rule is declared in `autotune.records.ranking`, below the search, so the run folder
and the report rank trials without the search's code (issue 62). New code imports it
from there; this module goes once `pipeline/run.py` does.
"""

from __future__ import annotations

from autotune.records.ranking import Directions, best_trial, complete, pareto_numbers, ranked, sign

__all__ = ["Directions", "best_trial", "complete", "pareto_numbers", "ranked", "sign"]
