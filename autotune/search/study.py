"""The study runner: one Optuna study over a space, an objective and a workload.

Each trial turns the sampler's parameters into a DecodeConfig (through the space),
evaluates it through the objective (which measures through `measure.py`), and records
the resolved config and every metric as user attributes, so the storage alone is
enough to rebuild the run folder, the report or a frozen config.

Robustness rules, each from something that goes wrong in a long search:
- the first trials are the AR baseline and documented server defaults, so the answer
  is never worse than doing nothing or than a default;
- a trial that raises, runs out of memory or passes `trial_timeout` is recorded failed
  with a one-line message and the study goes on;
- storage is Optuna's (`storage.py`): a journal file in the run folder by default
  (appended and fsync'ed per change, so `kill -9` loses nothing finished), or any RDB
  URL shared by many workers;
- rerunning resumes: finished trials count toward `trials`; a trial whose worker died
  (kill -9, Ctrl-C, a lost machine) is marked failed and queued again.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.schema.engines import engine_rules
from autotune.schema.methods import Preset, all_methods
from autotune.search.objectives import EvalContext, Objective
from autotune.records.ranking import best_trial
from autotune.search.samplers import GuardedSampler, make_sampler
from autotune.search.storage import (
    storage_url_shown,
    storage_from_url,
    worker_alive,
    worker_id,
)
from autotune.frozen.record import KnobValue
from autotune.search.trial_record import (
    BASELINE,
    BASELINE_ATTR,
    REPEAT_ATTR,
    UNPRUNED_ATTR,
    QueuedTrial,
    TrialRecord,
)
from autotune.space import BoundSpace, InfeasibleConfig
from autotune.space.entries import ParamValue

__all__ = ["MAX_INFEASIBLE_PER_TRIAL", "REPEAT_ATTR", "UNPRUNED_ATTR", "SearchSettings",
           "StudyRunner", "TrialEvent", "TrialFailed", "TrialTimeout", "counted_trials",
           "presets"]

# Infeasible points (a mask past max_skipped, ngram_min > ngram_max) cost nothing to
# reject and do not count toward the budget; a space that yields almost nothing else
# is broken, and this stops the search rather than spinning.
MAX_INFEASIBLE_PER_TRIAL = 20
# What a study made before an identity key was recorded was made with: such a study
# resumes only where that is what this run has (its layer bits were integers 0..1).
RECORDED_SINCE = {"bit_params": "integer"}
# Study user attrs of a multi-fidelity search: how many screened configs it queued, the
# largest --trials its runs asked for, and the trial budget that gave (fewer when the
# screen found fewer distinct configs): a rerun of the same command resumes to the same
# budget, a rerun with a larger --trials measures more.
SCREENED_ATTR = "screened_queued"
TRIALS_ASKED_ATTR = "trials_asked"
BUDGET_ATTR = "trial_budget"
# Refused repeats in a row (each after a random draw) that say a `distinct` study has
# seen its whole space: it stops there ("covered") rather than spinning.
COVERED_AFTER = 50


def presets(n_layers: int, engine: str = "autotune") -> list[Preset]:
    """The AR baseline, then every registered method's documented defaults (its
    `MethodSpec.presets`) by their `rank`, for an `n_layers` target; for a search with
    `--target ENGINE`, only that engine's own defaults."""
    baseline = Preset(BASELINE, "autoregressive decoding, no speculation", {"method": "none"})
    # A runner's rules (vLLM's V1 on a CPU) take the engine's documented defaults.
    family = engine_rules(engine).family
    documented = [preset for spec in all_methods() for preset in spec.presets(n_layers)
                  if (engine == "autotune" and not preset.targeted) or preset.engine == family]
    return [baseline, *sorted(documented, key=lambda preset: preset.rank)]


