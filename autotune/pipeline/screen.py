"""The replay screen stage (multi fidelity): screen the space by replay, queue what it
found worth measuring in the measured study and cut the trial budget to it; on resume,
screen on to a larger --screen and measure more for a larger --trials. A Ctrl-C inside
it leaves the screened configs in the storage (a rerun resumes) and ends the run before
the run folder is written (`pipeline/run.py`'s stage table)."""

from __future__ import annotations

import dataclasses

from autotune.pipeline.budget import TimeBudget
from autotune.pipeline.plan import SearchPlan
from autotune.pipeline.progress import note, warn
from autotune.search.objectives import EvalContext
from autotune.search.screening import (
    next_screened,
    params_key,
    run_screen,
    screen_failure,
    screened_queue,
    write_screen_csv,
)
from autotune.search.study import (
    BUDGET_ATTR,
    SCREENED_ATTR,
    TRIALS_ASKED_ATTR,
    SearchSettings,
    StudyRunner,
)
from autotune.workloads.prompts import workload_digest

__all__ = ["on_screen_prompts", "run_replay_screen", "screen_context"]


def screen_context(plan: SearchPlan, runner: StudyRunner) -> EvalContext:
    """What the replay screens evaluate with: the study's context on the screen prompts
    (the search prompts and more, `--screen-prompts`), with a memo of its own (their
    reference decodes), shared by autotune's screen and the engines'."""
    return dataclasses.replace(runner.context, prompts=plan.split.screened, memo={})


def on_screen_prompts(settings: SearchSettings, plan: SearchPlan) -> SearchSettings:
    """`settings` for a screen, naming its prompts among what defines it (a screen
    resumed on other prompts would rank figures of two workloads together)."""
    return dataclasses.replace(settings, study_attrs={
        **settings.study_attrs, "screen_sha256": workload_digest(plan.split.screened)})


def run_replay_screen(plan: SearchPlan, runner: StudyRunner, context: EvalContext,
                      budget: TimeBudget) -> None:
    """The replay screen, to its share of the budget; what it found is queued in the
    measured study (`_resume_screened` on resume)."""
    settings = runner.settings
    resumed = runner.screened_queued()
    screen_settings = dataclasses.replace(on_screen_prompts(settings, plan),
                                          clock=budget.clock, stop_at=budget.stop_at("screen"))
    found, reason = run_screen(screen_settings, plan.screen, runner.space, plan.objective,
                               context)
    if reason == "deadline":
        finished, _, _ = found.progress()
        budget.stopped_at(f"the screen after {finished} of {plan.screen} configs")
    write_screen_csv(plan.run_dir, found)
    if resumed:
        _resume_screened(plan, runner, found)
        return
    settings.screened = screened_queue(found, plan.objective, max(plan.trials - 1, 0))
    if settings.screened and len(settings.screened) + 1 < plan.trials:
        # The screen has already explored the space: what it found distinct is what
        # is worth decoding, not sampler guesses on top.
        note(f"the screen found {len(settings.screened)} distinct configs "
             f"worth measuring; measuring {len(settings.screened) + 1} trials "
             f"(the AR baseline included) instead of {plan.trials}")
        settings.trials = len(settings.screened) + 1
    if not settings.screened:
        warn(f"the screen completed no speculative config "
             f"({screen_failure(found)}); the measured trials are the sampler's own")
        settings.screened = None
    runner.study.set_user_attr(TRIALS_ASKED_ATTR, plan.trials)
    runner.study.set_user_attr(BUDGET_ATTR, settings.trials)


def _resume_screened(plan: SearchPlan, runner: StudyRunner, screen: StudyRunner) -> None:
    """The trial budget of a resumed multi-fidelity study. The same --trials (or a
    smaller one) resumes to the budget the first run set; a larger one queues the
    screen's next distinct configs by rank, then leaves the sampler the rest. Whenever
    fewer trials are measured than asked, one line says why."""
    settings, study = runner.settings, runner.study
    screened = int(study.user_attrs[SCREENED_ATTR])
    # A study from before these attributes: its run asked for no more than it queued.
    asked = int(study.user_attrs.get(TRIALS_ASKED_ATTR, screened + 1))
    budget = int(study.user_attrs.get(BUDGET_ATTR, min(asked, screened + 1)))
    done, _, _ = runner.progress()
    if plan.trials <= asked:
        settings.trials = min(plan.trials, budget)
        if plan.trials < done:
            settings.trials = done      # "5 of 5 finished", not "5 of 2"
            note(f"{done} trials are finished already, more than --trials "
                 f"{plan.trials}: nothing more is measured")
        elif settings.trials < plan.trials:
            note(f"measuring {settings.trials} trials (the AR baseline "
                 f"included) instead of {plan.trials}: the screen found "
                 f"{settings.trials - 1} distinct configs worth measuring (a --trials "
                 f"above {asked} adds the sampler's own)")
        return
    slots = max(plan.trials - done - runner.waiting(), 0)
    measured = {params_key(params) for params in runner.queued_params()}
    more = next_screened(screen, plan.objective, measured, slots)
    runner.queue_screened(more)
    settings.trials = plan.trials
    study.set_user_attr(TRIALS_ASKED_ATTR, plan.trials)
    study.set_user_attr(BUDGET_ATTR, plan.trials)
    own = slots - len(more)
    note(f"--trials {plan.trials} extends the study's {budget}: "
         f"{len(more)} more screened configs by the screen's rank"
         + (f", then {own} of the sampler's own (the screen has no other distinct "
            "config)" if own > 0 else ""))
