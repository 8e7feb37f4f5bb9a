"""`autotune search`: arguments -> loaded models and prompts -> StudyRunner -> run folder.

Everything that can be checked without a model (space, objective, enqueued configs,
numbers) is checked first, so a typo costs a second, not a model load.

Ctrl-C, by phase (each ends with exit code 130 and leaves no half-written file; every
file of the run folder is replaced atomically):
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

import argparse
import json
import sys
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import optuna
from tqdm import tqdm

from autotune import __version__
from autotune.common.errors import AutotuneError
from autotune.common.files import write_atomically
from autotune.decoding.config import config_from_mapping, load_config_file
from autotune.decoding.label import describe
from autotune.frozen import command_line, hardware_record, model_record
from autotune.measure.profile import PROFILE_FILE, run_profile, save_run_profile
from autotune.models.trained import TrainedDraft, trained_prompt_digests
from autotune.replay import PARTS_FILE
from autotune.report import write_report
from autotune.runs.exports_folder import write_exports
from autotune.runs.folder import (
    BEST_FILE,
    RUN_FILE,
    TRIALS_FILE,
    ranked_documents,
    top_table,
    validation_table,
    write_run_files,
)
from autotune.runs.record import (
    FileRecord,
    FrozenContext,
    Provenance,
    RunRecord,
    StudyIdentity,
    WorkloadRecord,
)

# By attribute (`validation.measure_finalists`): tests/phase_driver.py parks a run there.
from autotune.search import finalists as validation
from autotune.search import ranking
from autotune.search.finalists import VALIDATION_ATTR, current_record, pick_finalists
from autotune.search.objectives import EvalContext, Objective, load_objective
from autotune.search.samplers import check_sampler_name
from autotune.search.screening import (
    run_screen,
    screen_failure,
    screened_queue,
    write_screen_csv,
)
from autotune.search.storage import JOURNAL_NAME, masked_storage
from autotune.search.study import SCREENED_ATTR, SearchSettings, StudyRunner, TrialEvent
from autotune.search.targets import DEFAULT_TARGET, default_space, refusal
from autotune.space import SearchSpace, load_space
from autotune.workloads.prompts import (
    load_workload,
    prompt_digest,
    round_robin,
    split_workload,
    without,
    workload_digest,
)

REPORTS = Path("reports")
# Fewest held-out prompts that give an interval over prompts.
MIN_HELD_OUT = 2


class _Progress:
    """A tqdm bar (trials done, best so far, current candidate) on a terminal; one
    plain line per trial otherwise (CI logs, pipes)."""

    def __init__(self, total: int, initial: int) -> None:
        self.tty = sys.stderr.isatty()
        self.bar = tqdm(total=total, initial=min(initial, total), unit="trial",
                        file=sys.stderr, dynamic_ncols=True, disable=not self.tty)

    def start(self, config: dict[str, Any]) -> None:
        if self.tty:
            self.bar.set_description(describe(config)[:48])

    def finished(self, event: TrialEvent) -> None:
        trial = event.trial
        label = ("infeasible point, not counted" if trial.user_attrs.get("infeasible")
                 else describe(trial.user_attrs.get("config", {})))
        best = ""
        if event.best is not None:
            best = f"best {event.best.values[0]:.4g} (trial {event.best.number})"
        line = f"[{event.finished}/{event.budget}] trial {trial.number} {label}: {event.message}"
        if self.tty:
            self.bar.write(line)
            self.bar.n = min(event.finished, self.bar.total)
            self.bar.set_postfix_str(best)
            self.bar.refresh()
        else:
            print(f"{line}; {best}" if best else line, file=sys.stderr, flush=True)

    def close(self) -> None:
        self.bar.close()


def model_slug(spec: str) -> str:
    """A file- and study-name-safe form of a model spec (the default study name's start)."""
    name = Path(spec.rstrip("/")).name or spec
    name = name.removesuffix(".gguf")
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-") or "model"


def load_enqueue(path: str) -> list[dict[str, Any]]:
    raw = load_config_file(path, allow_list=True)
    entries = raw if isinstance(raw, list) else [raw]
    out = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise AutotuneError(f"{path}: each enqueued config must be a mapping of config keys")
        entry = dict(entry.get("params", entry))
        config_from_mapping(entry).validate()       # fail now on a bad key or value
        out.append(entry)
    return out


DEFAULT_TRIALS = {"measure": 30, "multi": 8, "replay": 500, "engine": 16}


def _check_numbers(args: argparse.Namespace) -> None:
    if args.trials is None:
        args.trials = DEFAULT_TRIALS[args.fidelity]
    if args.screen < 1:
        raise AutotuneError("--screen must be at least 1")
    if args.trials < 1:
        raise AutotuneError("--trials must be at least 1")
    for flag, value, least in (("--validation-prompts", args.validation_prompts, 1),
                               ("--validation-repeats", args.validation_repeats, 1),
                               ("--finalists", args.finalists, 1)):
        if value < least:
            raise AutotuneError(f"{flag} must be at least {least}")
    for flag, value in (("--timeout", args.timeout), ("--trial-timeout", args.trial_timeout)):
        if value is not None and value <= 0:
            raise AutotuneError(f"{flag} must be a positive number of seconds")
    check_sampler_name(args.sampler)


def split_prompts(args: argparse.Namespace, categories: list[str] | None,
                  prompts_n: int) -> tuple[list[Any], list[Any], str]:
    """(search prompts, validation prompts, where the latter came from).

    `--validation FRACTION`: that share of the workload (after `--categories`) is held
    out, stratified by category and seeded by `--seed`, before `--prompts` are drawn from
    the rest; `--validation FILE`: its prompts are held out and any workload prompt with
    the same text is dropped from the search; `0`: nothing is held out. Each part is
    then drawn round-robin over categories (`--prompts`, `--validation-prompts`)."""
    spec = str(args.validation)
    workload = load_workload(args.workload, categories)
    try:
        fraction: float | None = float(spec)
    except ValueError:
        fraction = None
    if fraction is None:
        if not Path(spec).is_file():
            raise AutotuneError(f"--validation {spec!r} is neither a fraction in [0, 1) nor "
                                "a prompt file")
        held = load_workload(spec, None, args.validation_prompts)
        if len(held) < MIN_HELD_OUT:
            raise AutotuneError(f"--validation {spec} has {len(held)} prompt; an interval "
                                f"over prompts needs at least {MIN_HELD_OUT}")
        search = without(workload, held)
        if not search:
            raise AutotuneError(f"every workload prompt is in --validation {spec}: nothing "
                                "is left to search on")
        source = f"{len(held)} prompts of {spec}"
    elif fraction == 0:
        search, held, source = workload, [], "none"
    else:
        if not 0 < fraction < 1:
            raise AutotuneError(f"--validation {spec}: a fraction lies in [0, 1)")
        search, part = split_workload(workload, fraction, args.seed)
        held = round_robin(part, args.validation_prompts)
        source = (f"{len(held)} of the {len(part)} prompts of {args.workload} held out "
                  f"({fraction:g}, stratified by category, seed {args.seed})")
        if len(held) < MIN_HELD_OUT:
            # One held-out prompt gives no interval, so it could only ever say "do not
            # speculate": search on everything and say the answer is not validated.
            print(f"autotune: warning: {args.workload} has {len(workload)} prompts, too few "
                  f"to hold {MIN_HELD_OUT} out at --validation {spec}; the answer will not be "
                  "validated (give more prompts or --validation FILE)",
                  file=sys.stderr, flush=True)
            search, held, source = workload, [], "none"
    return round_robin(search, prompts_n), held, source


def _study_identity(args: argparse.Namespace, space: SearchSpace, objective: Objective,
                    target: Any, draft: Any, categories: list[str] | None,
                    prompts: list[Any], max_new: int, engine: str) -> StudyIdentity:
    defaults = objective.workload
    return StudyIdentity(
        space=space.name, space_sha256=space.sha256,
        objective=objective.name, objective_sha256=objective.sha256,
        model=target.name, draft=draft.name if draft is not None else None,
        device_type=target.device.type, dtype=str(target.dtype).removeprefix("torch."),
        workload=args.workload, categories=categories, prompts=len(prompts),
        workload_sha256=workload_digest(prompts), max_new_tokens=max_new,
        temperature=defaults.temperature, top_p=defaults.top_p, engine=engine)


def _frozen_context(args: argparse.Namespace, identity: StudyIdentity, space: SearchSpace,
                    objective: Objective, target: Any, draft: Any, study_name: str,
                    storage: str) -> FrozenContext:
    return FrozenContext(
        model=model_record(target, args.model),
        draft=model_record(draft, args.draft) if draft is not None else None,
        hardware=hardware_record(target.device),
        workload=WorkloadRecord(
            source=args.workload, categories=identity.categories, prompts=identity.prompts,
            max_new_tokens=identity.max_new_tokens, temperature=identity.temperature,
            top_p=identity.top_p, seed=args.seed, sha256=identity.workload_sha256),
        provenance=Provenance(
            space=FileRecord(space.name, space.path, space.sha256),
            objective=FileRecord(objective.name, objective.path, objective.sha256),
            sampler=args.sampler, seed=args.seed, study=study_name,
            storage=masked_storage(storage), command=command_line()))


def _write_outputs(run_dir: Path, storage: str, study: Any, objective: Any,
                   context: dict[str, Any]) -> list[str]:
    """The report and the exports of the best config, after the study has stopped.

    Neither may lose finished work: a failure here is a warning, the study and the
    run files are already on disk and `autotune report` / `autotune export` can redo
    it."""
    written = []
    try:
        write_report(run_dir, storage=storage)
        written.append("report.html")
    except Exception as exc:  # noqa: BLE001 - the study is safe; say why and go on
        print(f"autotune: warning: no report written ({type(exc).__name__}: {exc}); "
              f"retry with: autotune report {run_dir}", file=sys.stderr)
    if (run_dir / BEST_FILE).is_file():
        try:
            names = write_exports(run_dir / BEST_FILE, run_dir / "exports",
                                  ranked_documents(study, objective, context))
            written.append(f"exports/ ({', '.join(names) or 'none: see its README.txt'})")
        except Exception as exc:  # noqa: BLE001 - as above
            print(f"autotune: warning: no exports written ({type(exc).__name__}: {exc}); "
                  f"retry with: autotune export {run_dir / BEST_FILE} --format ...",
                  file=sys.stderr)
    return written


def run_search_command(args: argparse.Namespace) -> int:
    _check_numbers(args)
    target_engine = getattr(args, "target", DEFAULT_TARGET)
    space = load_space(args.space or default_space(target_engine))
    objective = load_objective(args.objective)
    if objective.multi and args.sampler in ("cmaes", "bayes_opt"):
        raise AutotuneError(f"--sampler {args.sampler} optimises one objective and "
                            f"{objective.name!r} has {len(objective.metrics)}; use tpe or nsga2")
    enqueue = load_enqueue(args.enqueue) if args.enqueue else []
    defaults = objective.workload
    prompts_n = args.prompts if args.prompts is not None else defaults.prompts
    max_new = args.max_new_tokens if args.max_new_tokens is not None else defaults.max_new_tokens
    if max_new < 1:
        raise AutotuneError("--max-new-tokens must be at least 1")
    if prompts_n < 1:
        raise AutotuneError("--prompts must be at least 1")
    categories = ([c for c in args.categories.split(",") if c] if args.categories
                  else list(defaults.categories) if defaults.categories else None)
    study_name = args.study or f"{model_slug(args.model)}-{space.name}-{objective.name}"
    run_dir = Path(args.out) if args.out else REPORTS / study_name
    if run_dir.exists() and not run_dir.is_dir():
        raise AutotuneError(f"--out {run_dir} exists and is not a folder")
    storage = args.storage or str(run_dir / JOURNAL_NAME)

    prompts, held_out, held_source = split_prompts(args, categories, prompts_n)
    _check_schedule_args(args, len(prompts))
    fidelity = _fidelity(args, objective)          # refuses before any model loads
    args.resolved_fidelity = fidelity              # the schedule stage screens by replay too
    in_engine = _engine_measures(args, target_engine, fidelity)   # likewise

    # Looked up when called: tests put a spy on autotune.models.loading.load_model.
    from autotune.models.loading import load_model
    print(f"autotune: loading {args.model}" + (f" and draft {args.draft}" if args.draft else ""),
          file=sys.stderr, flush=True)
    from autotune.models.loading import draft_model
    from autotune.models.trained import load_draft
    from autotune.space.binding import trained_space_args
    target = load_model(args.model, args.device, args.dtype, args.trust_remote_code)
    draft = load_draft(args.draft, target, args.device, args.dtype, args.trust_remote_code)
    check_unseen(draft, held_out)        # a trained head must never have seen them
    layered = draft_model(draft)
    bound = space.bind(target.n_layers, layered.n_layers if layered is not None else None,
                       draft.trained_kind if draft is not None else None,
                       **trained_space_args(draft))
    bound = bound.for_engine(target_engine, refusal(target_engine, draft is not None))
    engine_backend = (_open_engine_backend(args, target_engine, target, draft,
                                           [*prompts, *held_out], max_new)
                      if in_engine else None)

    # Our progress lines say what Optuna's log would (a failed trial's one-line reason
    # rather than its traceback); its sampler fallbacks on conditional knobs (CMA-ES,
    # GP) are expected in a conditional space, not news.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning, module="optuna")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    identity = _study_identity(args, space, objective, target, draft, categories, prompts,
                               max_new, target_engine)
    settings = SearchSettings(
        study_name=study_name, storage=storage, trials=args.trials, sampler=args.sampler,
        seed=args.seed, timeout_s=args.timeout, trial_timeout_s=args.trial_timeout,
        prune=args.prune, enqueue=enqueue,
        study_attrs={**identity.to_json(),
                     "fidelity": fidelity if fidelity in ("replay", "engine") else "measure"})
    eval_context = EvalContext(target=target, draft=draft, prompts=prompts,
                               max_new_tokens=max_new, seed=args.seed, memo={},
                               fidelity="replay" if fidelity == "replay" else "measure",
                               replay_parts=run_dir / PARTS_FILE,
                               backend=engine_backend if fidelity == "engine" else None,
                               final_backend=engine_backend)
    # Once per run folder (reused on resume): where verifying more tokens stops being
    # nearly free on this hardware, for the report. A failure is a warning only. It is
    # measured before the study is opened (the worker that creates a shared study queues
    # the baseline and presets as it starts, before the other workers use up the
    # budget) and written only once the study has accepted this run; the folder itself
    # is made only after it, so a Ctrl-C while loading or profiling leaves nothing.
    profile, fresh = run_profile(run_dir, target)
    run_dir.mkdir(parents=True, exist_ok=True)
    # The measured study is opened first: a run it refuses (another space, model,
    # workload) is refused before anything is screened or written.
    runner = StudyRunner(settings, bound, objective, eval_context)
    if fidelity == "multi" and runner.screened_queued():
        # Resumed: the screen queued these many configs; measure those, no more.
        settings.trials = min(args.trials, int(runner.study.user_attrs[SCREENED_ATTR]) + 1)
    if fidelity == "multi" and not runner.screened_queued():
        try:
            screen, reason = run_screen(settings, args.screen, bound, objective, eval_context)
        except KeyboardInterrupt:
            reason = "interrupted"
        if reason == "interrupted":
            print("autotune: interrupted while screening; the screened configs are saved "
                  "in the study storage. Rerun the same command to resume.",
                  file=sys.stderr, flush=True)
            return 130
        write_screen_csv(run_dir, screen)
        settings.screened = screened_queue(screen, objective, max(args.trials - 1, 0))
        if settings.screened and len(settings.screened) + 1 < args.trials:
            # The screen has already explored the space: what it found distinct is what
            # is worth decoding, not sampler guesses on top.
            print(f"autotune: the screen found {len(settings.screened)} distinct configs "
                  f"worth measuring; measuring {len(settings.screened) + 1} trials "
                  f"(the AR baseline included) instead of {args.trials}",
                  file=sys.stderr, flush=True)
            settings.trials = len(settings.screened) + 1
        if not settings.screened:
            print(f"autotune: warning: the screen completed no speculative config "
                  f"({screen_failure(screen)}); the measured trials are the sampler's own",
                  file=sys.stderr, flush=True)
            settings.screened = None
    if fresh:
        save_run_profile(run_dir, profile)
    record = RunRecord(
        study=study_name, storage=masked_storage(storage), run_dir=str(run_dir),
        sampler=args.sampler, seed=args.seed, trials=args.trials, prune=args.prune,
        space_file=space.path, objective_file=objective.path,
        model_spec=args.model, draft_spec=args.draft, autotune_version=__version__,
        updated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        argv=sys.argv[1:], identity=identity, n_layers=target.n_layers,
        frozen=_frozen_context(args, identity, space, objective, target, draft, study_name,
                               storage))
    context = record.frozen.to_json()
    write_atomically(run_dir / RUN_FILE, json.dumps(record.to_json(), indent=2) + "\n")
    return _run_study(args, run_dir, storage, runner, objective, context,
                      HeldOut(held_out, held_source))


