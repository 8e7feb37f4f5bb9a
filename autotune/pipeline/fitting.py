"""A search plan fitted to its `--time-budget` (`autotune.pipeline.budget` says how):
the budget started with the process, the machine's speed measured after loading, the
plan's counts sized after the profile, the held-out sample sized when validation starts.
`run_search` calls these at those points; without a budget each is a no-op."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from autotune.pipeline.budget import Budget, Counts, Shape, process_started
from autotune.pipeline.plan import SearchPlan
from autotune.pipeline.progress import note
from autotune.search.engine_screens import engine_screen_budget
from autotune.workloads.split import resized

if TYPE_CHECKING:
    import optuna

    from autotune.models.loading import LoadedModel

# The study attribute that keeps the held-out sizes a budgeted run validated on: a
# rerun validates on at least as many (it extends; it never shrinks).
HELD_OUT_ATTR = "time_budget_held_out"


def start(plan: SearchPlan) -> Budget | None:
    """The plan's budget, its clock started with the process; None without one."""
    if plan.time_budget_s is None:
        return None
    return Budget(plan.time_budget_s, process_started())


def measure_speed(budget: Budget | None, target: LoadedModel) -> float | None:
    """Seconds per AR token on this machine now (what every stage's cost scales with);
    None without a budget."""
    if budget is None:
        return None
    from autotune.measure.profile import ar_seconds_per_token

    seconds = ar_seconds_per_token(target)
    note(f"the machine's speed: AR {1000 * seconds:.1f} ms/token (one-token forward); "
         f"sizing the search to --time-budget {budget.seconds:g} s")
    return seconds


def _stages(plan: SearchPlan, engines: int) -> frozenset[str]:
    stages = {"trials"}
    if plan.fidelity == "multi":
        stages.add("screen")
    if plan.held_out:
        stages |= {"pool", "race"} if len(plan.pool) > len(plan.held_out) else {"race"}
        if engines:
            stages.add("engines")
    return frozenset(stages)


def size(plan: SearchPlan, budget: Budget, ar_s: float, engines: int) -> SearchPlan:
    """`plan` with its screen and trials sized to the time left (`Budget.plan`); the
    engines' screens and the held-out sizes are the budget's (`engine_screen`,
    `held_out`). One line says what was cut."""
    caps = Counts(screen=plan.screen, trials=plan.trials,
                  engine_screen=engine_screen_budget(plan.screen), pool=len(plan.pool),
                  measured=len(plan.held_out))
    own = plan.finalists + 1                       # and the best documented default
    shape = Shape(max_new_tokens=plan.max_new_tokens, search_prompts=len(plan.prompts),
                  screen_prompts=len(plan.split.screened), engines=engines,
                  arms=own + engines + 1, repeats=plan.validation_repeats,
                  stages=_stages(plan, engines))
    counts = budget.plan(caps, shape, ar_s)
    cuts = budget.cuts()
    left = budget.left()
    note(f"{left:.0f} s of the budget left for the search"
         + (f"; cut to fit: {', '.join(cuts)}" if cuts else "; nothing cut to fit"))
    return dataclasses.replace(plan, screen=counts.screen, trials=counts.trials)


def engine_screen(plan: SearchPlan, budget: Budget | None) -> int:
    """Configs each engine's screen replays."""
    if budget is None or budget.counts is None:
        return engine_screen_budget(plan.screen)
    return budget.counts.engine_screen


def held_out(plan: SearchPlan, budget: Budget | None, study: optuna.Study) -> SearchPlan:
    """`plan` with the held-out pool and its measured sample sized to the time left
    (never below what this study validated on before under a budget), the sizes kept
    in the study for a rerun."""
    if budget is None or budget.counts is None or not plan.held_out:
        return plan
    earlier: Any = study.user_attrs.get(HELD_OUT_ATTR)
    least = ((int(earlier[0]), int(earlier[1]))
             if isinstance(earlier, list) and len(earlier) == 2 else (0, 0))
    pool, measured = budget.size_held_out(len(plan.pool), len(plan.held_out), least)
    study.set_user_attr(HELD_OUT_ATTR, [pool, measured])
    budget.stop_at("pool")              # the pool's predictions start now
    split = resized(plan.split, pool, measured, plan.seed, "by --time-budget")
    if split is not plan.split:
        note(f"validating on a held-out pool of {pool} (of {len(plan.pool)}), "
             f"{measured} measured (of {len(plan.held_out)}): what the time left holds")
    return dataclasses.replace(plan, split=split)


def race_seconds(plan: SearchPlan, budget: Budget | None) -> float | None:
    """The race's time: what is left of the budget (and of --validation-budget)."""
    if budget is None:
        return plan.validation_budget_s
    budget.done("pool")
    left = max(budget.stop_at("race") - budget.clock(), 1e-3)
    given = plan.validation_budget_s
    return left if given is None else min(given, left)


def undecided_if_cut(record: Any, budget: Budget | None) -> Any:
    """`record` (a ValidationRecord) with every "do not speculate" that rests on no
    measured finalist made "undecided" when the budget stopped a stage: the time ran out
    before a config was measured, which says nothing about speculating."""
    from autotune.search.finalists import DO_NOT_SPECULATE, UNDECIDED
    from autotune.search.validation_record import Judgement

    if budget is None or not budget.stopped:
        return record
    why = Judgement(UNDECIDED, None, "the time budget ran out before a speculative config "
                                     "was measured: rerun with a larger --time-budget")

    def fixed(judgement: Judgement, entries: list[Any]) -> Judgement:
        return why if judgement.decision == DO_NOT_SPECULATE and not entries else judgement

    engines = {name: fixed(j, record.engine_finalists.get(name, []))
               for name, j in record.engines.items()}
    return dataclasses.replace(record, judgement=fixed(record.judgement, record.finalists),
                               engines=engines)
