"""A search plan fitted to its `--time-budget` (`autotune.pipeline.budget` says how):
the budget started with the process, the machine's speed measured after loading, the
screen's references and cost parts made after the profile (fixed time, the parts at an
effort the budget holds), the plan's counts sized from what is left after them, the held-out sample sized when validation starts.
`run_search` calls these at those points; without a budget (`NoBudget`, or None) each is
a no-op."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from autotune.backends import EngineCost, engine_cost
from autotune.pipeline.budget import (SPECULATIVE_FLOOR, Budget, Counts, NoBudget, Shape,
                                      TimeBudget, stage_seconds)
from autotune.pipeline.plan import SearchPlan
from autotune.pipeline.progress import note
from autotune.search.engine_screens import ENGINE_FINALISTS, engine_screen_budget
from autotune.search.finalists import OWN_ENGINE, Finalist
from autotune.workloads.split import resized, sample_reserve

if TYPE_CHECKING:
    import optuna

    from autotune.models.loading import LoadedModel
    from autotune.search.engine_prices import EnginePrices
    from autotune.search.objectives import EvalContext
    from autotune.records.validation import ValidationRecord
    from autotune.workloads.prompts import Prompt

# The study attribute that keeps the held-out sizes a budgeted run validated on: a
# rerun validates on at least as many (it extends; it never shrinks).
HELD_OUT_ATTR = "time_budget_held_out"


def start(plan: SearchPlan) -> TimeBudget:
    """The plan's budget, its clock started when the search did (`plan.budget_started`);
    `NoBudget` without one."""
    if plan.time_budget_s is None:
        return NoBudget()
    return Budget(plan.time_budget_s, plan.budget_started)


def measure_speed(budget: TimeBudget | None, target: LoadedModel,
                  prompt: Prompt | None = None) -> float | None:
    """Seconds per AR token on this machine now, as a search pays it (what every
    stage's cost scales with): a short greedy AR decode of `prompt` (the first search
    prompt) through the decoder, its loop included; the one-token forward where that
    decode stops too soon. None without a budget."""
    if not budget:
        return None
    from autotune.measure.profile import ar_decode_seconds_per_token, ar_seconds_per_token
    from autotune.workloads.prompts import encode_prompt

    forward = ar_seconds_per_token(target)
    decoded = (ar_decode_seconds_per_token(target, encode_prompt(target.tokenizer, prompt))
               if prompt is not None else None)
    seconds = decoded if decoded is not None else forward
    how = (f"a decoded AR token, the decoder's loop included; its one-token forward "
           f"{1000 * forward:.1f} ms" if decoded is not None else "one-token forward")
    note(f"the machine's speed: AR {1000 * seconds:.1f} ms/token ({how}); "
         f"sizing the search to --time-budget {budget.seconds:g} s")
    return seconds


def profile_fits(plan: SearchPlan, budget: TimeBudget | None, ar_s: float | None) -> bool:
    """Whether to take the hardware profile now: always without a budget or where the
    run folder holds one already; with a budget, only where its estimate fits a small
    share of it (`Budget.profile_fits`; one line says when it is left out)."""
    from autotune.measure.profile import PROFILE_FILE

    if not budget or ar_s is None or (plan.run_dir / PROFILE_FILE).is_file():
        return True
    if budget.profile_fits(ar_s):
        return True
    note(f"{budget.stopped[-1]}: left out of this --time-budget")
    return False


def prepare_screen(plan: SearchPlan, budget: TimeBudget | None, ar_s: float | None,
                   screening: EvalContext) -> bool:
    """With a budget, before the sizing: the screen's references decoded and its cost
    parts measured (or loaded) into `screening`'s memo, at the effort the budget holds,
    so that what they took is counted before any stage is sized. False when the budget
    leaves the screens out (too little time for even their setup); True otherwise, and
    without a budget or a screen (nothing done here then)."""
    if not budget or ar_s is None or plan.fidelity != "multi":
        return True
    from autotune.replay.effort import EFFORTS
    from autotune.search.evaluation import replayer

    effort = budget.screen_setup(len(plan.split.screened), plan.max_new_tokens, ar_s)
    if effort is None:
        note(f"{budget.stopped[-1]}: the screens are left out of this --time-budget")
        return False
    parts = replayer(screening, effort).parts
    # Parts stored by an earlier run at a higher effort are kept as they were.
    budget.parts_measured_at(next((e for e in EFFORTS if e.name == parts.effort), effort))
    return True


def price_target(plan: SearchPlan, budget: TimeBudget | None, ar_s: float | None,
                 screening: EvalContext) -> EnginePrices | None:
    """`--target ENGINE` that measures here, with a replay screen: the engine's cost
    profile (cached, or measured in it now where its estimate fits the budget,
    `Budget.target_prices_fit`) installed on `screening`'s replayer, so its screen ranks
    at the engine's own prices (issue 60: at our decoder's, `--target vllm` answered
    0.79 of the best of four fixed configs measured in vLLM). None where the screen
    keeps our decoder's prices (another target, no screen, no room, or no profile;
    each of the last two said in one line)."""
    from autotune.search.engine_prices import cached_engine, price_engines, profile_seconds

    if not plan.in_engine or plan.fidelity != "multi":
        return None
    if budget and ar_s is not None and not cached_engine(plan.target, plan.model):
        need = profile_seconds(plan.target, plan.model, ar_s)
        if not budget.target_prices_fit(plan.target, need):
            note(f"left out of this --time-budget: {budget.trimmed[-1]}")
            return None
    prices = price_engines(screening, [plan.target], plan.model, plan.draft, plan.run_dir)
    return prices if prices is not None and prices.profiles else None


def _stages(plan: SearchPlan, engines: int, screened: bool) -> frozenset[str]:
    stages = {"trials"}
    if plan.fidelity == "multi" and screened:
        stages.add("screen")
    if plan.held_out:
        stages |= {"pool", "race"} if len(plan.pool) > len(plan.held_out) else {"race"}
        if engines and screened:
            stages.add("engines")
            if plan.engine_races:
                stages.add("engine_races")
    return frozenset(stages)


def size(plan: SearchPlan, budget: TimeBudget, ar_s: float | None, engines: int,
         screened: bool = True) -> SearchPlan:
    """`plan` with its screen and trials sized to the time left (`Budget.plan`), the
    screen's setup done (`prepare_screen`; `screened` False: the screens left out); the
    engines' screens and the held-out sizes are the budget's (`engine_screen`,
    `held_out`). The engines' races in themselves are admitted first, each only where
    it fits beside autotune's own stages at their floors (`Budget.admit_engine_races`);
    a dropped one is one line now and races nothing later. One line says what was cut.
    Without a budget (or its speed), `plan` as it is."""
    if not budget or ar_s is None:
        return plan
    caps = Counts(screen=plan.screen, trials=plan.trials,
                  engine_screen=engine_screen_budget(plan.screen), pool=len(plan.pool),
                  measured=len(plan.held_out))
    own = plan.finalists + 1                       # and the best documented default
    races = {engine: engine_cost(engine, plan.model) for engine in plan.engine_races}
    shape = Shape(max_new_tokens=plan.max_new_tokens, search_prompts=len(plan.prompts),
                  screen_prompts=len(plan.split.screened), engines=engines,
                  arms=own + engines + 1, repeats=plan.validation_repeats,
                  stages=_stages(plan, engines, screened),
                  screen_prepared=plan.fidelity == "multi" and screened,
                  race_cost=(engine_cost(plan.target, plan.model) if plan.in_engine
                             else EngineCost()),
                  engine_races=tuple(races.values()),
                  # Each engine's finalists, its best-screened default and its AR.
                  engine_race_arms=ENGINE_FINALISTS + 2)
    budget.full_shape = shape
    if "engine_races" in shape.stages:
        # As many finalists per engine as lets every race fit (issue 60: at least 3
        # where they fit, down to one), then the races that fit at one.
        for finalists in range(ENGINE_FINALISTS, 0, -1):
            budget.dropped.clear()
            shape = dataclasses.replace(shape, engine_race_arms=finalists + 2)
            admitted = budget.admit_engine_races(caps, shape, ar_s, races)
            if len(admitted) == len(races):
                break
        for reason in budget.dropped.values():
            note(f"dropped at planning: {reason}")
        shape = dataclasses.replace(
            shape, engine_races=tuple(races[e] for e in admitted),
            stages=shape.stages if admitted else shape.stages - {"engine_races"},
            engine_profiles_s=_profiles_seconds(plan, admitted, ar_s))
    counts = budget.plan(caps, shape, ar_s)
    cuts = budget.cuts()
    left = budget.left()
    note(f"{left:.0f} s of the budget left for the search"
         + (f"; cut to fit: {', '.join(cuts)}" if cuts else "; nothing cut to fit"))
    return dataclasses.replace(plan, screen=counts.screen, trials=counts.trials)


def _profiles_seconds(plan: SearchPlan, engines: list[str], ar_s: float) -> float:
    """The engines' cost profiles not in the cache yet, estimated (issue 60): measured in
    the engines before their screens, in the `engines` stage."""
    from autotune.search.engine_prices import cached_engine, profile_seconds
    return sum(profile_seconds(e, plan.model, ar_s)
               for e in engines if not cached_engine(e, plan.model))


def engine_finalist_counts(plan: SearchPlan, budget: TimeBudget | None) -> dict[str, int]:
    """The finalists each engine raced in itself takes from its screen (besides its
    default): what the races in the engines hold (`size`), ENGINE_FINALISTS without a
    budget. An engine not raced in itself (absent: one) races in our decoder alone,
    where more of its finalists would only lengthen the main race."""
    count = ENGINE_FINALISTS
    if budget and budget.shape is not None and budget.shape.engine_race_arms >= 3:
        count = budget.shape.engine_race_arms - 2
    return {engine: count for engine in _raced(plan, budget)}


def _raced(plan: SearchPlan, budget: TimeBudget | None) -> list[str]:
    """The engines raced in themselves: those planned, less those dropped at planning."""
    dropped = budget.dropped if budget else {}
    return [e for e in plan.engine_races if e not in dropped]


def profiled_engines(plan: SearchPlan, budget: TimeBudget | None) -> list[str]:
    """The engines whose costs are profiled in themselves before their screens, asked
    as the engines' stage starts: those raced in themselves whose profile is cached or
    fits the time the stages after the screens leave (the cheapest first); one that
    does not fit keeps our decoder's prices, said in one line."""
    from autotune.search.engine_prices import cached_engine, profile_seconds
    engines = _raced(plan, budget)
    if not budget or budget.counts is None or budget.shape is None or budget.ar_s is None:
        return engines
    ar_s = budget.ar_s * budget.pace()
    later = stage_seconds(budget.counts,
                          dataclasses.replace(budget.shape, engine_profiles_s=0.0), ar_s)
    room = budget.left() - sum(later[s] for s in ("engines", "pool", "race", "engine_races"))
    costs = {e: 0.0 if cached_engine(e, plan.model)
             else profile_seconds(e, plan.model, ar_s)
             for e in engines}
    chosen = []
    for engine in sorted(engines, key=costs.__getitem__):
        if costs[engine] <= room:
            chosen.append(engine)
            room -= costs[engine]
        else:
            note(f"{engine}: its own costs are not profiled (about {costs[engine]:.0f} s, "
                 f"{max(room, 0.0):.0f} s left beside the stages after the screens); its "
                 "screen prices at autotune's decoder's costs")
    return [e for e in engines if e in chosen]


