"""The validation stages: the finalists chosen and the held-out pool predicted, then the
race on the held-out prompts (its record stored in the study), then, after the engines'
races in themselves, the race resumed in the time they left over.

A rerun of a finished search loses nothing and re-measures nothing (a current record is
kept); a race its budget stopped undecided is resumed where it stopped. The finalists
are measured through `finalists.measure_finalists`, by attribute: tests/phase_driver.py
parks a run there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from autotune.pipeline import fitting
from autotune.pipeline.budget import SPECULATIVE_FLOOR, TimeBudget
from autotune.pipeline.plan import SearchPlan
from autotune.pipeline.progress import held_out_prompt, note
from autotune.records import ranking
from autotune.records.validation import RaceLog, ValidationRecord
from autotune.search import finalists
from autotune.search.engine_prices import ENGINE_PRICES, EnginePrices, engine_pool_predictions
from autotune.search.engine_screens import PREDICTED_MARGIN, engine_finalists, predicted_behind
from autotune.search.pool_prediction import predict_pool
from autotune.search.screen_finalists import screen_finalists, screen_ranked_finalists
from autotune.search.screening import screen_study_name
from autotune.search.study import StudyRunner
from autotune.workloads.prompts import workload_digest

__all__ = ["Race", "Raced", "choose", "race", "race_on"]


@dataclass(frozen=True)
class Race:
    """The race about to run: its finalists, their pool predictions, the stored race it
    resumes (None: a fresh one) and the engines screened (for its line)."""

    chosen: list[finalists.Finalist]
    predicted: dict[str, Any]
    resume: ValidationRecord | None
    engines: tuple[str, ...]


@dataclass(frozen=True)
class Raced:
    """What the main race ran with: its finalists and their pool predictions (a race
    resumed in the same run takes them as they were)."""

    chosen: list[finalists.Finalist]
    predicted: dict[str, Any]


def choose(plan: SearchPlan, runner: StudyRunner, screens: dict[str, StudyRunner],
           budget: TimeBudget, target_prices: EnginePrices | None = None) -> Race | None:
    """The race's finalists and the held-out pool's predictions; None where there is
    nothing to race: a current record of these prompts and repeats is stored already
    (judged again under another --min-gain), or other workers are still measuring (the
    last one to finish validates). With `target_prices` (the --target engine's own
    costs ranked its screen, `fitting.price_target`), autotune's own finalists are the
    screen's picks and the pool is predicted at those costs."""
    study, held = runner.study, plan.split
    record = finalists.current_record(study)
    resume = None
    engines_chosen = engine_finalists(screens, plan.objective,
                                      fitting.engine_finalist_counts(plan, budget))
    if (record is not None
            and (record.sample_sha256 or record.workload_sha256)
            == workload_digest(held.held_out)
            and record.pool_sha256 == workload_digest(held.pool)
            and record.repeats == plan.validation_repeats
            # A record of other engines (a `--target all` run after a single-engine
            # one on the same study) races again.
            and finalists.engine_names(record) == sorted({f.engine for f in engines_chosen})):
        if not finalists.resumable(record):
            if record.min_gain != plan.min_gain:
                # Another --min-gain (or a record judged before there was one) judges
                # the same figures again; nothing is re-measured.
                finalists.store_record(study, finalists.rejudged(record, plan.min_gain))
            return None
        resume = record
    _, running, _ = runner.progress()
    if running:
        # Many workers share this study: the last one to finish validates what they
        # found together (until then best.json is the search's own, unvalidated best).
        note(f"{running} trial(s) still running in other workers; the last "
             "worker to finish validates the finalists")
        return None
    own = (_screen_ranked(plan, runner) if target_prices is not None
           else finalists.pick_finalists(study, plan.objective, plan.finalists))
    # The floor yields to a smaller --finalists: the user's own count stands.
    floor = min(SPECULATIVE_FLOOR, plan.finalists)
    chosen = [*own, *_from_screen(plan, runner, floor, floor - len(own)), *engines_chosen]
    predicted = (predict_pool(runner.context, chosen, held.pool,
                              target_prices.profiles if target_prices is not None else None)
                 if len(held.pool) > len(held.held_out) else {})
    return Race(chosen, predicted, resume, tuple(screens))


def race(plan: SearchPlan, runner: StudyRunner, planned: Race, budget: TimeBudget) -> Raced:
    """Race `planned`'s finalists on the held-out prompts, in what is left of the budget, and store
    its record in the study; those replay predicts far behind, and those the race's
    time does not hold, are left out, each said in one line."""
    study, held = runner.study, plan.split
    # Left out as behind only on predictions at the engines' own prices (issue 60).
    arms = planned.chosen
    behind = predicted_behind(arms, engine_pool_predictions(
        runner.context, arms, held.pool, runner.context.memo.get(ENGINE_PRICES))
        if len(held.pool) > len(held.held_out) else {})
    if behind:
        note("not raced, replay predicts them over "
             f"{PREDICTED_MARGIN:.0%} behind their engine's best on the held-out pool: "
             + ", ".join(f"{f.engine} {f.label} ({f.role})" for f in behind))
        arms = [f for f in arms if f not in behind]
    arms, unfit = fitting.race_arms(budget, arms, plan.engine_races)
    if unfit:
        note(f"not raced, the time left holds {len(arms)} finalists beside the AR "
             "baseline (autotune's own two first, then each engine's best): "
             + ", ".join(f"{f.engine} {f.label} ({f.role})" for f in unfit))
    resume = planned.resume
    if resume is not None and finalists.record_arms(resume) != [f.arm for f in arms]:
        resume = None
    _say_racing(plan, arms, planned.engines, resume)
    record = finalists.measure_finalists(runner.context, arms, held.held_out,
                                         plan.validation_repeats,
                                         len(ranking.complete(study)), held.source,
                                         on_prompt=held_out_prompt, min_gain=plan.min_gain,
                                         pool=held.pool, predicted=planned.predicted,
                                         budget_s=fitting.race_seconds(plan, budget),
                                         resume=resume,
                                         reserve=fitting.race_reserve(plan, budget))
    record = fitting.with_cut_engines(record, unfit, arms, planned.engines)
    _say_race_stop(budget, record.race, len(held.held_out))
    finalists.store_record(study, fitting.undecided_if_cut(record, budget))
    return Raced(arms, planned.predicted)