@dataclass
class SearchSettings:
    """Everything a search needs besides the models and prompts (already loaded)."""

    study_name: str
    storage: str                       # URL, or a journal file path
    trials: int
    sampler: str = "tpe"
    seed: int = 0
    timeout_s: float | None = None     # wall clock for this invocation
    trial_timeout_s: float | None = None
    prune: bool = True
    # Extra configs to try first (`--enqueue`: config keys and values).
    enqueue: list[dict[str, KnobValue]] = field(default_factory=list)
    # Multi-fidelity: screened configs queued after the baseline instead of the
    # documented defaults (which were screened like any config).
    screened: list[QueuedTrial] | None = None
    study_attrs: dict[str, Any] = field(default_factory=dict)     # what defines the study
    startup_trials: int | None = None  # random trials before the sampler models (TPE)
    concurrency: int = 1               # requests served side by side (llama-server -np)
    # Every config once (a replay screen: a repeat predicts the same figures): a repeat is
    # refused uncounted, and the next trial draws at random.
    distinct: bool = False
    # --time-budget: this stage's end on `clock`'s scale. No trial starts that, as long
    # as this run's median trial, would pass it ("deadline"): a stage keeps to its share
    # and what it finished stays counted. None: no deadline (`timeout_s` still applies).
    stop_at: float | None = None
    clock: Callable[[], float] = time.monotonic


@dataclass
class TrialEvent:
    """What a progress display needs after each trial."""

    trial: FrozenTrial
    finished: int          # trials counted toward the budget so far
    budget: int
    best: FrozenTrial | None
    message: str


