"""`--target all`: each engine's own candidates, screened by replay under its rules.

autotune's own search (the measured study and its screen) answers for our decoder. For
every other engine it answers for (`targets.answered_engines`), one replay screen of
that engine's space, bound and cut to what the engine runs exactly and measured under
its drafting rules (`<study>.<engine>.screen`, in the same storage, so it resumes and
is shared like the main screen), ranks its configs on the search prompts. Its best
distinct configs and its best-screened documented default become that engine's
finalists (`Finalist.engine`), raced in the same race as autotune's own against the one
AR baseline; replay is exact for the model-free drafters these spaces hold, so no
measured trials are spent before the race.

An engine that runs here is screened at its own costs, measured in it
(`search/engine_prices.py`); one that cannot (a GPU engine) at our decoder's, which its
replay notes say. Replay's prices being the engine's own only there, a finalist is left
out as predicted behind (`predicted_behind`) only on predictions at its engine's own
prices (`engine_pool_predictions`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from autotune.measure import paired
from autotune.measure.paired import PromptPair
from autotune.search.finalists import OWN_ENGINE, Finalist, finalist_of
from autotune.search.objectives import EvalContext, Objective
from autotune.search.samplers import BASELINE, BASELINE_ATTR
from autotune.search.screening import distinct_trials, ranked_candidates, run_screen
from autotune.search.study import SearchSettings, StudyRunner
from autotune.space import BoundSpace

__all__ = ["ENGINE_FINALISTS", "PREDICTED_MARGIN", "engine_finalists", "engine_screen_budget",
           "predicted_behind", "screen_engines"]

# The best screened configs raced per engine, besides its documented default (issue 60):
# replay's τ is exact but a price is a prediction, even the engine's own profile's
# (within about 10%), so the race in the engine decides among several, not only
# confirms one. A budget that cannot hold them all races fewer (`pipeline.fitting`).
ENGINE_FINALISTS = 3
# An engine's finalist that replay predicts this far behind its engine's best over the
# whole held-out pool, at the engine's own prices, is not raced: replay drafts these
# model-free configs exactly, so only the prices could be wrong, and the engine's own
# not by this much (the race's time goes to the configs that can win).
PREDICTED_MARGIN = 0.10
# An engine's space is one or two drafters' numbers (a few hundred points): a quarter of
# the main --screen, at least this many, covers it (its model-free replays take a few
# seconds per hundred configs; a space with nothing new left stops before: "covered").
_LEAST_SCREEN = 100


def engine_screen_budget(screen: int) -> int:
    """Configs replayed per engine for a main `--screen` of `screen`."""
    return max(_LEAST_SCREEN, screen // 4)


def screen_engines(settings: SearchSettings, spaces: dict[str, BoundSpace],
                   objective: Objective, context: EvalContext, budget: int,
                   deadline: tuple[float, Callable[[], float]] | None = None
                   ) -> dict[str, StudyRunner]:
    """Replay `budget` configs of each engine's space (finished ones count, as in any
    resumed screen). `deadline`: (when all must stop, on its clock): each engine's
    screen gets an equal share of the time left when it starts (one that ends early
    leaves its time to the next). KeyboardInterrupt propagates (each screen is in the
    storage)."""
    screens: dict[str, StudyRunner] = {}
    for index, (engine, space) in enumerate(spaces.items()):
        engine_settings = dataclasses.replace(
            settings, study_name=f"{settings.study_name}.{engine}", enqueue=[],
            screened=None, study_attrs={**settings.study_attrs, "engine": engine})
        if deadline is not None:
            stop_at, clock = deadline
            now = clock()
            engine_settings = dataclasses.replace(
                engine_settings, clock=clock,
                stop_at=now + max(stop_at - now, 0.0) / (len(spaces) - index))
        screens[engine], _ = run_screen(engine_settings, budget, space, objective, context,
                                        label=f"{engine}'s")
    return screens


def engine_finalists(screens: dict[str, StudyRunner], objective: Objective,
                     n: int | Mapping[str, int] = ENGINE_FINALISTS) -> list[Finalist]:
    """Per engine: its `n` best distinct screened configs (configs replay saw decode alike
    count once; `n` per engine, one for an engine it does not name) and its
    best-screened documented default when not among them, each carrying its replay
    prediction as its search figures."""
    chosen: list[Finalist] = []
    for engine, screen in screens.items():
        _, order = ranked_candidates(screen, objective)
        distinct = distinct_trials(order)
        best = distinct[:n if isinstance(n, int) else n.get(engine, 1)]
        default = next((t for t in distinct
                        if t.user_attrs.get(BASELINE_ATTR) not in (None, BASELINE)), None)
        roles = [(t, f"{engine} #{i + 1}") for i, t in enumerate(best)]
        if default is not None and default not in best:
            roles.append((default, f"default {default.user_attrs[BASELINE_ATTR]}"))
        for trial, role in roles:
            chosen.append(finalist_of(trial, role, engine))
    return chosen


def predicted_behind(chosen: list[Finalist], predicted: dict[str, list[PromptPair]]
                     ) -> list[Finalist]:
    """The engines' finalists (never autotune's own) whose predicted speedup over the pool
    lies more than `PREDICTED_MARGIN` below their engine's best predicted one; each
    engine keeps its best. `predicted` must hold predictions at each engine's own prices
    only (`engine_pool_predictions`): our decoder's prices are off by -29% to +60% in
    the engines (issue 60), so a finalist priced by them is never left out, nor is one
    without predictions."""
    figure = {f.arm: paired.speedup(predicted[f.arm]) for f in chosen if predicted.get(f.arm)}
    best: dict[str, float] = {}
    for f in chosen:
        value = figure.get(f.arm)
        if value is not None and f.engine != OWN_ENGINE:
            best[f.engine] = max(best.get(f.engine, value), value)
    return [f for f in chosen
            if f.engine != OWN_ENGINE and figure.get(f.arm) is not None
            and figure[f.arm] < best[f.engine] * (1.0 - PREDICTED_MARGIN)]