def _say_racing(plan: SearchPlan, arms: list[finalists.Finalist], engines: tuple[str, ...],
                resume: ValidationRecord | None) -> None:
    """The race's line: its finalists, by engine, and its sample."""
    held = plan.split
    names = ", ".join(f"trial {f.trial} ({f.role})" for f in arms
                      if f.engine == finalists.OWN_ENGINE) or "none"
    if engines:
        names += "; " + ", ".join(f"{engine}: {sum(f.engine == engine for f in arms)}"
                                  for engine in engines)
    again = (f", resumed after {resume.race.measured} measured"
             if resume is not None and resume.race is not None else "")
    note(f"racing {len(arms)} finalists ({names}) against the AR "
         f"baseline: up to {len(held.held_out)} of the {len(held.pool)} held-out prompts "
         f"measured x {plan.validation_repeats} repeats{again}")


def race_on(plan: SearchPlan, runner: StudyRunner, raced: Raced | None,
            budget: TimeBudget) -> None:
    """The main race resumed where its share of the budget stopped it, in the time the
    later stages left over (the engines' races ran shorter than estimated): time left
    goes to the race, not unused (issue 59: 77 s of 600 were)."""
    study = runner.study
    record = finalists.current_record(study)
    if raced is None or record is None or not finalists.resumable(record):
        return
    seconds = fitting.left_for_race(budget, record)
    if seconds is None:
        return
    note(f"resuming the race after {record.race.measured} of {len(plan.held_out)} "
         f"held-out prompts: {seconds:.0f} s of the budget are left")
    resumed = finalists.measure_finalists(
        runner.context, raced.chosen, plan.held_out, plan.validation_repeats,
        len(ranking.complete(study)), plan.split.source, on_prompt=held_out_prompt,
        min_gain=plan.min_gain, pool=plan.pool, predicted=raced.predicted,
        budget_s=seconds, resume=record, reserve=fitting.race_reserve(plan, budget))
    # What the resumed race does not race stays as it was: the engines' races in
    # themselves, the answers' bases, the engines the race's time cut.
    resumed = resumed.model_copy(update={
        "engine_races": record.engine_races, "engine_bases": record.engine_bases,
        "engines": {**record.engines, **resumed.engines},
        "engine_finalists": {**record.engine_finalists, **resumed.engine_finalists}})
    _say_race_stop(budget, resumed.race, len(plan.held_out))
    finalists.store_record(study, fitting.undecided_if_cut(resumed, budget))


def _say_race_stop(budget: TimeBudget, race_log: RaceLog | None, sample: int) -> None:
    """Where the main race stopped, for the summary: in the end, not where its share did
    (a resumed race replaces the line)."""
    if race_log is None:
        return
    budget.forget_stops("the race after ")
    if race_log.stopped == "budget":
        budget.stopped_at(f"the race after {race_log.measured} of {sample} held-out prompts")


def _screen_study(plan: SearchPlan, runner: StudyRunner) -> optuna.Study | None:
    """The run's replay screen; None where no screen ran (the budget left it out)."""
    try:
        return optuna.load_study(study_name=screen_study_name(plan.study_name),
                                 storage=runner.storage)
    except KeyError:
        return None


def _screen_ranked(plan: SearchPlan, runner: StudyRunner) -> list[finalists.Finalist]:
    """Autotune's own finalists where the --target engine's own costs ranked its screen:
    the screen's best --finalists configs, then the best documented default; the
    measured trials' ranking (autotune's decoder's costs) only where no screen ran."""
    study = runner.study
    screen = _screen_study(plan, runner)
    if screen is None:
        return finalists.pick_finalists(study, plan.objective, plan.finalists)
    chosen = screen_ranked_finalists(study, screen, plan.objective, plan.finalists)
    chosen += finalists.default_finalist(study, plan.objective, chosen)
    note(f"autotune's own finalists: the screen's best at {plan.target}'s own costs "
         "(profiled in the engine), not the measured trials' ranking (timed in "
         "autotune's decoder): " + ", ".join(f"{f.label} ({f.role})" for f in chosen))
    return chosen


def _from_screen(plan: SearchPlan, runner: StudyRunner, floor: int,
                 need: int) -> list[finalists.Finalist]:
    """Autotune's own finalists from its replay screen where its measured trials gave
    fewer than the two a decision needs (`search.screen_finalists`), said in one line."""
    if need <= 0 or plan.fidelity != "multi":
        return []
    screen = _screen_study(plan, runner)
    if screen is None:
        return []
    taken = screen_finalists(runner.study, screen, plan.objective, need)
    if taken:
        note(f"autotune's own finalists: the measured trials gave {floor - need} "
             f"of the {floor} a decision needs; racing the screen's "
             + ", ".join(f"{f.label} ({f.role})" for f in taken)
             + " too (their search figures are replay's predictions)")
    return taken