def engine_screen(plan: SearchPlan, budget: TimeBudget | None) -> int:
    """Configs each engine's screen replays."""
    if not budget or budget.counts is None:
        return engine_screen_budget(plan.screen)
    if budget.shape is not None and "engines" not in budget.shape.stages:
        return 0                            # the budget left the screens out
    return budget.counts.engine_screen


def held_out(plan: SearchPlan, budget: TimeBudget | None, study: optuna.Study) -> SearchPlan:
    """`plan` with the held-out pool and its measured sample sized to the time left
    (never below what this study validated on before under a budget), the sizes kept
    in the study for a rerun."""
    if not budget or budget.counts is None or not plan.held_out:
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


def race_reserve(plan: SearchPlan, budget: TimeBudget | None) -> list[Prompt]:
    """The held-out pool's prompts a race may grow its sample into where its time holds
    more (`racing.grown_sample`): only where --time-budget cut the sample, and only back
    up to the --validation-prompts asked for (a flag's own count stands)."""
    if not budget or budget.caps is None:
        return []
    room = budget.caps.measured - len(plan.held_out)
    return sample_reserve(plan.split, plan.seed)[:room] if room > 0 else []


def race_seconds(plan: SearchPlan, budget: TimeBudget | None) -> float | None:
    """The race's time: what is left of the budget (and of --validation-budget)."""
    if not budget:
        return plan.validation_budget_s
    budget.done("pool")
    left = max(budget.stop_at("race") - budget.clock(), 1e-3)
    given = plan.validation_budget_s
    return left if given is None else min(given, left)