def counted_trials(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Trials that count toward the budget: finished, feasible, not interrupted, not
    superseded by a retry (ours after a dead worker, or Optuna's after a stale heartbeat),
    and measured (a screen's finalist copied in is not: `search.screen_finalists`)."""
    records = [TrialRecord.of(t) for t in trials]
    retried = {r.retry_of for r in records}
    retried |= {t.system_attrs.get("failed_trial") for t in trials}
    return [r.trial for r in records
            if r.trial.state.is_finished() and not r.interrupted and not r.infeasible
            and r.repeat_of is None and r.number not in retried and not r.from_screen]


class TrialTimeout(Exception):
    pass


class TrialFailed(Exception):
    """A trial that ran and failed: the message is the one-line reason."""


@contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Raise TrialTimeout in the main thread after `seconds` (SIGALRM; Unix)."""
    usable = (seconds is not None and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise TrialTimeout(f"trial took longer than --trial-timeout {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _is_oom(exc: BaseException) -> bool:
    # torch is imported where a trial has failed, not at the top: `autotune search` checks
    # its arguments (and reports a typo) before any model library loads.
    import torch
    return (isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError))
            or "out of memory" in str(exc).lower())


def past_deadline(stop_at: float | None, now: float, took: list[float]) -> bool:
    """Whether a trial started `now` would pass `stop_at`, judged by the median of the
    trials this run has taken (`took`; the median, not the mean: a screen's first trial
    decodes its references and costs many later ones). None: no deadline."""
    if stop_at is None:
        return False
    if not took:
        return now >= stop_at
    ordered = sorted(took)
    return now + ordered[len(ordered) // 2] > stop_at


class StudyRunner:
    """Runs trials of one study until the budget, the timeout or Ctrl-C."""

    def __init__(self, settings: SearchSettings, space: BoundSpace, objective: Objective,
                 context: EvalContext) -> None:
        self.settings = settings
        self.space = space
        self.objective = objective
        self.context = context
        self.worker = worker_id()
        self.storage = storage_from_url(settings.storage)
        self.study = self._open_study()
        self._repeats_in_a_row = 0          # a `distinct` study's refused repeats

    # -- study set-up ---------------------------------------------------------------

    def _open_study(self) -> optuna.Study:
        settings = self.settings
        seed = settings.seed
        if "://" in settings.storage:
            # Many workers may share this study, often started with the same --seed: mix
            # in the process so their samplers do not propose the very same points.
            seed = (seed * 1_000_003 + os.getpid()) % 2**31
        sampler = make_sampler(settings.sampler, seed, len(self.objective.metrics),
                               self.space.grid, settings.startup_trials)
        pruner: optuna.pruners.BasePruner = (
            optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=1)
            if settings.prune and not self.objective.multi else optuna.pruners.NopPruner())
        # Exactly one process creates a study (the storage's unique name decides); only
        # that one queues the defaults, so many workers starting at once queue them once.
        try:
            study = optuna.create_study(
                study_name=settings.study_name, storage=self.storage, sampler=sampler,
                pruner=pruner, directions=self.objective.directions)
            self.created = True
        except optuna.exceptions.DuplicatedStudyError:
            study = optuna.load_study(study_name=settings.study_name, storage=self.storage,
                                      sampler=sampler, pruner=pruner)
            self.created = False
            theirs = [d.name.lower() for d in study.directions]
            if theirs != self.objective.directions:
                raise AutotuneError(
                    f"study {settings.study_name!r} optimises {theirs}, objective "
                    f"{self.objective.name!r} asks for {self.objective.directions}: "
                    "use another --study or --out") from None
        self._check_same_study(study)
        return study

    def _check_same_study(self, study: optuna.Study) -> None:
        """A resumed study must be the same experiment; otherwise say what differs."""
        existing = study.user_attrs
        if not existing.get("autotune"):
            for key, value in self.settings.study_attrs.items():
                study.set_user_attr(key, value)
            study.set_user_attr("autotune", True)
            return
        for key, value in self.settings.study_attrs.items():
            if key not in existing and key not in RECORDED_SINCE:
                continue                 # a key this study never recorded: unchecked
            was = existing.get(key, RECORDED_SINCE.get(key))
            if was != value:
                raise AutotuneError(
                    f"study {self.settings.study_name!r} in {storage_url_shown(self.settings.storage)} "
                    f"was made with {key}={was!r}, this run has {value!r}: "
                    "use another --study or --out")

    def screened_queued(self) -> bool:
        """Whether a multi-fidelity screen's configs were queued in this study already
        (a resumed search screens nothing again)."""
        return bool(self.study.user_attrs.get(SCREENED_ATTR))

    def queued_params(self) -> list[dict[str, ParamValue]]:
        """The params of every trial in the study, the queued (waiting) ones included."""
        return [dict(t.params) or dict(t.system_attrs.get("fixed_params", {}))
                for t in self.study.get_trials(deepcopy=False)]

    def waiting(self) -> int:
        """Trials queued and not started yet."""
        return len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def queue_screened(self, entries: list[QueuedTrial]) -> None:
        """Queue more screened configs in a resumed multi-fidelity study (a rerun with a
        larger budget), after those it queued before."""
        for queued in entries:
            self.study.enqueue_trial(queued.params, user_attrs=queued.user_attrs(),
                                     skip_if_exists=True)
        queued = int(self.study.user_attrs.get(SCREENED_ATTR, 0))
        self.study.set_user_attr(SCREENED_ATTR, queued + len(entries))

    def enqueue_defaults(self) -> list[str]:
        """Queue the baseline, the documented defaults the space can express and the
        user's `--enqueue` configs, once per study; or, after a multi-fidelity screen,
        the baseline and the screened configs, once per study. Returns the names queued."""
        if self.settings.screened is not None:
            if self.screened_queued():
                return []
            self.created = False
            self.study.enqueue_trial({}, user_attrs={BASELINE_ATTR: BASELINE},
                                     skip_if_exists=True)
            for queued in self.settings.screened:
                self.study.enqueue_trial(queued.params, user_attrs=queued.user_attrs(),
                                         skip_if_exists=True)
            for i, values in enumerate(self.settings.enqueue):       # the user's, too
                params = self.space.encode(values)
                if params is None:
                    raise AutotuneError(f"--enqueue config {values} is not expressible in "
                                        f"space {self.space.space.name!r}")
                self.study.enqueue_trial(params, user_attrs={BASELINE_ATTR: f"enqueue{i}"},
                                         skip_if_exists=True)
            self.study.set_user_attr(SCREENED_ATTR, len(self.settings.screened))
            return [BASELINE] + [f"screened #{q.screen.rank if q.screen else '?'}"
                                 for q in self.settings.screened]
        if not self.created:
            return []
        self.created = False
        queued = []
        entries = [(p.name, p.values)
                   for p in presets(self.context.target.n_layers, self.space.engine)]
        entries += [(f"enqueue{i}", values) for i, values in enumerate(self.settings.enqueue)]
        for name, values in entries:
            if name == BASELINE:
                self.study.enqueue_trial({}, user_attrs={BASELINE_ATTR: BASELINE},
                                         skip_if_exists=True)
                queued.append(name)
                continue
            params = self.space.encode(values)
            if params is None:
                if name.startswith("enqueue"):
                    raise AutotuneError(f"--enqueue config {values} is not expressible in "
                                        f"space {self.space.space.name!r}")
                continue
            self.study.enqueue_trial(params, user_attrs={BASELINE_ATTR: name},
                                     skip_if_exists=True)
            queued.append(name)
        return queued

    def recover_interrupted(self) -> list[int]:
        """Trials left RUNNING by a dead worker on this host: mark failed, queue again."""
        recovered = []
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            owner = TrialRecord.of(trial).worker
            if owner is None or owner == self.worker or worker_alive(owner):
                continue
            self._interrupt(trial, f"its worker {owner} exited while it ran")
            recovered.append(trial.number)
        return recovered

    def _interrupt(self, trial: FrozenTrial, reason: str, finish: bool = True) -> None:
        """Mark `trial` interrupted (not counted) and queue its parameters again.

        `finish` sets it failed; inside the objective, Optuna does that itself.
        """
        # Through the storage we opened: Optuna's Study has no public call that sets an
        # attribute on a trial it did not hand us as a `Trial` (a dead worker's), and
        # `study.tell(FAIL)` would also run the sampler's after_trial.
        trial_id = self._trial_id_of(trial.number)
        self.storage.set_trial_user_attr(trial_id, "interrupted", True)
        self.storage.set_trial_user_attr(trial_id, "error", f"interrupted: {reason}")
        if finish and trial.state == TrialState.RUNNING:
            self.storage.set_trial_state_values(trial_id, TrialState.FAIL)
        attrs = {"retry_of": trial.number}
        for key in (BASELINE_ATTR, "screen"):       # what it was queued as
            if key in trial.user_attrs:
                attrs[key] = trial.user_attrs[key]
        self.study.enqueue_trial(dict(trial.params), user_attrs=attrs)

    def _trial_id_of(self, number: int) -> int:
        """The storage's id of trial `number`, by BaseStorage's public calls.

        `self.storage` is the very storage the study writes through (for an RDB URL
        Optuna wraps it in a cache whose writes, and reads of unfinished trials, pass
        straight to it), so this reads and writes what `study` does.
        """
        study_id = self.storage.get_study_id_from_name(self.study.study_name)
        return self.storage.get_trial_id_from_study_id_trial_number(study_id, number)

    # -- counting -------------------------------------------------------------------

    def progress(self) -> tuple[int, int, int]:
        """(counted toward the budget, running elsewhere, infeasible) right now."""
        trials = self.study.get_trials(deepcopy=False)
        done = len(counted_trials(trials))
        records = [TrialRecord.of(t) for t in trials]
        running = sum(r.trial.state == TrialState.RUNNING and r.worker != self.worker
                      for r in records)
        infeasible = sum(bool(r.infeasible) for r in records)
        return done, running, infeasible

    # -- the loop -------------------------------------------------------------------

    def run(self, on_trial: Callable[[TrialEvent], None] | None = None,
            on_start: Callable[[DecodeConfig], None] | None = None) -> str:
        """Run trials; returns why it stopped: budget, timeout, deadline, interrupted,
        infeasible."""
        self.recover_interrupted()
        self.enqueue_defaults()
        started = time.monotonic()
        took: list[float] = []          # this run's trials, seconds each (the deadline's)
        self._on_start = on_start
        self._repeats_in_a_row = 0
        while True:
            done, running, infeasible = self.progress()
            if done + running >= self.settings.trials:
                return "budget"
            if self._repeats_in_a_row >= COVERED_AFTER:
                return "covered"
            if (self.settings.timeout_s is not None
                    and time.monotonic() - started >= self.settings.timeout_s):
                return "timeout"
            if past_deadline(self.settings.stop_at, self.settings.clock(), took):
                return "deadline"
            if infeasible > MAX_INFEASIBLE_PER_TRIAL * max(self.settings.trials, 1):
                return "infeasible"
            inner = getattr(self.study.sampler, "inner", None)
            if isinstance(inner, optuna.samplers.GridSampler) and inner.is_exhausted(self.study):
                return "grid"
            try:
                began = self.settings.clock()
                self.study.optimize(self._trial, n_trials=1, catch=(TrialFailed,),
                                    gc_after_trial=False)
                took.append(self.settings.clock() - began)
                # The callback (run files, progress line) is "between trials": a Ctrl-C
                # there stops the same way, with nothing of ours left RUNNING.
                last = self._last_own_trial()
                if on_trial is not None and last is not None:
                    done, _, _ = self.progress()
                    on_trial(TrialEvent(last, done, self.settings.trials,
                                        best_trial(self.study, self.objective),
                                        self._message(last)))
            except KeyboardInterrupt:
                # Ctrl-C outside the objective (sampling, storage) can leave our trial
                # RUNNING; inside it, `_trial` has already marked and queued it.
                for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                    if TrialRecord.of(trial).worker == self.worker:
                        self._interrupt(trial, "stopped by the user (Ctrl-C)")
                return "interrupted"

    def _last_own_trial(self) -> FrozenTrial | None:
        own = [t for t in self.study.get_trials(deepcopy=False)
               if t.state.is_finished() and TrialRecord.of(t).worker == self.worker]
        return max(own, key=lambda t: t.number) if own else None

    def _message(self, trial: FrozenTrial) -> str:
        if trial.state == TrialState.COMPLETE:
            values = ", ".join(f"{m}={v:.4g}" for m, v in zip(self.objective.metrics, trial.values))
            return values
        record = TrialRecord.of(trial)
        if trial.state == TrialState.PRUNED:
            if record.repeat_of is not None:
                return f"a repeat of trial {record.repeat_of}: not counted"
            return record.infeasible or "pruned"
        return record.error or "failed"

    def _trial(self, trial: Trial) -> float | list[float]:
        trial.set_user_attr("worker", self.worker)
        preset = trial.user_attrs.get(BASELINE_ATTR)
        try:
            config = DecodeConfig() if preset == BASELINE else self.space.suggest(trial)
        except InfeasibleConfig as exc:
            trial.set_user_attr("infeasible", str(exc))
            raise optuna.TrialPruned(str(exc)) from None
        workload = self.objective.workload
        config = dataclasses.replace(config, temperature=workload.temperature,
                                     top_p=workload.top_p,
                                     concurrency=self.settings.concurrency)
        trial.set_user_attr("config", config.to_dict())
        if self.settings.distinct and preset is None:
            self._refuse_a_repeat(trial, config)
        if self._on_start is not None:
            self._on_start(config)
        report = self._reporter(trial) if (self.settings.prune and not self.objective.multi
                                           and preset is None
                                           and not trial.user_attrs.get(UNPRUNED_ATTR)) else None
        try:
            with _deadline(self.settings.trial_timeout_s):
                # Imported here: the measuring code loads torch, and the report reads this
                # module's attribute names without running a trial.
                from autotune.search.evaluation import evaluate
                metrics = evaluate(self.objective, self.context, config, report)
            if preset == BASELINE and "speedup" in metrics.model_fields_set:
                # The AR baseline is the reference: its speedup is 1 by definition. What
                # AR against AR measured is the noise floor, kept as `self_speedup`; as a
                # ranked value it would let a lucky draw of doing nothing win.
                metrics = metrics.with_figures(self_speedup=metrics.speedup, speedup=1.0,
                                               ci90=None)
            trial.set_user_attr("metrics", metrics.stored_json())
            violation = self.objective.violation(metrics, config)
            if violation is not None:
                raise TrialFailed(f"constraint violated: {violation}")
            values = self.objective.values(metrics)
        except optuna.TrialPruned:
            raise
        except KeyboardInterrupt:
            frozen = self.storage.get_trial(self._trial_id_of(trial.number))
            self._interrupt(frozen, "stopped by the user (Ctrl-C)", finish=False)
            raise
        except Exception as exc:  # a failed candidate must not end the search
            message = (str(exc) if isinstance(exc, (TrialFailed, AutotuneError))
                       else f"out of memory: {_one_line(exc)}" if _is_oom(exc)
                       else _one_line(exc))
            trial.set_user_attr("error", message)
            _release_memory()
            raise TrialFailed(message) from None
        return values[0] if len(values) == 1 else values

    def _refuse_a_repeat(self, trial: Trial, config: DecodeConfig) -> None:
        """In a `distinct` study, prune `trial` uncounted when a finished trial ran its
        very config, and have the sampler draw the next one at random."""
        key = json.dumps(config.to_dict(), sort_keys=True)
        earlier = next((t.number for t in self.study.get_trials(
                            deepcopy=False, states=(TrialState.COMPLETE,))
                        if json.dumps(TrialRecord.of(t).config_json, sort_keys=True) == key),
                       None)
        if earlier is None:
            self._repeats_in_a_row = 0
            return
        self._repeats_in_a_row += 1
        trial.set_user_attr(REPEAT_ATTR, earlier)
        sampler = self.study.sampler
        if isinstance(sampler, GuardedSampler):
            sampler.draw_next_at_random()
        raise optuna.TrialPruned(f"a repeat of trial {earlier}")

    def _reporter(self, trial: Trial) -> Callable[[int, float], None]:
        def report(step: int, value: float) -> None:
            if value is None or not math.isfinite(value):
                return
            trial.report(float(value), step)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned after prompt {step + 1}")
        return report


def _release_memory() -> None:
    import torch  # see _is_oom
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
