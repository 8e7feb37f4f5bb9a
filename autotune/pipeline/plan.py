"""The search plan: a search's inputs, checked and resolved once, before any model loads.

`SearchRequest` holds the inputs as given (the `search` flags, or a bench's keywords),
with the CLI's defaults; `plan_search` checks every one that can be checked without a
model (numbers, space, objective, enqueued configs, the workload split, batch sizes,
fidelity, the target engine), so a typo costs a second, not a model load, and resolves
the defaults that depend on others (trial budget, prompts, study name, run folder,
storage). The `SearchPlan` it returns is what `autotune.pipeline.run` runs; nothing
travels on the argparse namespace.
"""

from __future__ import annotations

import os
import time

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.backends import ENGINE_BACKENDS, input_error, unavailable
from autotune.common.errors import AutotuneError
from autotune.common.files import check_writable_folder
from autotune.frozen.record import KnobValue
from autotune.schema.config import config_from_mapping, load_config_file
from autotune.schema.engines import ENGINES
from autotune.pipeline.budget import DEFAULT_TIME_BUDGET, parse_duration
from autotune.pipeline.progress import note
from autotune.search.finalists import DEFAULT_MIN_GAIN
from autotune.search.objectives import Objective, load_objective
from autotune.search.samplers import check_sampler_name
from autotune.search.schedule import parse_batch_sizes, parse_ks
from autotune.search.storage import JOURNAL_NAME
from autotune.search.targets import ALL_TARGETS, DEFAULT_TARGET, answered_engines, default_space
from autotune.space import SearchSpace, load_space
from autotune.workloads.prompts import TURNS, Prompt
from autotune.workloads.split import DEFAULT_POOL, PromptSplit, split_prompts

# Where run folders go by default: reports/<study>/.
REPORTS = Path("reports")
# The replay screens rank configs on this many times the measured search prompts by
# default: a prompt costs a screen one reference decode, and a config chosen on a few
# prompts varies with them by as much as its margin over an engine's default (issue 41).
SCREEN_PROMPTS_FACTOR = 3
# The trial budget when none is given, by the fidelity asked for.
DEFAULT_TRIALS = {"measure": 30, "multi": 6, "replay": 500, "engine": 16}