def undecided_if_cut(record: ValidationRecord, budget: TimeBudget | None) -> ValidationRecord:
    """`record` with every "do not speculate" that rests on no
    measured finalist made "undecided" when the budget stopped a stage: the time ran out
    before a config was measured, which says nothing about speculating."""
    from autotune.search.finalists import DO_NOT_SPECULATE, UNDECIDED
    from autotune.records.validation import FinalistEntry, Judgement

    if not budget or not budget.stopped:
        return record
    why = Judgement(UNDECIDED, None, "the time budget ran out before a speculative config "
                                     "was measured: rerun with a larger --time-budget")

    def fixed(judgement: Judgement, entries: list[FinalistEntry]) -> Judgement:
        return why if judgement.decision == DO_NOT_SPECULATE and not entries else judgement

    engines = {name: fixed(j, record.engine_finalists.get(name, []))
               for name, j in record.engines.items()}
    return record.judged_again(fixed(record.judgement, record.finalists), engines=engines)


def engine_races_stop(budget: TimeBudget | None) -> float | None:
    """The engines' races in themselves start now: their stage's deadline (None:
    without a budget)."""
    if not budget or budget.counts is None:
        return None
    budget.done("race")
    return budget.stop_at("engine_races")


def engines_stop(budget: TimeBudget) -> tuple[float, Callable[[], float]] | None:
    """The engines' screens start now, their profiles measured: their deadline and its
    clock (None without a budget). The profiles' time is spent, so the stage's estimate
    holds the screens alone from here."""
    if not budget:
        return None
    budget.profiles_measured()
    return budget.stop_at("engines"), budget.clock