def _check_schedule_args(args: argparse.Namespace, n_search_prompts: int) -> None:
    """Parse --batch-sizes / --schedule-k onto args; refuse before any model loads."""
    from autotune.search.schedule import parse_batch_sizes, parse_ks

    args.batch_sizes = getattr(args, "batch_sizes", None)
    args.batch_sizes_parsed = parse_batch_sizes(args.batch_sizes) if args.batch_sizes else ()
    given_k = getattr(args, "schedule_k", None)
    if given_k and not args.batch_sizes:
        raise AutotuneError("--schedule-k needs --batch-sizes")
    args.schedule_ks = parse_ks(given_k) if given_k else None
    if args.batch_sizes_parsed and max(args.batch_sizes_parsed) > n_search_prompts:
        largest = max(args.batch_sizes_parsed)
        raise AutotuneError(f"--batch-sizes {largest} needs at least {largest} search prompts "
                            f"(one batch of {largest}); the search has {n_search_prompts}: "
                            "give more --prompts")


def _engine_measures(args: argparse.Namespace, target: str, fidelity: str) -> bool:
    """Whether the --target engine measures here (every trial with --fidelity engine,
    else the finalists): refused in one line before any model loads when --fidelity
    engine asks for an engine that cannot; otherwise a note says where figures come from."""
    from autotune.backends import ENGINE_BACKENDS, input_error, unavailable
    if target not in ENGINE_BACKENDS:
        if fidelity == "engine":
            raise AutotuneError(f"--fidelity engine measures in the --target engine; "
                                f"{target!r} has no backend that runs here (engines: "
                                f"{', '.join(ENGINE_BACKENDS)})")
        return False
    wrong = input_error(target, args.model, args.draft)
    if wrong is not None:
        raise AutotuneError(f"--target {target}: {wrong}")
    why = unavailable(target, args.model, args.draft)
    if why is not None:
        if fidelity == "engine":
            raise AutotuneError(f"--fidelity engine: {target} cannot measure here: {why}")
        print(f"autotune: {target} cannot measure here ({why}); its finalists are measured "
              f"in autotune's decoder under {target}'s drafting rules",
              file=sys.stderr, flush=True)
        return False
    return True


