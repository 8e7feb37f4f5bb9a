"""Running a search plan: models -> study (after the replay screen) -> finalists on the
held-out prompts -> K per batch size -> run folder, report and exports.

Ctrl-C, by phase (each ends with exit code 130 and leaves no half-written file; every
file of the run folder is replaced atomically; `autotune.pipeline.interrupts.Stops` is
the one place that turns it into a stage's clean stop):
- before the study (loading, the hardware profile): nothing is written, not even the
  run folder;
- inside a trial: the trial is marked interrupted (failed, not counted) and queued
  again, then the run files, report and exports are written and the summary printed;
- between trials (sampling, the run files, the progress line): the same, with no trial
  to mark;
- while the finalists are validated: the run files, report and exports are written
  with the search's own (unvalidated) best, and a rerun validates;
- while the report or the exports are written: they are left as they were (the
  previous ones, or none), and the message says which command redoes them.

After the study stops (not by Ctrl-C), the finalists are re-measured on the held-out
prompts (`autotune.search.finalists`); `best.json`, the report and the exports follow the
validated answer.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import optuna

from autotune.backends import BackendUnavailable, engine_cost, open_backend
from autotune.common.errors import AutotuneError
from autotune.common.memory import StagePeaks, TreePeaks
from autotune.frozen.record import FrozenContext
from autotune.schema.engines import engine_rules
from autotune.measure.profile import PROFILE_FILE, run_profile, save_run_profile
from autotune.pipeline import fitting
from autotune.pipeline.budget import SPECULATIVE_FLOOR, Budget
from autotune.pipeline.interrupts import INTERRUPTED, Stops
from autotune.pipeline.loading import load_models
from autotune.pipeline.plan import SearchPlan
from autotune.pipeline.progress import Progress, held_out_prompt, note, warn
from autotune.pipeline.record import record_stages, study_identity, write_run_record
from autotune.replay import PARTS_FILE
from autotune.report import write_report
from autotune.space import BoundSpace

# By attribute (`run_folder.write_run_files`, `finalists.measure_finalists`):
# tests/phase_driver.py parks a run there.
from autotune.runs import folder as run_folder
from autotune.runs.engine_exports import write_engine_exports
from autotune.runs.exports_folder import write_exports
from autotune.runs.folder import BEST_FILE, RUN_FILE, TRIALS_FILE, ranked_documents
from autotune.search import finalists, ranking
from autotune.search.objectives import EvalContext, Objective
from autotune.search.engine_prices import (ENGINE_PRICES, engine_pool_predictions,
                                           price_engines)
from autotune.search.engine_screens import (
    PREDICTED_MARGIN,
    engine_finalists,
    predicted_behind,
    screen_engines,
)
from autotune.search.engine_races import (EngineRaceSetup, note_unraced,
                                          predicted_because, race_filed, race_in_engine,
                                          raced_finalists, stale_races)
from autotune.search.pool_prediction import predict_pool
from autotune.search.schedule_stage import run_schedule
from autotune.search.screen_finalists import screen_finalists
from autotune.search.screening import (
    next_screened,
    params_key,
    run_screen,
    screen_failure,
    screen_study_name,
    screened_queue,
    write_screen_csv,
)
from autotune.search.study import (
    BUDGET_ATTR,
    SCREENED_ATTR,
    TRIALS_ASKED_ATTR,
    SearchSettings,
    StudyRunner,
    TrialEvent,
)
from autotune.workloads.prompts import workload_digest
from autotune.workloads.split import sample_reserve

@dataclass(frozen=True)
class SearchOutcome:
    """How a search run ended, for the summary."""

    # budget | timeout | interrupted | infeasible | grid (StudyRunner.run's reasons).
    reason: str
    run_dir: Path
    # None: stopped (Ctrl-C) while screening, before the measured study ran.
    study: optuna.Study | None
    objective: Objective
    finished: int                  # trials counted toward the budget
    budget: int
    seconds: float                 # this run's time in the study, validation and files
    files: list[str]               # what the run folder holds, for the last line
    # (stage, seconds) in the order they ran: loading, screening, trials, the engines'
    # screens, the pool's predictions, the race, the files; for the summary.
    stages: tuple[tuple[str, float], ...] = ()
    # --time-budget: its lines for the summary (what was cut to fit, what a larger
    # budget would add); empty without one.
    budget_lines: tuple[str, ...] = ()
    # Each stage's peak resident set in bytes, in the order of `stages` (issue 51: the
    # run reports its own memory, in the summary and run.json).
    peak_rss: tuple[int, ...] = ()
    # Each stage's peak of this process and its engines together (PSS, sampled each
    # second; issue 59: vLLM's engines and llama-server are children), as `peak_rss`.
    peak_tree: tuple[int, ...] = ()

    @property
    def exit_code(self) -> int:
        """130 after Ctrl-C (the shell's convention), else 0."""
        return 130 if self.reason == INTERRUPTED else 0


def _with_later_turns(plan: SearchPlan, target: Any) -> SearchPlan:
    """`--turns all`: every prompt list with its conversations' later turns, each right
    after the turn before it (the measured sample's order too), answered once."""
    from autotune.measure.conversations import with_later_turns

    answers: dict[str, str] = {}
    total = sum(len(p.follow_ups) for p in (*plan.split.search, *plan.split.pool))
    if total:
        note(f"answering the earlier turns of multi-turn prompts (up to "
             f"{total} greedy decodes, once)")

    def expand(prompts: list[Any]) -> list[Any]:
        return with_later_turns(target, prompts, plan.max_new_tokens, answers=answers)

    split = plan.split._replace(
        search=expand(plan.split.search), held_out=expand(plan.split.held_out),
        pool=expand(plan.split.pool),
        source=plan.split.source + "; every turn of multi-turn prompts, in order")
    return dataclasses.replace(plan, split=split)


def run_search(plan: SearchPlan) -> SearchOutcome:
    """Run `plan`: load its models, open (or resume) its study, screen, measure, validate
    the finalists, tune the schedule, and write the run folder."""
    clock = _Stages()
    try:
        return _run_search(plan, clock)
    finally:
        clock.close()


def _run_search(plan: SearchPlan, clock: _Stages) -> SearchOutcome:
    """`run_search` with the stages' clock it keeps."""
    budget = fitting.start(plan)
    models = load_models(plan)
    clock.lap("loading the models")
    if plan.turns == "all":
        plan = _with_later_turns(plan, models.target)
    # The machine's speed first: with a budget, every count below is sized from it.
    speed = fitting.measure_speed(budget, models.target,
                                  plan.prompts[0] if plan.prompts else None)
    _quiet_optuna()
    identity = study_identity(plan, models)
    # Once per run folder (reused on resume): where verifying more tokens stops being
    # nearly free on this hardware, for the report. A failure is a warning only. It is
    # measured before the study is opened (the worker that creates a shared study queues
    # the baseline and presets as it starts, before the other workers use up the
    # budget) and written only once the study has accepted this run; the folder itself
    # is made only after it, so a Ctrl-C while loading or profiling leaves nothing.
    # Not for an engine that decodes in its own process (llama-server): our forward's
    # cost would describe another engine than the one every trial is measured in.
    in_own_process = engine_rules(plan.target).measures_in_engine
    profile, fresh = ((None, False) if in_own_process
                      or not fitting.profile_fits(plan, budget, speed)
                      else run_profile(plan.run_dir, models.target))
    settings = SearchSettings(
        study_name=plan.study_name, storage=plan.storage, trials=plan.trials,
        sampler=plan.sampler, seed=plan.seed, timeout_s=plan.timeout_s,
        trial_timeout_s=plan.trial_timeout_s, prune=plan.prune, enqueue=list(plan.enqueue),
        concurrency=plan.concurrency,
        study_attrs={**identity.to_json(),
                     "fidelity": plan.fidelity if plan.fidelity in ("replay", "engine")
                     else "measure"})
    context = EvalContext(target=models.target, draft=models.draft, prompts=plan.prompts,
                          max_new_tokens=plan.max_new_tokens, seed=plan.seed, memo={},
                          fidelity="replay" if plan.fidelity == "replay" else "measure",
                          replay_parts=plan.run_dir / PARTS_FILE,
                          backend=models.backend if plan.fidelity == "engine" else None,
                          final_backend=models.backend)
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    # The measured study is opened first: a run it refuses (another space, model,
    # workload) is refused before anything is screened or written.
    runner = StudyRunner(settings, models.space, plan.objective, context)
    stops = Stops(plan.run_dir, plan.run_dir / BEST_FILE)
    clock.lap("profiling the hardware")
    screening = _screen_context(plan, runner)
    # With a budget, the screen's references and cost parts come first (no deadline can
    # cut them), and every stage is sized from the time left after them.
    screened = fitting.prepare_screen(plan, budget, speed, screening)
    if budget is not None and speed is not None:
        plan = fitting.size(plan, budget, speed, len(models.engine_spaces), screened)
        settings.trials = plan.trials
    if (plan.fidelity == "multi" and screened
            and not _screen(plan, runner, screening, stops, budget)):
        return SearchOutcome(INTERRUPTED, plan.run_dir, None, plan.objective, 0,
                             settings.trials, 0.0, [], clock.stages,
                             tuple(budget.summary()) if budget is not None else (),
                             peak_rss=clock.peak_rss, peak_tree=clock.peak_tree)
    clock.lap("screening by replay")
    if fresh:
        save_run_profile(plan.run_dir, profile)
    record = write_run_record(plan, models, identity)
    try:
        return _run_study(plan, runner, record.frozen, models.engine_spaces,
                          clock, screening, stops, budget)
    finally:
        if models.backend is not None:
            models.backend.close()      # vLLM's engines kept started between looks


def _screen_context(plan: SearchPlan, runner: StudyRunner) -> EvalContext:
    """What the replay screens evaluate with: the study's context on the screen prompts
    (the search prompts and more, `--screen-prompts`), with a memo of its own (their
    reference decodes), shared by autotune's screen and the engines'."""
    return dataclasses.replace(runner.context, prompts=plan.split.screened, memo={})


class _Stages:
    """How long each stage of a run took and its peak resident set, for the summary's
    last lines and run.json."""

    def __init__(self) -> None:
        self.stages: tuple[tuple[str, float], ...] = ()
        self.peak_rss: tuple[int, ...] = ()
        self.peak_tree: tuple[int, ...] = ()
        self._since = time.monotonic()
        self._memory = StagePeaks()
        self._tree = TreePeaks()
        self._carried = 0          # the peak of a skipped stage, counted in the next
        self._carried_tree = 0

    def lap(self, stage: str) -> None:
        """Close `stage` at now (a stage that took no time, skipped, is left out)."""
        now = time.monotonic()
        peak = max(self._memory.lap(), self._carried)
        tree = max(self._tree.lap(), self._carried_tree)
        if now - self._since >= 0.05:
            self.stages += ((stage, now - self._since),)
            self.peak_rss += (peak,)
            self.peak_tree += (tree,)
            self._carried = self._carried_tree = 0
        else:
            self._carried, self._carried_tree = peak, tree
        self._since = now

    def close(self) -> None:
        """Stop sampling the process tree's memory."""
        self._tree.close()


def _quiet_optuna() -> None:
    """Our progress lines say what Optuna's log would (a failed trial's one-line reason
    rather than its traceback); its sampler fallbacks on conditional knobs (CMA-ES, GP)
    are expected in a conditional space, not news."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning, module="optuna")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def _screen(plan: SearchPlan, runner: StudyRunner, context: EvalContext, stops: Stops,
            budget: Budget | None = None) -> bool:
    """The replay screen (multi fidelity): queue what it found worth measuring in the
    measured study and cut the trial budget to it; on resume, screen on to a larger
    --screen and measure more for a larger --trials (`_resume_screened`). False after
    Ctrl-C (the screened configs are in the storage; a rerun resumes)."""
    settings = runner.settings
    resumed = runner.screened_queued()
    screen_settings = _on_screen_prompts(settings, plan)
    if budget is not None:
        screen_settings = dataclasses.replace(screen_settings, clock=budget.clock,
                                              stop_at=budget.stop_at("screen"))
    screened = stops.run("screen", lambda: run_screen(screen_settings, plan.screen,
                                                      runner.space, plan.objective, context))
    if budget is not None:
        budget.done("screen")
    if screened is None:
        return False
    screen, reason = screened
    if budget is not None and reason == "deadline":
        finished, _, _ = screen.progress()
        budget.stopped.append(f"the screen after {finished} of {plan.screen} configs")
    write_screen_csv(plan.run_dir, screen)
    if resumed:
        _resume_screened(plan, runner, screen)
        return True
    settings.screened = screened_queue(screen, plan.objective, max(plan.trials - 1, 0))
    if settings.screened and len(settings.screened) + 1 < plan.trials:
        # The screen has already explored the space: what it found distinct is what
        # is worth decoding, not sampler guesses on top.
        note(f"the screen found {len(settings.screened)} distinct configs "
             f"worth measuring; measuring {len(settings.screened) + 1} trials "
             f"(the AR baseline included) instead of {plan.trials}")
        settings.trials = len(settings.screened) + 1
    if not settings.screened:
        warn(f"the screen completed no speculative config "
             f"({screen_failure(screen)}); the measured trials are the sampler's own")
        settings.screened = None
    runner.study.set_user_attr(TRIALS_ASKED_ATTR, plan.trials)
    runner.study.set_user_attr(BUDGET_ATTR, settings.trials)
    return True


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


def _on_screen_prompts(settings: SearchSettings, plan: SearchPlan) -> SearchSettings:
    """`settings` for a screen, naming its prompts among what defines it (a screen
    resumed on other prompts would rank figures of two workloads together)."""
    return dataclasses.replace(settings, study_attrs={
        **settings.study_attrs, "screen_sha256": workload_digest(plan.split.screened)})


def _run_study(plan: SearchPlan, runner: StudyRunner, context: FrozenContext,
               engine_spaces: dict[str, BoundSpace], clock: _Stages,
               screening: EvalContext, stops: Stops, time_budget: Budget | None = None
               ) -> SearchOutcome:
    """Run the trials with a progress display, screen the other engines' spaces
    (`--target all`), validate the finalists on the held-out prompts, tune the schedule,
    then write the run folder."""
    objective, run_dir = plan.objective, plan.run_dir
    done, _, _ = runner.progress()
    budget = runner.settings.trials
    note(f"study {plan.study_name!r}: {done} of {budget} trials finished; "
         f"run folder {run_dir}")
    progress = Progress(budget, done)
    began = time.monotonic()
    if time_budget is not None:
        runner.settings.clock = time_budget.clock
        runner.settings.stop_at = time_budget.stop_at("trials")

    def finished(event: TrialEvent) -> None:
        run_folder.write_run_files(run_dir, runner.study, objective, context)
        progress.finished(event)

    try:
        reason = runner.run(on_trial=finished, on_start=progress.start)
    finally:
        progress.close()
    if time_budget is not None:
        time_budget.done("trials")
        if reason == "deadline":
            finished_now, _, _ = runner.progress()
            time_budget.stopped.append(f"the measured trials after {finished_now} of {budget}")
    clock.lap("measured trials")
    stops.interrupted_by(reason)
    screens: dict[str, StudyRunner] = {}
    if (stops.going and plan.held_out and engine_spaces
            and fitting.engine_screen(plan, time_budget) > 0):
        def engines_stage() -> dict[str, StudyRunner]:
            stop = _engines_stop(time_budget)
            # Each engine that runs here prices its screen at its own costs (issue 60).
            runner.context.memo[ENGINE_PRICES] = price_engines(
                screening, [e for e in fitting.profiled_engines(plan, time_budget)
                            if e in engine_spaces], plan.model, plan.draft, plan.run_dir)
            return screen_engines(_on_screen_prompts(runner.settings, plan), engine_spaces,
                                  objective, screening,
                                  fitting.engine_screen(plan, time_budget), stop)
        screens = stops.run("engines", engines_stage) or {}
        if time_budget is not None:
            time_budget.done("engines")
        clock.lap("the engines' screens")
    if stops.going and plan.held_out:
        def validate() -> None:
            nonlocal plan           # sized to the held-out share of the budget
            plan = fitting.held_out(plan, time_budget, runner.study)
            raced = _validate(plan, runner, screens, clock, time_budget)
            # Every answered engine not raced in itself: why its answer is predicted.
            note_unraced(runner.study, plan.engine_races, plan.model, plan.draft,
                         runner.context.target.device.type)
            if plan.engine_races:
                clock.lap("racing the finalists")
                _race_in_engines(plan, runner, time_budget)
                clock.lap("racing in the engines themselves")
            _race_on(plan, runner, raced, time_budget)
            clock.lap("resuming the race")
        stops.run("validation", validate)
    clock.lap("racing the finalists")
    if stops.going and plan.batch_sizes:
        stops.run("schedule", lambda: run_schedule(
            runner.study, objective, runner.context, runner.space, plan.batch_sizes,
            plan.schedule_ks, runner.context.prompts, plan.held_out,
            run_dir if plan.replays else None))
    clock.lap("K per batch size")

    def write_files() -> list[str]:
        run_folder.write_run_files(run_dir, runner.study, objective, context)
        return _write_outputs(plan, runner.study, context)
    outputs = stops.run("files", write_files, after_stop=True) or []
    reason = INTERRUPTED if stops.interrupted else reason
    clock.lap("the run folder, report and exports")
    record_stages(run_dir, clock.stages, clock.peak_rss, clock.peak_tree)
    done, _, _ = runner.progress()
    files = [TRIALS_FILE, BEST_FILE, RUN_FILE, *outputs,
             *([PROFILE_FILE] if (run_dir / PROFILE_FILE).is_file() else [])]
    return SearchOutcome(reason, run_dir, runner.study, objective, done, budget,
                         time.monotonic() - began, files, clock.stages,
                         tuple(time_budget.summary()) if time_budget is not None else (),
                         peak_rss=clock.peak_rss, peak_tree=clock.peak_tree)


def _engines_stop(budget: Budget | None) -> tuple[float, Callable[[], float]] | None:
    """The engines' screens' deadline and its clock, with a budget."""
    return None if budget is None else (budget.stop_at("engines"), budget.clock)


@dataclass(frozen=True)
class _Raced:
    """What the main race ran with: its finalists and their pool predictions (a race
    resumed in the same run takes them as they were)."""

    chosen: list[finalists.Finalist]
    predicted: dict[str, Any]


def _validate(plan: SearchPlan, runner: StudyRunner,
              screens: dict[str, StudyRunner], clock: _Stages | None = None,
              budget: Budget | None = None) -> _Raced | None:
    """Race the finalists on the held-out prompts and store the record in the study,
    unless a current record of these prompts and repeats is there already (a rerun of
    a finished search loses nothing and re-measures nothing); a race its budget
    stopped undecided is resumed where it stopped."""
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
            return
        resume = record
    _, running, _ = runner.progress()
    if running:
        # Many workers share this study: the last one to finish validates what they
        # found together (until then best.json is the search's own, unvalidated best).
        note(f"{running} trial(s) still running in other workers; the last "
             "worker to finish validates the finalists")
        return
    own = finalists.pick_finalists(study, plan.objective, plan.finalists)
    # The floor yields to a smaller --finalists: the user's own count stands.
    floor = min(SPECULATIVE_FLOOR, plan.finalists)
    chosen = [*own, *_from_screen(plan, runner, floor, floor - len(own)), *engines_chosen]
    predicted = (predict_pool(runner.context, chosen, held.pool)
                 if len(held.pool) > len(held.held_out) else {})
    if clock is not None:
        # The pool's reference decodes and tables apart from the race's measurements.
        clock.lap("predicting the held-out pool")
    # Left out as behind only on predictions at the engines' own prices (issue 60).
    behind = predicted_behind(chosen, engine_pool_predictions(
        runner.context, chosen, held.pool, runner.context.memo.get(ENGINE_PRICES))
        if len(held.pool) > len(held.held_out) else {})
    if behind:
        note("not raced, replay predicts them over "
             f"{PREDICTED_MARGIN:.0%} behind their engine's best on the held-out pool: "
             + ", ".join(f"{f.engine} {f.label} ({f.role})" for f in behind))
        chosen = [f for f in chosen if f not in behind]
    chosen, unfit = fitting.race_arms(budget, chosen, plan.engine_races)
    if unfit:
        note(f"not raced, the time left holds {len(chosen)} finalists beside the AR "
             "baseline (autotune's own two first, then each engine's best): "
             + ", ".join(f"{f.engine} {f.label} ({f.role})" for f in unfit))
    if resume is not None and finalists.record_arms(resume) != [f.arm for f in chosen]:
        resume = None
    names = ", ".join(f"trial {f.trial} ({f.role})" for f in chosen
                      if f.engine == finalists.OWN_ENGINE) or "none"
    if screens:
        names += "; " + ", ".join(f"{engine}: {sum(f.engine == engine for f in chosen)}"
                                  for engine in screens)
    again = (f", resumed after {resume.race.measured} measured"
             if resume is not None and resume.race is not None else "")
    note(f"racing {len(chosen)} finalists ({names}) against the AR "
         f"baseline: up to {len(held.held_out)} of the {len(held.pool)} held-out prompts "
         f"measured x {plan.validation_repeats} repeats{again}")

    record = finalists.measure_finalists(runner.context, chosen, held.held_out,
                                         plan.validation_repeats,
                                         len(ranking.complete(study)), held.source,
                                         on_prompt=held_out_prompt, min_gain=plan.min_gain,
                                         pool=held.pool, predicted=predicted,
                                         budget_s=fitting.race_seconds(plan, budget),
                                         resume=resume,
                                         reserve=sample_reserve(held, plan.seed))
    record = fitting.with_cut_engines(record, unfit, chosen)
    if budget is not None:
        budget.done("race")
        if record.race is not None and record.race.stopped == "budget":
            budget.stopped.append(f"the race after {record.race.measured} of "
                                  f"{len(held.held_out)} held-out prompts")
        record = fitting.undecided_if_cut(record, budget)
    finalists.store_record(study, record)
    return _Raced(chosen, predicted)


def _race_on(plan: SearchPlan, runner: StudyRunner, raced: _Raced | None,
             budget: Budget | None) -> None:
    """The main race resumed where its share of the budget stopped it, in the time the
    later stages left over (the engines' races ran shorter than estimated): time left
    goes to the race, not unused (issue 59: 77 s of 600 were)."""
    study = runner.study
    record = finalists.current_record(study)
    seconds = fitting.left_for_race(budget)
    if (raced is None or record is None or seconds is None or record.race is None
            or not finalists.resumable(record)):
        return
    note(f"resuming the race after {record.race.measured} of {len(plan.held_out)} "
         f"held-out prompts: {seconds:.0f} s of the budget are left")
    resumed = finalists.measure_finalists(
        runner.context, raced.chosen, plan.held_out, plan.validation_repeats,
        len(ranking.complete(study)), plan.split.source, on_prompt=held_out_prompt,
        min_gain=plan.min_gain, pool=plan.pool, predicted=raced.predicted,
        budget_s=seconds, resume=record, reserve=sample_reserve(plan.split, plan.seed))
    # What the resumed race does not race stays as it was: the engines' races in
    # themselves, the answers' bases, the engines the race's time cut.
    resumed = resumed.model_copy(update={
        "engine_races": record.engine_races, "engine_bases": record.engine_bases,
        "engines": {**record.engines, **resumed.engines},
        "engine_finalists": {**record.engine_finalists, **resumed.engine_finalists}})
    if budget is not None and resumed.race is not None:
        # The summary says where the race stopped in the end, not where its share did.
        budget.stopped = [line for line in budget.stopped
                          if not line.startswith("the race after ")]
        if resumed.race.stopped == "budget":
            budget.stopped.append(f"the race after {resumed.race.measured} of "
                                  f"{len(plan.held_out)} held-out prompts")
    finalists.store_record(study, fitting.undecided_if_cut(resumed, budget))


def _from_screen(plan: SearchPlan, runner: StudyRunner, floor: int,
                 need: int) -> list[finalists.Finalist]:
    """Autotune's own finalists from its replay screen where its measured trials gave
    fewer than the two a decision needs (`search.screen_finalists`), said in one line."""
    if need <= 0 or plan.fidelity != "multi":
        return []
    try:
        screen = optuna.load_study(study_name=screen_study_name(plan.study_name),
                                   storage=runner.storage)
    except KeyError:                    # no screen ran (the budget left it out)
        return []
    taken = screen_finalists(runner.study, screen, plan.objective, need)
    if taken:
        note(f"autotune's own finalists: the measured trials gave {floor - need} "
             f"of the {floor} a decision needs; racing the screen's "
             + ", ".join(f"{f.label} ({f.role})" for f in taken)
             + " too (their search figures are replay's predictions)")
    return taken


def _race_in_engines(plan: SearchPlan, runner: StudyRunner, budget: Budget | None) -> None:
    """After the main race (`--target all`): each answered engine whose backend runs
    here races its finalists again in itself (`autotune.search.engine_races`), in its
    share of the budget; each race's record is stored as it ends (a Ctrl-C keeps the
    finished ones), and one an earlier run finished on this sample is kept."""
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
            if budget is not None and arms >= 2:
                budget.stopped.append(f"{engine}'s race in itself before it began (its "
                                      f"{arms} engines' start-up does not fit its share)")
            record = (predicted_because(record, engine, "no_finalist") if arms < 2 else
                      predicted_because(record, engine, "budget",
                                        *_start_up_fit(budget, deadline, engine, arms,
                                                       plan.model)))
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
        if budget is not None and raced.race is not None and raced.race.stopped == "budget":
            budget.stopped.append(f"{engine}'s race in itself after {raced.race.measured} "
                                  f"of {len(plan.held_out)} held-out prompts")
        raced = fitting.undecided_if_cut(raced, budget)
        record = race_filed(record, engine, raced)
        finalists.store_record(study, record)
    if budget is not None:
        budget.done("engine_races")


def _start_up_fit(budget: Budget | None, deadline: float | None, engine: str,
                  arms: int, model: str) -> tuple[str, float | None, float | None]:
    """A race the budget skipped, for its record: (why, the seconds its `arms` engines'
    start-up needed, the seconds the engines' races had left), at the pace kept; one
    dropped at planning, the budget's line (what it needs, what was left)."""
    if budget is None or deadline is None or budget.ar_s is None:
        return "its start-up does not fit its share", None, None
    if engine in budget.dropped:
        return budget.dropped[engine], None, None
    needed = arms * engine_cost(engine, model).start_seconds(budget.ar_s * budget.pace())
    return (f"its {arms} engines' start-up does not fit its share of the engines' races",
            needed, max(deadline - budget.clock(), 0.0))


def _write_outputs(plan: SearchPlan, study: optuna.Study, context: FrozenContext
                   ) -> list[str]:
    """The report and the exports of the best config, after the study has stopped.

    Neither may lose finished work: a failure here is a warning, the study and the
    run files are already on disk and `autotune report` / `autotune export` can redo
    it."""
    run_dir = plan.run_dir
    written = []
    try:
        write_report(run_dir, storage=plan.storage)
        written.append("report.html")
    except Exception as exc:  # noqa: BLE001 - the study is safe; say why and go on
        warn(f"no report written ({type(exc).__name__}: {exc}); "
             f"retry with: autotune report {run_dir}")
    if (run_dir / BEST_FILE).is_file():
        try:
            names = (write_engine_exports(run_dir / BEST_FILE, run_dir / "exports")
                     if _answers_engines(run_dir / BEST_FILE) else
                     write_exports(run_dir / BEST_FILE, run_dir / "exports",
                                   ranked_documents(study, plan.objective, context)))
            written.append(f"exports/ ({', '.join(names) or 'none: see its README.txt'})")
        except Exception as exc:  # noqa: BLE001 - as above
            warn(f"no exports written ({type(exc).__name__}: {exc}); "
                 f"retry with: autotune export {run_dir / BEST_FILE} --format ...")
    return written


def _answers_engines(best_path: Path) -> bool:
    """Whether the run's best.json holds per-engine answers (`--target all`, validated)."""
    from autotune.common.files import read_json
    from autotune.frozen.engines import engine_answers

    return bool(engine_answers(read_json(best_path)))