def engine_race_seconds(plan: SearchPlan, budget: TimeBudget | None, deadline: float | None,
                        engine: str, later: tuple[str, ...], arms: int) -> float | None:
    """One engine's race in itself, starting now: its share of the stage against the
    engines still to race after it (`later`), 0 when it was dropped at planning or
    cannot start its engines in it (skipped); without a budget, --validation-budget."""
    if not budget or deadline is None:
        return plan.validation_budget_s
    if engine in budget.dropped:
        return 0.0
    seconds = budget.engine_race_seconds(
        deadline, engine_cost(engine, plan.model), arms,
        tuple(engine_cost(e, plan.model) for e in later if e not in budget.dropped))
    given = plan.validation_budget_s
    return seconds if given is None or seconds <= 0 else min(given, seconds)


def start_up_fit(budget: TimeBudget | None, deadline: float | None, engine: str,
                 arms: int, model: str) -> tuple[str, float | None, float | None]:
    """A race in an engine the budget skipped, for its record: (why, the seconds its
    `arms` engines' start-up and first look needed, the seconds the engines' races had
    left), at the pace kept; one dropped at planning, the budget's line (what it needs,
    what was left)."""
    if not budget or deadline is None or budget.ar_s is None:
        return "its start-up does not fit its share", None, None
    if engine in budget.dropped:
        return budget.dropped[engine], None, None
    needed = budget.first_look_seconds(engine_cost(engine, model), arms)
    return (f"its {arms} engines' start-up and first look do not fit its share of the "
            "engines' races", needed, max(deadline - budget.clock(), 0.0))