def _open_engine_backend(args: argparse.Namespace, engine: str, target: Any, draft: Any,
                         prompts: list[Any], max_new: int) -> Any:
    from autotune.backends import open_backend
    backend = open_backend(engine, target, draft, args.model, prompts, max_new)
    print(f"autotune: {'every trial' if args.fidelity == 'engine' else 'the finalists'} "
          f"measured in {backend.label}", file=sys.stderr, flush=True)
    return backend


def _fidelity(args: argparse.Namespace, objective: Objective) -> str:
    """The fidelity this search runs at: replay predicts greedy decoding only."""
    greedy = objective.workload.temperature == 0.0
    if args.fidelity == "engine" and not objective.needs_timing:
        raise AutotuneError(f"--fidelity engine times trials in the engine; objective "
                            f"{objective.name!r} times nothing: use --fidelity measure")
    if args.fidelity == "replay" and not greedy:
        raise AutotuneError(f"--fidelity replay predicts greedy decoding only; objective "
                            f"{objective.name!r} samples (temperature "
                            f"{objective.workload.temperature:g}): use --fidelity measure")
    if args.fidelity == "replay" and objective.needs_agreement:
        raise AutotuneError("--fidelity replay predicts timed metrics; the agreement "
                            "objective decodes nothing anyway: use --fidelity measure")
    if args.fidelity == "multi" and (not greedy or not objective.needs_timing):
        why = "it samples" if not greedy else "it times nothing"
        print(f"autotune: objective {objective.name!r}: no replay screen ({why}); every "
              "trial is measured", file=sys.stderr, flush=True)
        return "measure"
    return args.fidelity


