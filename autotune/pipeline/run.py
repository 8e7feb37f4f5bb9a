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

The stages after the set-up are one table (`_stages`), in the order they run; one loop
(`pipeline.stages.run_stages`) runs each under the stops, the per-stage clock ("time by
stage") and the `--time-budget` (a `NoBudget` without one, so no stage asks which).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.frozen.record import FrozenContext
from autotune.measure.profile import PROFILE_FILE, run_profile, save_run_profile
from autotune.pipeline import fitting, outputs, validation
from autotune.pipeline.budget import TimeBudget
from autotune.pipeline.interrupts import INTERRUPTED, Stops
from autotune.pipeline.loading import SearchModels, load_models
from autotune.pipeline.plan import SearchPlan
from autotune.pipeline.progress import Progress, note
from autotune.pipeline.races_in_engines import run_engine_races
from autotune.pipeline.record import (StudyIdentity, record_stages, study_identity,
                                      write_run_record)
from autotune.pipeline.screen import on_screen_prompts, run_replay_screen, screen_context
from autotune.pipeline.stages import Stage, StageClock, run_stages
from autotune.replay import PARTS_FILE
# By attribute (`run_folder.write_run_files`): tests/phase_driver.py parks a run there.
from autotune.runs import folder as run_folder
from autotune.runs.folder import BEST_FILE, RUN_FILE, TRIALS_FILE
from autotune.schema.engines import engine_rules
from autotune.search.engine_prices import ENGINE_PRICES, EnginePrices, price_engines
from autotune.search.engine_races import note_unraced
from autotune.search.engine_screens import screen_engines
from autotune.search.objectives import EvalContext, Objective
from autotune.search.schedule_stage import run_schedule
from autotune.search.study import SearchSettings, StudyRunner, TrialEvent


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
    clock = StageClock()
    try:
        return _run_search(plan, clock)
    finally:
        clock.close()


def _run_search(plan: SearchPlan, clock: StageClock) -> SearchOutcome:
    """`run_search` with the stages' clock it keeps: the models loaded, the run set up,
    then its stages, in the order of `_stages`."""
    budget = fitting.start(plan)
    models = load_models(plan)
    clock.lap("loading the models")
    try:
        run = _set_up(plan, models, budget, clock)
        run_stages(_stages(run), run.stops, budget, clock)
        return run.outcome()
    finally:
        if models.backend is not None:
            models.backend.close()      # vLLM's engines kept started between looks


def _stages(run: _Run) -> tuple[Stage, ...]:
    """The run's stages, in the order they run. A Ctrl-C in the screen ends the run with
    nothing written (the run record comes after it); in any later stage, the run files,
    report and exports are still written (`after_stop`)."""
    return (
        Stage("screening by replay", run.screen, stops="screen", budget="screen",
              when=run.screen_runs),
        Stage(None, run.write_record, stops=None),
        Stage("measured trials", run.measure, stops=None, budget="trials"),
        Stage("the engines' screens", run.screen_engines, stops="engines", budget="engines",
              when=run.engine_screens_run),
        Stage("predicting the held-out pool", run.choose_finalists, stops="validation",
              when=run.validation_runs),
        Stage("racing the finalists", run.race, stops="validation", budget="race",
              when=run.validation_runs),
        Stage("racing in the engines themselves", run.race_in_engines, stops="validation",
              budget="engine_races", when=run.engine_races_run),
        Stage("resuming the race", run.race_on, stops="validation", when=run.validation_runs),
        Stage("K per batch size", run.schedule, stops="schedule", when=run.schedule_runs),
        Stage("the run folder, report and exports", run.write_files, stops="files",
              when=run.recorded, after_stop=True),
    )


def _set_up(plan: SearchPlan, models: SearchModels, budget: TimeBudget,
            clock: StageClock) -> _Run:
    """Everything before the stages: the machine's speed (with a budget, every count is
    sized from it), the hardware profile, the measured study opened, the screen's set-up
    and, with a budget, the plan sized to the time left."""
    if plan.turns == "all":
        plan = _with_later_turns(plan, models.target)
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
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    # The measured study is opened first: a run it refuses (another space, model,
    # workload) is refused before anything is screened or written.
    runner = StudyRunner(_settings(plan, identity), models.space, plan.objective,
                         _context(plan, models))
    clock.lap("profiling the hardware")
    screening = screen_context(plan, runner)
    # With a budget, the screen's references and cost parts come first (no deadline can
    # cut them), and every stage is sized from the time left after them.
    screened = fitting.prepare_screen(plan, budget, speed, screening)
    # `--target ENGINE` that measures here: its screen ranks at the engine's own costs,
    # profiled (or loaded) now, before the sizing, which counts what it took.
    target_prices = fitting.price_target(plan, budget, speed, screening) if screened else None
    plan = fitting.size(plan, budget, speed, len(models.engine_spaces), screened)
    runner.settings.trials = plan.trials
    return _Run(plan, models, identity, runner, screening, budget,
                Stops(plan.run_dir, plan.run_dir / BEST_FILE), clock,
                screen_planned=plan.fidelity == "multi" and screened,
                validates=bool(plan.held_out),
                profile=profile if fresh else None, target_prices=target_prices)


def _settings(plan: SearchPlan, identity: StudyIdentity) -> SearchSettings:
    """The measured study's settings, its identity among its attributes."""
    return SearchSettings(
        study_name=plan.study_name, storage=plan.storage, trials=plan.trials,
        sampler=plan.sampler, seed=plan.seed, timeout_s=plan.timeout_s,
        trial_timeout_s=plan.trial_timeout_s, prune=plan.prune, enqueue=list(plan.enqueue),
        concurrency=plan.concurrency,
        study_attrs={**identity.to_json(),
                     "fidelity": plan.fidelity if plan.fidelity in ("replay", "engine")
                     else "measure"})


def _context(plan: SearchPlan, models: SearchModels) -> EvalContext:
    """What the measured trials evaluate with."""
    return EvalContext(target=models.target, draft=models.draft, prompts=plan.prompts,
                       max_new_tokens=plan.max_new_tokens, seed=plan.seed, memo={},
                       fidelity="replay" if plan.fidelity == "replay" else "measure",
                       replay_parts=plan.run_dir / PARTS_FILE,
                       backend=models.backend if plan.fidelity == "engine" else None,
                       final_backend=models.backend)


@dataclass
class _Run:
    """One search run as its stages pass it on: each stage's work and `when` is a method
    here, reading what the stages before it left."""

    plan: SearchPlan                 # sized to the held-out share when validation starts
    models: SearchModels
    identity: StudyIdentity
    runner: StudyRunner
    screening: EvalContext           # the replay screens' (`screen_context`)
    budget: TimeBudget
    stops: Stops
    clock: StageClock
    screen_planned: bool             # multi fidelity, and the budget holds its set-up
    validates: bool                  # prompts are held out
    profile: Any = None              # the hardware profile measured now, to write
    # `--target ENGINE`'s own costs its screen ranked at (`fitting.price_target`).
    target_prices: EnginePrices | None = None
    # What the stages leave for the later ones and the outcome.
    frozen: FrozenContext | None = None         # the run record's, once written
    began: float = 0.0                          # when the study's stages began
    reason: str = INTERRUPTED                   # why the study stopped
    engine_screens: dict[str, StudyRunner] = field(default_factory=dict)
    race_plan: validation.Race | None = None
    raced: validation.Raced | None = None
    outputs: list[str] = field(default_factory=list)

    def screen_runs(self) -> bool:
        return self.screen_planned

    def screen(self) -> None:
        run_replay_screen(self.plan, self.runner, self.screening, self.budget)

    def write_record(self) -> None:
        """The hardware profile measured now and run.json, once the study has accepted
        this run and its screen is done (a Ctrl-C before leaves nothing)."""
        if self.profile is not None:
            save_run_profile(self.plan.run_dir, self.profile)
        self.frozen = write_run_record(self.plan, self.models, self.identity).frozen
        self.began = time.monotonic()

    def measure(self) -> None:
        """The measured trials, to their share of the budget, with a progress display;
        the run files rewritten after each."""
        plan, runner, budget = self.plan, self.runner, self.budget
        done, _, _ = runner.progress()
        trials = runner.settings.trials
        note(f"study {plan.study_name!r}: {done} of {trials} trials finished; "
             f"run folder {plan.run_dir}")
        progress = Progress(trials, done)
        runner.settings.clock = budget.clock
        runner.settings.stop_at = budget.stop_at("trials")

        def finished(event: TrialEvent) -> None:
            run_folder.write_run_files(plan.run_dir, runner.study, plan.objective,
                                       self.frozen)
            progress.finished(event)

        try:
            self.reason = runner.run(on_trial=finished, on_start=progress.start)
        finally:
            progress.close()
        if self.reason == "deadline":
            finished_now, _, _ = runner.progress()
            budget.stopped_at(f"the measured trials after {finished_now} of {trials}")
        self.stops.interrupted_by(self.reason)

    def engine_screens_run(self) -> bool:
        return bool(self.plan.held_out and self.models.engine_spaces
                    and fitting.engine_screen(self.plan, self.budget) > 0)

    def screen_engines(self) -> None:
        """The other engines' spaces screened by replay (`--target all`), each priced at
        its own costs where it runs here (issue 60)."""
        plan, runner, spaces = self.plan, self.runner, self.models.engine_spaces
        runner.context.memo[ENGINE_PRICES] = price_engines(
            self.screening, [e for e in fitting.profiled_engines(plan, self.budget)
                             if e in spaces], plan.model, plan.draft, plan.run_dir)
        # The screens' deadline once the profiles are measured: a profile that took
        # longer than its estimate left the screens one config each (issue 60, a run
        # whose HF profile was measured afresh answered no engine).
        stop = fitting.engines_stop(self.budget)
        self.engine_screens = screen_engines(
            on_screen_prompts(runner.settings, plan), spaces, plan.objective,
            self.screening, fitting.engine_screen(plan, self.budget), stop)

    def validation_runs(self) -> bool:
        """Prompts are held out (asked before the budget sizes them: all the validation
        stages run, or none)."""
        return self.validates

    def choose_finalists(self) -> None:
        """The held-out pool sized to the time left, the finalists chosen, the pool
        predicted."""
        self.plan = fitting.held_out(self.plan, self.budget, self.runner.study)
        self.race_plan = validation.choose(self.plan, self.runner, self.engine_screens,
                                           self.budget, self.target_prices)

    def race(self) -> None:
        """The race on the held-out prompts; then every answered engine not raced in
        itself says why its answer is predicted."""
        plan, runner = self.plan, self.runner
        if self.race_plan is not None:
            self.raced = validation.race(plan, runner, self.race_plan, self.budget)
        note_unraced(runner.study, plan.engine_races, plan.model, plan.draft,
                     runner.context.target.device.type)

    def engine_races_run(self) -> bool:
        return self.validates and bool(self.plan.engine_races)

    def race_in_engines(self) -> None:
        run_engine_races(self.plan, self.runner, self.budget)

    def race_on(self) -> None:
        validation.race_on(self.plan, self.runner, self.raced, self.budget)

    def schedule_runs(self) -> bool:
        return bool(self.plan.batch_sizes)

    def schedule(self) -> None:
        plan, runner = self.plan, self.runner
        run_schedule(runner.study, plan.objective, runner.context, runner.space,
                     plan.batch_sizes, plan.schedule_ks, runner.context.prompts,
                     plan.held_out, plan.run_dir if plan.replays else None)

    def recorded(self) -> bool:
        """The run record is written: the study ran (not stopped in the screen)."""
        return self.frozen is not None

    def write_files(self) -> None:
        assert self.frozen is not None
        self.outputs = outputs.write_files(self.plan, self.runner.study, self.frozen)

    def outcome(self) -> SearchOutcome:
        """How the run ended, its stages recorded in run.json."""
        plan, runner, clock = self.plan, self.runner, self.clock
        trials = runner.settings.trials
        summary = tuple(self.budget.summary())
        if self.frozen is None:                 # stopped while screening
            return SearchOutcome(INTERRUPTED, plan.run_dir, None, plan.objective, 0, trials,
                                 0.0, [], clock.stages, summary, peak_rss=clock.peak_rss,
                                 peak_tree=clock.peak_tree)
        record_stages(plan.run_dir, clock.stages, clock.peak_rss, clock.peak_tree)
        done, _, _ = runner.progress()
        files = [TRIALS_FILE, BEST_FILE, RUN_FILE, *self.outputs,
                 *([PROFILE_FILE] if (plan.run_dir / PROFILE_FILE).is_file() else [])]
        reason = INTERRUPTED if self.stops.interrupted else self.reason
        return SearchOutcome(reason, plan.run_dir, runner.study, plan.objective, done,
                             trials, time.monotonic() - self.began, files, clock.stages,
                             summary, peak_rss=clock.peak_rss, peak_tree=clock.peak_tree)


def _quiet_optuna() -> None:
    """Our progress lines say what Optuna's log would (a failed trial's one-line reason
    rather than its traceback); its sampler fallbacks on conditional knobs (CMA-ES, GP)
    are expected in a conditional space, not news."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning, module="optuna")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