def race_arms(budget: TimeBudget | None, chosen: list[Finalist],
              raced_here: tuple[str, ...] = ()) -> tuple[list[Finalist], list[Finalist]]:
    """`chosen` cut to the arms the race's time holds (kept, left out), in their order:
    a budget cuts breadth before the least a decision needs. Kept first: autotune's own
    two best (its floor: always kept), then each engine's best (those `raced_here`, in
    the engine itself after this race, before the others: their race there needs a
    finalist from this one), then autotune's documented default, then the engines'
    defaults, then the rest. Without a budget, all of them."""
    if not budget or budget.counts is None or not chosen:
        return chosen, []
    own_floor = [f for f in chosen if f.engine == OWN_ENGINE
                 and not f.role.startswith("default")][:SPECULATIVE_FLOOR]
    # The AR baseline is an arm too.
    room = budget.race_arms(len(own_floor) + 1) - 1
    ranked = sorted(chosen, key=lambda f: (*_arm_priority(f), f.engine not in raced_here))
    kept = {f.arm for f in own_floor}
    for f in ranked:
        if len(kept) >= room:
            break
        kept.add(f.arm)
    return ([f for f in chosen if f.arm in kept], [f for f in chosen if f.arm not in kept])


def with_cut_engines(record: ValidationRecord, unfit: list[Finalist],
                     raced: list[Finalist], screened: Sequence[str] = ()
                     ) -> ValidationRecord:
    """`record` with an "undecided" answer for each engine whose every finalist the
    race's time cut (`race_arms`), and for each engine `screened` whose screen gave no
    finalist (it finished no config in its share of the budget): an engine left out
    still gets its row, and says why it has no figure, rather than vanishing from the
    answer."""
    from autotune.search.finalists import UNDECIDED
    from autotune.records.validation import Judgement

    answered = {f.engine for f in raced} | {OWN_ENGINE} | set(record.engines)
    cut = sorted({f.engine for f in unfit} - answered)
    unscreened = sorted(set(screened) - answered - set(cut))
    if not cut and not unscreened:
        return record
    why = {engine: Judgement(UNDECIDED, None, f"not raced: the time left held {len(raced)} "
                             "finalists beside the AR baseline, and this engine's ranked "
                             "below them: rerun with a larger --time-budget")
           for engine in cut}
    why.update({engine: Judgement(UNDECIDED, None, "not raced: its screen finished no "
                                  "config in its share of the time budget: rerun with a "
                                  "larger --time-budget") for engine in unscreened})
    return record.model_copy(update={
        "engines": {**record.engines, **why},
        "engine_finalists": {**record.engine_finalists, **{engine: [] for engine in why}}})


def _arm_priority(finalist: Finalist) -> tuple[int, int]:
    """Which finalists a short race keeps first (smaller first): autotune's floor, each
    engine's best, autotune's default, each engine's default, then each engine's next
    finalists (issue 60: its race in itself decides among them), then autotune's."""
    own = finalist.engine == OWN_ENGINE
    default = finalist.role.startswith("default")
    rank = int(finalist.role.rsplit("#", 1)[1]) if "#" in finalist.role else 0
    if own and not default:
        return (0 if rank <= SPECULATIVE_FLOOR else 4, rank)
    if not default:
        return (1, rank) if rank <= 1 else (3, rank)
    return (2, 0) if own else (3, 0)


# The least time worth resuming a race in (a prompt or two of the default model's).
RESUME_LEAST_S = 10.0


def left_for_race(budget: TimeBudget | None, record: ValidationRecord) -> float | None:
    """The time the stages after the main race left over, for resuming `record`'s race
    (None: no budget, or too little for its next look at the pace the race kept: a
    resumed race's first look always runs, and one resumed with 26 s left took 64,
    issue 59)."""
    from autotune.search.racing import look_sizes

    if not budget or budget.counts is None or record.race is None:
        return None
    measured = record.race.measured
    planned = record.planned_prompts or measured
    next_size = next((size for size in look_sizes(planned) if size > measured), None)
    if next_size is None:
        return None
    took = budget.took("race")
    need = took / measured * (next_size - measured) if took and measured else 0.0
    left = budget.left()
    return left if left >= max(need, RESUME_LEAST_S) else None