@dataclass(frozen=True)
class HeldOut:
    """The validation prompts (never measured by the search) and where they came from."""

    prompts: list[Any]
    source: str


def _validate(args: argparse.Namespace, runner: StudyRunner, objective: Objective,
              held: HeldOut) -> None:
    """Re-measure the finalists on the held-out prompts and store the record in the
    study, unless a current record of these prompts and repeats is there already (a
    rerun of a finished search loses nothing and re-measures nothing)."""
    study = runner.study
    record = current_record(study)
    if (record is not None and record.get("workload_sha256") == workload_digest(held.prompts)
            and record.get("repeats") == args.validation_repeats):
        return
    _, running, _ = runner.progress()
    if running:
        # Many workers share this study: the last one to finish validates what they
        # found together (until then best.json is the search's own, unvalidated best).
        print(f"autotune: {running} trial(s) still running in other workers; the last "
              "worker to finish validates the finalists", file=sys.stderr, flush=True)
        return
    finalists = pick_finalists(study, objective, args.finalists)
    names = ", ".join(f"trial {f.trial} ({f.role})" for f in finalists) or "none"
    print(f"autotune: validating {len(finalists)} finalists ({names}) against the AR "
          f"baseline on {len(held.prompts)} held-out prompts x {args.validation_repeats} "
          "repeats", file=sys.stderr, flush=True)

    def progress(done: int, total: int) -> None:
        print(f"  [{done}/{total}] held-out prompt", file=sys.stderr, flush=True)

    record = validation.measure_finalists(runner.context, finalists, held.prompts,
                               args.validation_repeats, len(ranking.complete(study)),
                               held.source, on_prompt=progress)
    study.set_user_attr(VALIDATION_ATTR, record)