@dataclass(frozen=True)
class SearchRequest:
    """A search's inputs as given, unchecked; the defaults are `autotune search`'s
    (tests/test_cli.py checks that the two agree). None: resolved by the plan."""

    model: str = "default"
    draft: str | None = None
    device: str = "auto"
    dtype: str | None = None
    trust_remote_code: bool = False
    workload: str = "spec_bench"
    categories: str | None = None          # comma-separated
    prompts: int | None = None
    max_new_tokens: int | None = None
    seed: int = 0
    target: str = ALL_TARGETS
    space: str | None = None
    objective: str = "speedup"
    validation: str = "0.4"                # a fraction, a prompt file, or 0
    validation_pool: int = DEFAULT_POOL        # held-out prompts predicted by replay
    validation_prompts: int = 16
    validation_repeats: int = 1
    validation_budget: float | None = None     # seconds for the finalists' race
    turns: str = "first"                       # multi-turn prompts: "first" or "all"
    concurrency: int = 1                       # requests served side by side (llama-server)
    finalists: int = 2
    min_gain: float = DEFAULT_MIN_GAIN     # below it, speculating is not worth having
    trials: int | None = None
    fidelity: str = "multi"
    batch_sizes: str | None = None         # "1,4,16"
    schedule_k: str | None = None          # "1,2,4"
    screen: int = 220
    screen_prompts: int | None = None      # None: SCREEN_PROMPTS_FACTOR x the prompts
    # Wall clock for the whole run ("10m", "600s", None or "none": the counts alone).
    time_budget: str | float | None = DEFAULT_TIME_BUDGET
    timeout: float | None = None
    trial_timeout: float | None = None
    sampler: str = "tpe"
    prune: bool = True
    storage: str | None = None
    study: str | None = None
    out: str | None = None
    enqueue: str | None = None             # a JSON/YAML file of configs

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> SearchRequest:
        """The request from `values` (e.g. `vars(args)`): its own keys are taken, any
        other is ignored (the subcommand table's own, like `command`)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in names})


@dataclass(frozen=True)
class SearchPlan:
    """A checked search, every default resolved: what `run_search` runs."""

    # The models, as named (loaded by the run).
    model: str
    draft: str | None
    device: str
    dtype: str | None
    trust_remote_code: bool
    # What is searched, for which engine, towards what.
    target: str                            # the engine the study's configs are tuned for
    # `--target all`: the engines answered besides (each screened by replay and raced
    # with the study's finalists); empty for `--target X`.
    engines: tuple[str, ...]
    space: SearchSpace
    objective: Objective
    # The prompts.
    workload: str
    categories: list[str] | None
    split: PromptSplit
    max_new_tokens: int
    # How: the fidelity this search runs at (multi falls back to measure where replay
    # cannot predict the objective) and whether the target engine measures here.
    fidelity: str
    in_engine: bool
    # Budgets.
    trials: int
    screen: int
    finalists: int
    validation_repeats: int
    validation_budget_s: float | None      # the finalists' race stops before passing it
    turns: str                             # "all": later turns follow their first
    concurrency: int                       # requests served side by side (-np)
    min_gain: float                        # the answer's smallest gain worth having
    timeout_s: float | None
    trial_timeout_s: float | None
    # --time-budget in seconds (None: none): the counts above are then upper bounds,
    # sized to the machine's speed once it is measured (`autotune.pipeline.budget`).
    time_budget_s: float | None
    # After the search: K per batch size (none: no schedule).
    batch_sizes: tuple[int, ...]
    schedule_ks: tuple[int, ...] | None
    # The study.
    sampler: str
    seed: int
    prune: bool
    enqueue: tuple[dict[str, KnobValue], ...]
    study_name: str
    storage: str                           # URL, or a journal file path
    run_dir: Path
    # When the --time-budget's clock started (time.monotonic()): when the plan was made,
    # right after the command's arguments were read (only the imports before it are not
    # counted). Never the process's start: a search run inside a longer process (a test,
    # a bench, a notebook) would find its budget spent before it began.
    budget_started: float = field(default_factory=time.monotonic)
    # `--target all`: the answered engines whose backend runs here, each raced again in
    # itself after the main race (`autotune.search.engine_races`): their answers are
    # the engines' own, the decoder's figures the prediction beside them.
    engine_races: tuple[str, ...] = ()

    @property
    def prompts(self) -> list[Prompt]:
        """The search prompts."""
        return self.split.search

    @property
    def held_out(self) -> list[Prompt]:
        """The validation prompts, never measured by the search."""
        return self.split.held_out

    @property
    def pool(self) -> list[Prompt]:
        """The held-out pool the answer holds for (`held_out` is measured of it)."""
        return self.split.pool

    @property
    def replays(self) -> bool:
        """Whether the replay tier predicts in this search (and so may screen the
        schedule's K values too)."""
        return self.fidelity in ("multi", "replay")


def plan_search(request: SearchRequest) -> SearchPlan:
    """Check `request` and resolve its defaults; raises AutotuneError (one line) on the
    first thing wrong. The checks run in the order a user fixes them: numbers, files,
    the workload, then what depends on the loaded objective and the target engine."""
    if request.fidelity not in DEFAULT_TRIALS:
        raise AutotuneError(f"--fidelity must be one of {', '.join(DEFAULT_TRIALS)}, "
                            f"not {request.fidelity!r}")
    request, engines = _resolve_all(request)
    target = request.target
    asked = _engine_fidelity(request)
    trials = request.trials if request.trials is not None else DEFAULT_TRIALS[asked]
    _check_numbers(request, trials)
    time_budget_s = parse_duration(request.time_budget)
    space = load_space(request.space or default_space(target))
    objective = load_objective(request.objective)
    if objective.multi and request.sampler in ("cmaes", "bayes_opt"):
        raise AutotuneError(f"--sampler {request.sampler} optimises one objective and "
                            f"{objective.name!r} has {len(objective.metrics)}; use tpe or nsga2")
    enqueue = load_enqueue(request.enqueue) if request.enqueue else []
    defaults = objective.workload
    prompts_n = request.prompts if request.prompts is not None else defaults.prompts
    max_new = (request.max_new_tokens if request.max_new_tokens is not None
               else defaults.max_new_tokens)
    if max_new < 1:
        raise AutotuneError("--max-new-tokens must be at least 1")
    if prompts_n < 1:
        raise AutotuneError("--prompts must be at least 1")
    categories = ([c for c in request.categories.split(",") if c] if request.categories
                  else list(defaults.categories) if defaults.categories else None)
    study_name = request.study or (f"{model_slug(request.model)}-{space.name}-{objective.name}"
                                   + (f"-c{request.concurrency}"
                                      if request.concurrency > 1 else ""))
    run_dir = Path(request.out) if request.out else REPORTS / study_name
    if run_dir.exists() and not run_dir.is_dir():
        raise AutotuneError(f"--out {run_dir} exists and is not a folder")
    # Before the model loads (17 s for the default): a folder that cannot be made or
    # written is one line now, not a traceback when the first file is written.
    check_writable_folder(run_dir, "--out")
    storage = request.storage or str(run_dir / JOURNAL_NAME)

    screen_n = (request.screen_prompts if request.screen_prompts is not None
                else SCREEN_PROMPTS_FACTOR * prompts_n)
    if screen_n < prompts_n:
        raise AutotuneError(f"--screen-prompts {screen_n} must be at least --prompts "
                            f"{prompts_n} (the screens rank on the search prompts and more)")
    split = split_prompts(request.workload, categories, request.validation, request.seed,
                          prompts_n, request.validation_prompts, request.validation_pool,
                          screen_n)
    batch_sizes, schedule_ks = _schedule(request, len(split.search))
    fidelity = _fidelity(asked, objective)
    in_engine = _engine_measures(request, fidelity)
    if engines and fidelity != "multi":
        note(f"answering for autotune's own decoder only: the engines' answers are "
             f"screened by replay, which --fidelity {fidelity} (objective "
             f"{objective.name!r}) does not run; --target ENGINE searches one engine")
        engines = ()
    return SearchPlan(
        model=request.model, draft=request.draft, device=request.device,
        dtype=request.dtype, trust_remote_code=request.trust_remote_code,
        target=target, engines=engines, space=space, objective=objective,
        workload=request.workload, categories=categories, split=split,
        max_new_tokens=max_new, fidelity=fidelity, in_engine=in_engine,
        trials=trials, screen=request.screen, finalists=request.finalists,
        validation_repeats=request.validation_repeats,
        validation_budget_s=request.validation_budget, turns=request.turns,
        concurrency=request.concurrency,
        min_gain=request.min_gain,
        timeout_s=request.timeout,
        trial_timeout_s=request.trial_timeout, time_budget_s=time_budget_s,
        batch_sizes=batch_sizes,
        schedule_ks=schedule_ks, sampler=request.sampler, seed=request.seed,
        prune=request.prune, enqueue=tuple(enqueue), study_name=study_name,
        storage=storage, run_dir=run_dir,
        engine_races=_engine_races(request, engines) if split.held_out else ())


# `AUTOTUNE_ENGINE_RACES=0`: no engine is raced in itself after the main race (every
# engine's answer stays our decoder's prediction): a quicker run, and the test suite's
# setting outside the tests of the races themselves.
ENV_ENGINE_RACES = "AUTOTUNE_ENGINE_RACES"


def _engine_races(request: SearchRequest, engines: tuple[str, ...]) -> tuple[str, ...]:
    """The answered engines (`--target all`) whose backend runs here: each is raced in
    itself after the main race; a note names them (the others stay predictions)."""
    if os.environ.get(ENV_ENGINE_RACES, "") == "0":
        if engines:
            note(f"{ENV_ENGINE_RACES}=0: no engine is raced in itself; every engine's "
                 "answer is autotune's decoder's prediction under its rules")
        return ()
    raced = tuple(e for e in engines if e in ENGINE_BACKENDS
                  and input_error(e, request.model, request.draft) is None
                  and unavailable(e, request.model, request.draft) is None)
    if raced:
        note(f"raced again in themselves after the main race: {', '.join(raced)}; the "
             "other engines' answers are predictions of autotune's decoder under their "
             "rules")
    return raced


def _resolve_all(request: SearchRequest) -> tuple[SearchRequest, tuple[str, ...]]:
    """`--target all`: the study searches autotune's own space under its own rules, and
    the engines answered besides are named; any other target: itself, and none."""
    if request.target != ALL_TARGETS:
        return request, ()
    engines = answered_engines(request.model, request.draft)
    return dataclasses.replace(request, target=DEFAULT_TARGET), engines


def model_slug(spec: str) -> str:
    """A file- and study-name-safe form of a model spec (the default study name's start)."""
    name = Path(spec.rstrip("/")).name or spec
    name = name.removesuffix(".gguf")
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-") or "model"


def load_enqueue(path: str) -> list[dict[str, KnobValue]]:
    """The configs of `--enqueue FILE` (one mapping, a list, or frozen documents' params),
    each validated now."""
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


def _check_numbers(request: SearchRequest, trials: int) -> None:
    if request.screen < 1:
        raise AutotuneError("--screen must be at least 1")
    if trials < 1:
        raise AutotuneError("--trials must be at least 1")
    for flag, value, least in (("--validation-pool", request.validation_pool, 2),
                               ("--validation-prompts", request.validation_prompts, 1),
                               ("--validation-repeats", request.validation_repeats, 1),
                               ("--finalists", request.finalists, 1)):
        if value < least:
            raise AutotuneError(f"{flag} must be at least {least}")
    if request.concurrency < 1:
        raise AutotuneError("--concurrency must be at least 1")
    if request.concurrency > 1 and request.target != "llama_server":
        raise AutotuneError(f"--concurrency {request.concurrency} is measured in llama-server "
                            "(--target llama_server); for batched serving in the other "
                            "engines tune K per batch size with --batch-sizes")
    if request.turns not in TURNS:
        raise AutotuneError(f"--turns {request.turns!r}: one of {', '.join(TURNS)}")
    if request.validation_budget is not None and not request.validation_budget > 0:
        raise AutotuneError(f"--validation-budget must be a positive number of seconds, "
                            f"not {request.validation_budget:g}")
    if not 0.0 <= request.min_gain < 1.0:
        raise AutotuneError(f"--min-gain must lie in [0, 1) (a fraction: 0.05 is 5%), "
                            f"not {request.min_gain:g}")
    for flag, seconds in (("--timeout", request.timeout),
                          ("--trial-timeout", request.trial_timeout)):
        if seconds is not None and seconds <= 0:
            raise AutotuneError(f"{flag} must be a positive number of seconds")
    check_sampler_name(request.sampler)


def _schedule(request: SearchRequest, n_search_prompts: int
              ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """(--batch-sizes, --schedule-k) parsed; refused before any model loads."""
    batch_sizes = parse_batch_sizes(request.batch_sizes) if request.batch_sizes else ()
    if request.schedule_k and not request.batch_sizes:
        raise AutotuneError("--schedule-k needs --batch-sizes")
    ks = parse_ks(request.schedule_k) if request.schedule_k else None
    if batch_sizes and max(batch_sizes) > n_search_prompts:
        largest = max(batch_sizes)
        raise AutotuneError(f"--batch-sizes {largest} needs at least {largest} search prompts "
                            f"(one batch of {largest}); the search has {n_search_prompts}: "
                            "give more --prompts")
    return batch_sizes, ks


def _engine_fidelity(request: SearchRequest) -> str:
    """The fidelity asked, where the --target engine's drafters run in the engine only
    (`EngineRules.measures_in_engine`: llama-server): its default `multi` becomes
    `engine`, and replay or our decoder alone is refused."""
    if request.target not in ENGINES or not ENGINES[request.target].measures_in_engine:
        return request.fidelity
    if request.fidelity == "multi":
        return "engine"
    if request.fidelity != "engine":
        raise AutotuneError(f"--target {request.target} measures every trial in "
                            f"{ENGINES[request.target].label} itself (most of its drafters "
                            f"run nowhere else): drop --fidelity {request.fidelity}, or "
                            "give --fidelity engine")
    return request.fidelity


def _fidelity(asked: str, objective: Objective) -> str:
    """The fidelity this search runs at: replay predicts greedy decoding only."""
    greedy = objective.workload.temperature == 0.0
    if asked == "engine" and not objective.needs_timing:
        raise AutotuneError(f"--fidelity engine times trials in the engine; objective "
                            f"{objective.name!r} times nothing: use --fidelity measure")
    if asked == "replay" and not greedy:
        raise AutotuneError(f"--fidelity replay predicts greedy decoding only; objective "
                            f"{objective.name!r} samples (temperature "
                            f"{objective.workload.temperature:g}): use --fidelity measure")
    if asked == "replay" and objective.needs_agreement:
        raise AutotuneError("--fidelity replay predicts timed metrics; the agreement "
                            "objective decodes nothing anyway: use --fidelity measure")
    if asked == "multi" and (not greedy or not objective.needs_timing):
        why = "it samples" if not greedy else "it times nothing"
        note(f"objective {objective.name!r}: no replay screen ({why}); every "
             "trial is measured")
        return "measure"
    return asked


def _engine_measures(request: SearchRequest, fidelity: str) -> bool:
    """Whether the --target engine measures here (every trial with --fidelity engine,
    else the finalists): refused in one line before any model loads when --fidelity
    engine asks for an engine that cannot; otherwise a note says where figures come from."""
    target = request.target
    if target not in ENGINE_BACKENDS:
        if fidelity == "engine":
            raise AutotuneError(f"--fidelity engine measures in the --target engine; "
                                f"{target!r} has no backend that runs here (engines: "
                                f"{', '.join(ENGINE_BACKENDS)})")
        return False
    wrong = input_error(target, request.model, request.draft)
    if wrong is not None:
        raise AutotuneError(f"--target {target}: {wrong}")
    why = unavailable(target, request.model, request.draft)
    if why is not None:
        if fidelity == "engine":
            raise AutotuneError(f"--fidelity engine: {target} cannot measure here: {why}")
        note(f"{target} cannot measure here ({why}); its finalists are measured "
             f"in autotune's decoder under {target}'s drafting rules")
        return False
    return True
