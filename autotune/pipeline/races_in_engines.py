"""The engines' races in themselves (`--target all`), after the main race: each answered
engine whose backend runs here races its finalists again in itself
(`autotune.search.engine_races`), in its share of the budget. Each race's record is
stored as it ends (a Ctrl-C keeps the finished ones), and one an earlier run finished on
this sample is kept. An engine not raced in itself keeps autotune's decoder's
prediction under its rules, with why (its basis) in the record.
"""

from __future__ import annotations

from autotune.backends import BackendUnavailable, open_backend
from autotune.common.errors import AutotuneError
from autotune.pipeline import fitting
from autotune.pipeline.budget import TimeBudget
from autotune.pipeline.plan import SearchPlan
from autotune.pipeline.progress import held_out_prompt, note, warn
from autotune.search import finalists
from autotune.search.engine_races import (EngineRaceSetup, predicted_because, race_filed,
                                          race_in_engine, raced_finalists, stale_races)
from autotune.search.study import StudyRunner

__all__ = ["run_engine_races"]


def run_engine_races(plan: SearchPlan, runner: StudyRunner, budget: TimeBudget) -> None:
    """Race each stale engine's finalists in the engine itself, one after another."""
    study, ctx = runner.study, runner.context
    record = finalists.current_record(study)
    if record is None:
        return
    stale = stale_races(record, plan.engine_races, plan.held_out)
    if not stale:
        return
    deadline = fitting.engine_races_stop(budget)
    setup = EngineRaceSetup(sample=plan.held_out, pool=plan.pool,
                            repeats=plan.validation_repeats, min_gain=plan.min_gain,
                            source=plan.split.source, on_prompt=held_out_prompt)
    for index, engine in enumerate(stale):
        arms = len(raced_finalists(record.engine_finalists.get(engine, []))) + 1
        seconds = fitting.engine_race_seconds(plan, budget, deadline, engine,
                                              tuple(stale[index + 1:]), arms)
        if arms < 2 or (seconds is not None and seconds <= 0):
            if arms >= 2:
                budget.stopped_at(f"{engine}'s race in itself before it began (its "
                                  f"{arms} engines' start-up and first look do not fit its share)")
            record = (predicted_because(record, engine, "no_finalist") if arms < 2 else
                      predicted_because(record, engine, "budget",
                                        *fitting.start_up_fit(budget, deadline, engine,
                                                              arms, plan.model)))
            finalists.store_record(study, record)
            note(f"{engine}: not raced in itself; its answer stays autotune's decoder's "
                 "prediction under its rules")
            continue
        try:
            backend = open_backend(engine, ctx.target, ctx.draft, plan.model,
                                   plan.held_out, plan.max_new_tokens, (), plan.draft)
        except BackendUnavailable as exc:
            note(f"{engine}: not raced in itself ({exc}); its answer stays autotune's "
                 "decoder's prediction under its rules")
            record = predicted_because(record, engine, "failed", f"did not start: {exc}")
            finalists.store_record(study, record)
            continue
        note(f"racing {engine}'s {arms - 1} finalists again in {backend.label}, against "
             f"its own decoding without speculation: up to {len(plan.held_out)} held-out "
             f"prompts x {plan.validation_repeats} repeats")
        try:
            raced = race_in_engine(ctx, record, engine, setup, backend, seconds)
        except AutotuneError as exc:
            # The engine failed on this model or config (vLLM's CPU attention refuses
            # some head sizes): the finished work stands, its answer stays predicted.
            warn(f"{engine}: its race in itself failed ({exc}); its answer stays "
                 "autotune's decoder's prediction under its rules")
            record = predicted_because(record, engine, "failed", str(exc))
            finalists.store_record(study, record)
            continue
        finally:
            backend.close()
        if raced.race is not None and raced.race.stopped == "budget":
            budget.stopped_at(f"{engine}'s race in itself after {raced.race.measured} "
                              f"of {len(plan.held_out)} held-out prompts")
        raced = fitting.undecided_if_cut(raced, budget)
        record = race_filed(record, engine, raced)
        finalists.store_record(study, record)