def _run_study(args: argparse.Namespace, run_dir: Path, storage: str, runner: StudyRunner,
               objective: Objective, context: dict[str, Any], held: HeldOut) -> int:
    """Run the trials with a progress display, validate the finalists on the held-out
    prompts, then write the run folder and say why it stopped; 130 after Ctrl-C."""
    study_name = runner.settings.study_name
    done, _, _ = runner.progress()
    budget = runner.settings.trials
    print(f"autotune: study {study_name!r}: {done} of {budget} trials finished; "
          f"run folder {run_dir}", file=sys.stderr, flush=True)
    progress = _Progress(budget, done)
    began = time.monotonic()

    def finished(event: TrialEvent) -> None:
        write_run_files(run_dir, runner.study, objective, context)
        progress.finished(event)

    try:
        reason = runner.run(on_trial=finished, on_start=progress.start)
    finally:
        progress.close()
    if reason != "interrupted" and held.prompts:
        try:
            _validate(args, runner, objective, held)
        except KeyboardInterrupt:
            reason = "interrupted"
            print("autotune: interrupted while validating the finalists; the search is "
                  "saved and best.json holds its own (unvalidated) best. Rerun the same "
                  "command to validate.", file=sys.stderr, flush=True)
    if reason != "interrupted" and args.batch_sizes:
        try:
            from autotune.search.schedule_stage import run_schedule
            run_schedule(runner.study, objective, runner.context, runner.space,
                         args.batch_sizes_parsed, args.schedule_ks, runner.context.prompts,
                         held.prompts,
                         run_dir if args.resolved_fidelity in ("multi", "replay") else None)
        except KeyboardInterrupt:
            reason = "interrupted"
            print("autotune: interrupted while tuning K per batch size; the search is "
                  "saved and best.json has no schedule. Rerun the same command to tune "
                  "it.", file=sys.stderr, flush=True)
    try:
        write_run_files(run_dir, runner.study, objective, context)
        outputs = _write_outputs(run_dir, storage, runner.study, objective, context)
    except KeyboardInterrupt:
        # The study is in the storage; each file is replaced atomically, so what was
        # not rewritten is the previous version (or absent) and can be redone.
        reason, outputs = "interrupted", []
        print(f"autotune: interrupted while writing the run folder; the study is saved. "
              f"Redo the files with: autotune report {run_dir}; autotune export "
              f"{run_dir / BEST_FILE} --format ... (or rerun the same command)",
              file=sys.stderr, flush=True)
    done, _, _ = runner.progress()
    stopped = {"budget": "trial budget reached", "timeout": "--timeout reached",
               "interrupted": "interrupted (Ctrl-C); rerun the same command to resume",
               "infeasible": "the space kept yielding infeasible points",
               "grid": "the grid is exhausted"}[reason]
    print(f"\n{stopped}: {done} of {budget} trials finished "
          f"({time.monotonic() - began:.0f} s this run)\n", file=sys.stderr)
    print(top_table(runner.study, objective))
    print("\n" + validation_table(runner.study, objective))
    files = [TRIALS_FILE, BEST_FILE, RUN_FILE, *outputs,
             *([PROFILE_FILE] if (run_dir / PROFILE_FILE).is_file() else [])]
    print(f"\nrun folder: {run_dir} ({', '.join(files)})")
    return 130 if reason == "interrupted" else 0


def check_unseen(draft: Any, held_out: list[Any]) -> None:
    """Refuse a trained drafter that was trained on one of the search's held-out
    prompts: its validated figure would not be a held-out figure."""
    if not isinstance(draft, TrainedDraft) or not held_out:
        return
    seen = trained_prompt_digests(draft)
    overlap = [p for p in held_out if prompt_digest(p.text) in seen]
    if overlap:
        raise AutotuneError(f"drafter {draft.path} was trained on {len(overlap)} of this "
                            f"search's held-out prompts (e.g. {overlap[0].prompt_id}): train "
                            "it with the same --workload, --validation and --seed as the search")
