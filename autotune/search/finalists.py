"""Finalists: the search's best distinct configs validated on prompts it never saw.

A search ranks hundreds of noisy single measurements; its best is partly luck (the
winner's curse). After the study stops, the top `n` distinct configs, the strongest
documented default the space holds (vLLM's n-gram, Draft & Verify, ...) and the AR
baseline are predicted by replay on the held-out pool and raced on a random sample of it
(`measure_finalists`: looks, drops and error spending in `autotune.search.racing`;
prediction-powered figures from `autotune.measure.ppi`, measured-alone ones where replay
cannot predict). The answer is chosen there:

- a finalist counts when its greedy output matched the baseline's and the interval of
  its paired speedup lies wholly above 1.0 and reaches 1 + `min_gain` (a gain worth
  having is plausible; each interval at its look's level shared by the group's arms
  still racing, so the group's error is one 5% however many race);
- of those, the highest validated speedup wins: **speculate**;
- none, and every lossless finalist's interval lies below 1 + `min_gain` (no gain worth
  having is left in the interval): **do not speculate**, with the evidence;
- none, but some interval still reaches 1 + `min_gain`: **undecided**: the figures
  cannot tell a gain worth having from none; the run recommends nothing (no export) and
  says how likely the leader is, and how to measure more.

A search that answers for every engine (`--target all`) races each engine's own
finalists too (`Finalist.engine`: chosen by that engine's replay screen, drafted under
its rules) in the same race, against the same AR baseline: each engine's finalists are
dropped only against their own leader and judged among themselves by the same rule, into
`engines[<name>]` (decision, winner, reason) beside `engine_finalists[<name>]`;
`finalists`, `decision` and `winner` stay autotune's own (the ceiling). `engine_record`
gives one engine's part in the single-engine shape every reader knows.

The record (`VALIDATION_ATTR`, a study user attribute, so the storage alone rebuilds
`best.json`, the report and the exports) holds every finalist's figures; `answer()` is
the one rule that `best.json`, the report and the exports follow. Both live in
`autotune.records.answer`, below the search, so those readers need none of this module
(its names stay importable from here). A record judges the trials complete when it was
made: a resumed search that adds trials makes it stale until the finalists are measured
again.

Torch-free but for `measure_finalists`, which imports the measuring code when called.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial
from pydantic import JsonValue

from autotune.schema.label import describe
from autotune.measure import paired
from autotune.records.summary import MeasurementSummary
from autotune.records import ranking
from autotune.records.trial import BASELINE, TrialRecord
from autotune.records.answer import (
    DO_NOT_SPECULATE,
    OWN_ENGINE,
    SPECULATE,
    UNDECIDED,
    VALIDATION_ATTR,
    Answer,
    answer,
    current_record,
    engine_names,
    engine_record,
    store_record,
    stored_record,
)
from autotune.records.validation import (
    Baseline,
    FinalistEntry,
    FinalistFigures,
    Judgement,
    Look,
    RaceLog,
    ValidationRecord,
)

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig
    from autotune.search.objectives import EvalContext
    from autotune.workloads.prompts import Prompt

__all__ = ["DEFAULT_MIN_GAIN", "DO_NOT_SPECULATE", "OWN_ENGINE", "SPECULATE", "UNDECIDED",
           "VALIDATION_ATTR", "Answer", "Finalist", "FinalistEntry", "Judgement",
           "ValidationRecord",
           "answer", "current_record", "engine_names", "engine_record",
           "default_finalist", "finalist_of", "measure_finalists", "record_arms", "rejudged",
           "resumable",
           "pick_finalists", "shown_faster", "store_record", "stored_record"]

# The gain below which speculating is not worth having (`--min-gain`): 5%.
DEFAULT_MIN_GAIN = 0.05
STATISTIC = ("AR / candidate decode time per generated token, summed over the held-out "
             "prompts (repeats pooled), runs interleaved per prompt; prediction-powered "
             "(ppi++) over the held-out pool where the replay tier predicts the config, "
             "else over the measured prompts; Fieller's interval over prompts, each at "
             "its look's level shared by the arms racing (90% for the whole race)")
@dataclass(frozen=True)
class Finalist:
    """A config chosen for validation: its trial, why it was chosen and its search figures."""

    trial: int
    label: str
    role: str                      # "search #1", or "default vllm_ngram"
    preset: str | None
    params: dict[str, JsonValue]   # its config as the trial stored it
    search: dict[str, JsonValue]   # the search's own figures for it
    # Whose answer it competes for: autotune's own (a trial of the measured study), or
    # an engine's (a trial of that engine's replay screen, its figures predicted).
    engine: str = OWN_ENGINE

    @property
    def arm(self) -> str:
        own = f"trial{self.trial}"
        return own if self.engine == OWN_ENGINE else f"{self.engine}.{own}"


def _config_key(config: Any) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def finalist_of(trial: FrozenTrial, role: str, engine: str = OWN_ENGINE) -> Finalist:
    """`trial` as a finalist: its config and its search figures (an engine screen's
    trial: its replay predictions, marked `fidelity: replay`)."""
    record = TrialRecord.of(trial)
    config = dict(record.config_json or {})
    metrics = record.metrics or MeasurementSummary()
    search = {k: metrics.figure(k) for k in ("speedup", "latency_ms_per_token",
                                             "mean_accepted_tokens")}
    if engine != OWN_ENGINE:
        search["fidelity"] = "replay"
    return Finalist(trial=trial.number, label=describe(config), role=role,
                    preset=record.preset, params=config, search=search, engine=engine)


def _ordered(study: optuna.Study, objective: ranking.Directions) -> list[TrialRecord]:
    """`study`'s complete speculative trials in rank order, measured trials first: a
    screen's copy (`search.screen_finalists`, its figures predicted) comes after them,
    and gives way to a trial that measured its config."""
    records = [record for record in map(TrialRecord.of, ranking.ranked(study, objective))
               if record.speculates and not record.is_baseline]
    measured = {_config_key(r.config_json) for r in records if not r.from_screen}
    return [r for r in records if not r.from_screen] + [
        r for r in records if r.from_screen and _config_key(r.config_json) not in measured]


def pick_finalists(study: optuna.Study, objective: ranking.Directions,
                   n: int) -> list[Finalist]:
    """The `n` best distinct speculative configs by `autotune.records.ranking` (a point measured
    twice is one finalist), plus the best-ranked documented default (a queued preset)
    when it is not among them. The AR baseline is the reference, never a finalist."""
    order = _ordered(study, objective)
    chosen: list[Finalist] = []
    seen: set[str] = set()
    for record in order:
        key = _config_key(record.config_json)
        if key not in seen and len(chosen) < n:
            seen.add(key)
            chosen.append(finalist_of(record.trial, f"search #{len(chosen) + 1}"))
    return chosen + default_finalist(study, objective, chosen)


def default_finalist(study: optuna.Study, objective: ranking.Directions,
                     chosen: list[Finalist]) -> list[Finalist]:
    """The best-ranked documented default (a queued preset) of `study`'s complete
    trials, as a finalist, unless `chosen` holds its config; else none."""
    seen = {_config_key(f.params) for f in chosen}
    default = next((r for r in _ordered(study, objective) if r.preset not in (None, BASELINE)
                    and not str(r.preset).startswith("enqueue")), None)
    if default is None or _config_key(default.config_json) in seen:
        return []
    return [finalist_of(default.trial, f"default {default.preset}")]


def shown_faster(entry: FinalistEntry, min_gain: float = DEFAULT_MIN_GAIN) -> bool:
    """Shown faster by a gain worth having: lossless (where checked), the whole interval
    above 1.0, and its upper bound at or above 1 + `min_gain` (the gain worth having is
    plausible; an interval wholly below it is "do not speculate", whatever its lower
    bound)."""
    ci = entry.figures.interval
    return entry.figures.shown_faster() and ci is not None and ci.high >= 1.0 + min_gain


def judge(finalists: list[FinalistEntry], min_gain: float = DEFAULT_MIN_GAIN) -> Judgement:
    """The decision from measured finalists: SPECULATE (with its winning trial),
    DO_NOT_SPECULATE or UNDECIDED, and a one-line reason (the module docstring says
    when; docs/statistics.md why). The three answers part the intervals by two lines,
    1.0 and 1 + `min_gain`: wholly above 1.0 and reaching 1 + `min_gain`: speculate;
    wholly below 1 + `min_gain`: do not speculate (a certain 1% is not worth having);
    across 1.0 and reaching 1 + `min_gain`, or no interval at all (too few prompts):
    undecided."""
    worth = 1.0 + min_gain
    faster = [f for f in finalists if shown_faster(f, min_gain)]
    if faster:
        best = max(faster, key=lambda f: (f.speedup, -f.trial))
        return Judgement(SPECULATE, best.trial, (
            f"{best.headline()}: the highest validated speedup whose interval lies above "
            f"1.0 and reaches {worth:.2f} (--min-gain {min_gain:g})"))
    if not finalists:
        return Judgement(DO_NOT_SPECULATE, None,
                         "no speculative config completed in the search")
    lossy = [f for f in finalists if f.figures.refused_as_lossy()]
    measured = [f for f in finalists if isinstance(f.speedup, (int, float))]
    if not measured:
        return Judgement(DO_NOT_SPECULATE, None,
                         "no finalist decoded a token on the validation prompts")
    best = max(measured, key=lambda f: f.speedup or 0.0)
    # A lossy finalist may well be faster: it is refused for its output, not its speed.
    which = "lossless finalist's" if lossy else "finalist's"
    not_lossless = ""
    if lossy:
        not_lossless = (f"; not lossless (the speculative output differed from the same "
                        f"engine's greedy output): trial "
                        f"{', '.join(str(f.trial) for f in lossy)}")
    open_ = [f for f in measured
             if not f.figures.refused_as_lossy() and not f.figures.below(worth)]
    unsized = [f for f in open_ if f.figures.interval is None]
    if unsized:
        leader = max(unsized, key=lambda f: (f.speedup or 0.0, -f.trial))
        prompts = leader.figures.measured_prompts
        on = f"on {prompts} prompts " if prompts is not None else ""
        return Judgement(UNDECIDED, None, (
            f"too few prompts: likely {leader.headline()}, measured {on}where no interval "
            f"holds its level (at least {paired.MIN_INTERVAL_PROMPTS} prompts, more where "
            f"they vary much); rerun with more --validation-prompts{not_lossless}"))
    if open_:
        leader = max(open_, key=lambda f: (f.speedup or 0.0, -f.trial))
        return Judgement(UNDECIDED, None, (
            f"likely {leader.headline()}, not shown: its 90% interval reaches below 1.0 and "
            f"above {worth:.2f} (a gain worth having); rerun with more "
            f"--validation-prompts (or a larger --validation-pool){not_lossless}"))
    small = [f for f in measured if f.figures.shown_faster()]
    if small:
        top = max(small, key=lambda f: (f.speedup or 0.0, -f.trial))
        reason = (f"{top.headline()} is faster, but no {which} 90% interval reaches "
                  f"{worth:.2f} (--min-gain {min_gain:g}): a gain worth having is ruled "
                  f"out{not_lossless}")
    else:
        reason = (f"no {which} 90% interval lies above 1.0, and none reaches {worth:.2f} "
                  f"(--min-gain {min_gain:g}) (best {best.headline()}){not_lossless}")
    return Judgement(DO_NOT_SPECULATE, None, reason)


def measure_finalists(ctx: EvalContext, finalists: list[Finalist], prompts: list[Prompt],
                      repeats: int, complete_trials: int, source: str,
                      on_prompt: Callable[[int, int], None] | None = None,
                      min_gain: float = DEFAULT_MIN_GAIN, pool: list[Prompt] | None = None,
                      predicted: dict[str, list[paired.PromptPair]] | None = None,
                      budget_s: float | None = None, resume: ValidationRecord | None = None,
                      reserve: Sequence[Prompt] = ()) -> ValidationRecord:
    """Race `finalists` against the AR baseline over `prompts` (`repeats` pooled) and
    judge them: the record stored as the study's `VALIDATION_ATTR`.

    `prompts` are a random permutation's prefix of the held-out `pool`, measured in
    looks (`autotune.search.racing`): a finalist clearly behind is dropped, and the race
    stops once decided, at the end of `prompts`, or before a look that would pass
    `budget_s` seconds (None: no budget). `predicted`: per finalist arm, the replay
    tier's pairs over the whole pool (`pool_prediction.predict_pool`): a finalist with
    them gets prediction-powered figures (`autotune.measure.ppi`), one without the
    measured prompts' alone. `resume`: a record of this race stopped by its budget,
    continued from where it stopped (its measured runs kept, its error spent).
    `reserve`: the pool's prompts after `prompts` in the pool's sampling order, which a
    race under `budget_s` grows its sample into where the time left holds them
    (`racing.grown_sample`).

    `complete_trials` is how many trials the study had complete (the record is current
    while that holds); `source` says where the prompts came from, for the record.
    `on_prompt(done, total)` follows each prompt and repeat. `min_gain`: the gain below
    which speculating is not worth having (`judge`).
    """
    from autotune.schema.config import config_from_mapping

    pool = list(pool) if pool is not None else list(prompts)
    setup = _RaceSetup(
        ctx=ctx, prompts=[*prompts, *reserve], sample=len(prompts), repeats=repeats, min_gain=min_gain, budget_s=budget_s,
        configs={f.arm: config_from_mapping(f.params).validate() for f in finalists},
        groups={f.arm: f.engine for f in finalists},
        predicted={arm: pairs for arm, pairs in (predicted or {}).items()
                   if len(pool) > len(prompts)},
        on_prompt=on_prompt)
    setup = dataclasses.replace(setup, twins=_twins(setup.configs, setup.predicted))
    started_s = _start_engines(ctx.final_backend, setup.configs)
    if budget_s is not None and started_s:
        # The engines' start-up is the race's time too, spent before its first look.
        setup = dataclasses.replace(setup, budget_s=max(budget_s - started_s, 1e-3))
    planned = max(len(prompts), resume.planned_prompts or 0 if resume is not None else 0)
    race = _RaceState.resumed(finalists, min(planned, len(setup.prompts)), resume)
    _run_race(setup, race)
    return _record(setup, race, pool, complete_trials, source, finalists)


def _start_engines(backend: Any, configs: dict[str, DecodeConfig]) -> float:
    """Where the race's backend keeps started engines idle (`idle_engines`: vLLM, a
    minute or more to start each), the baseline's engine and the arms' started now, as
    many as it keeps, before the race's clock: its looks then time decoding, not
    start-ups, and the budget's look-ahead (`racing.overruns`) is not fooled by a first
    look that started them all. Seconds it took (0: nothing to start)."""
    if backend is None or backend.idle_engines < 1:
        return 0.0
    from autotune.schema.config import DecodeConfig as Config

    began = time.monotonic()
    for config in [Config(), *configs.values()][:backend.idle_engines]:
        backend.runner(config).close()
    return time.monotonic() - began


@dataclass(frozen=True)
class _RaceSetup:
    """What a race is run with and does not change while it runs."""

    ctx: EvalContext
    prompts: list[Prompt]          # the measured sample, in order, then its reserve
    sample: int                    # the sample's prompts before any growth
    repeats: int
    min_gain: float
    budget_s: float | None
    configs: dict[str, DecodeConfig]   # per finalist arm, validated
    groups: dict[str, str]             # per finalist arm, whose answer it competes for
    # Per finalist arm, the replay tier's pairs over the whole pool (none: no larger pool).
    predicted: dict[str, list[paired.PromptPair]]
    on_prompt: Callable[[int, int], None] | None
    # Arm -> an earlier arm that replay saw decode exactly alike on every pool prompt
    # (one method, the same rounds and costs: e.g. one n-gram config under two engines'
    # rules that agree on it): measured once, its runs filed for both.
    twins: dict[str, str] = field(default_factory=dict)

    @property
    def alpha(self) -> float:
        """The error the whole race may spend over its looks."""
        return 1.0 - paired.INTERVAL_LEVEL


@dataclass(frozen=True)
class _Facts:
    """Where a race's runs were measured and what `lossless` means there."""

    measured_by: str
    measured_by_label: str
    token_exact: bool
    lossless_tier: str       # exact (float32) or near-tie (bf16)


@dataclass
class _RaceState:
    """Where a race stands after its latest look: what a resumed race starts from and
    what the record is written from (kept in one place rather than a dozen locals)."""

    rows: dict[str, list[list[Any]]]   # per arm, every measured run (`row_of`)
    looks: list[Look]
    active: list[str]                  # arms still racing
    measured: int                      # prompts of the sample measured so far
    planned: int                       # the sample's size (`racing.grown_sample`)
    alpha_spent: float
    # What each finalist showed at its last look (a dropped one's stays as it was).
    shown: dict[str, FinalistFigures]
    facts: _Facts | None               # None until a look measured runs
    stopped: str | None                # None while it runs, else racing's reason
    began: float                       # time.monotonic() when this run took it up
    looks_this_run: int = 0            # what the time budget counts
    prompts_this_run: int = 0          # sample prompts this run measured (their pace)
    # Earlier looks' outputs, for a warm history (methods with cross-request state).
    responses: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def resumed(cls, finalists: list[Finalist], planned: int,
                earlier: ValidationRecord | None) -> _RaceState:
        """A fresh race (`earlier` None), or the one `earlier`'s record stopped."""
        race = earlier.race if earlier is not None else None
        looks = list(race.looks) if race is not None else []
        dropped = {arm for look in looks for arm in look.dropped}
        measured = race.measured if race is not None else 0
        facts = None
        if earlier is not None and earlier.measured_by is not None:
            facts = _Facts(earlier.measured_by, earlier.measured_by_label or "",
                           bool(earlier.token_exact if earlier.token_exact is not None
                                else True), earlier.lossless_tier or "exact")
        return cls(
            rows={f.arm: list(earlier.rows.get(f.arm, []) if earlier is not None else [])
                  for f in finalists},
            looks=looks, active=[f.arm for f in finalists if f.arm not in dropped],
            measured=measured, planned=planned,
            alpha_spent=race.alpha_spent if race is not None else 0.0,
            shown={entry.arm: entry.figures
                   for entry in (earlier.all_entries() if earlier is not None else [])},
            facts=facts, stopped="sample" if measured >= planned else None,
            began=time.monotonic())


def record_arms(record: ValidationRecord) -> list[str]:
    """The race arms of a record's finalists, autotune's own first (`Finalist.arm`)."""
    return [entry.arm for entry in record.all_entries()]


def _run_race(setup: _RaceSetup, race: _RaceState) -> None:
    """Look after look until the race is decided, its sample measured, or a look would
    pass the time budget; a look that ends the sample with time left grows it first."""
    from autotune.search import racing

    while race.stopped is None and race.active:
        size = next((s for s in racing.look_sizes(race.planned) if s > race.measured), None)
        if size is None:
            break
        if racing.overruns(time.monotonic() - race.began, race.prompts_this_run,
                           size - race.measured, setup.budget_s):
            race.stopped = "budget"
            break
        _measure_look(setup, race, size)
        race.planned = racing.grown_sample(
            race.planned, race.measured, len(setup.prompts), time.monotonic() - race.began,
            race.prompts_this_run, setup.budget_s)
        _take_look(setup, race, size)


def _twins(configs: dict[str, DecodeConfig], predicted: dict[str, list[paired.PromptPair]]
           ) -> dict[str, str]:
    """Arm -> the first arm of the same method whose predicted pairs over the pool are
    identical (only arms replay predicted can be twins)."""
    first: dict[tuple[Any, ...], str] = {}
    twins: dict[str, str] = {}
    for arm, config in configs.items():
        pairs = predicted.get(arm)
        if not pairs:
            continue
        key = (config.method, *(dataclasses.astuple(pair) for pair in pairs))
        if key in first:
            twins[arm] = first[key]
        else:
            first[key] = arm
    return twins


def _measure_look(setup: _RaceSetup, race: _RaceState, size: int) -> None:
    """Measure the active arms on the sample's prompts up to `size` not yet measured (a
    twin whose first arm is measured too takes that arm's runs)."""
    from autotune.measure.measurement import measure_arms
    from autotune.measure.results import lossless_tier
    from autotune.search.finalist_figures import row_of

    ctx, prompts, offset = setup.ctx, setup.prompts, race.measured
    total = race.planned * setup.repeats

    def each(index: int, repeat: int, runs: Any, so_far: Any) -> None:
        if setup.on_prompt is not None:
            setup.on_prompt(repeat * race.planned + offset + index + 1, total)

    # A method with cross-request state serves the sample in its order: a look's
    # prompts come after the earlier looks' (their outputs filed untimed first).
    copied = {arm: twin for arm, twin in setup.twins.items()
              if arm in race.active and twin in race.active}
    measured = measure_arms(ctx.target, {arm: setup.configs[arm] for arm in race.active
                                         if arm not in copied},
                            prompts[offset:size], ctx.max_new_tokens, repeats=setup.repeats,
                            seed=ctx.seed, draft=ctx.draft, on_prompt=each,
                            backend=ctx.final_backend, history=prompts[:offset],
                            responses=race.responses,
                            # Our decoder, in this process, warmed by this run's first
                            # look: a later look's warm-up would pay for nothing.
                            warm_up=race.looks_this_run == 0 or ctx.final_backend is not None)
    for arm, twin in copied.items():
        measured[arm] = measured[twin]
    for arm, measurement in measured.items():
        race.rows[arm] += [row_of(run) for run in measurement.runs]
        race.facts = _Facts(measurement.measured_by, measurement.measured_by_label,
                            measurement.token_exact, lossless_tier(measurement.runs))
    race.prompts_this_run += size - race.measured
    race.measured, race.looks_this_run = size, race.looks_this_run + 1


def _take_look(setup: _RaceSetup, race: _RaceState, size: int) -> None:
    """Spend this look's error (shared by the active arms of each group,
    `racing.arm_levels`), refresh the active arms' figures at their levels, and drop or
    stop as `racing.next_look_by_group` says. The look's record keeps the look's family
    level; each finalist's figures keep their own (`look_level`)."""
    from autotune.search import racing
    from autotune.search.finalist_figures import figures

    n = race.planned
    level = racing.look_level(setup.alpha, race.alpha_spent, size, n)
    race.alpha_spent += 1.0 - level
    token_exact = race.facts.token_exact if race.facts is not None else True
    # The look's error shared by the arms still racing in each group (Bonferroni): any
    # of them shown faster would be its group's answer.
    levels = racing.arm_levels(level, race.active, setup.groups)
    for arm in race.active:
        race.shown[arm] = figures(race.rows[arm], setup.predicted.get(arm), setup.repeats,
                                  levels[arm], setup.configs[arm].greedy, token_exact)
    look = racing.next_look_by_group(
        {arm: _interval_or_none(race.shown[arm]) for arm in race.active},
        groups=setup.groups, last=size >= n, min_gain=setup.min_gain)
    race.looks.append(Look(prompts=size, level=level, active=list(race.active),
                           dropped=list(look.dropped)))
    race.active = look.keep
    race.stopped = look.stop


def _record(setup: _RaceSetup, race: _RaceState, pool: list[Prompt], complete_trials: int,
            source: str, finalists: list[Finalist]) -> ValidationRecord:
    """The race's record: its facts, every finalist's last figures, the baseline's
    latency, and the decision of autotune's own finalists and of each engine's (`judge`,
    each group on its own), saying so when the budget stopped an undecided race."""
    from autotune.measure import ppi
    from autotune.search import racing
    from autotune.workloads.prompts import workload_digest

    prompts = setup.prompts
    measured_ids = list(dict.fromkeys(row[0] for arm_rows in race.rows.values()
                                      for row in arm_rows))
    by_id = {p.prompt_id: p for p in prompts}
    measured_prompts = [by_id[i] for i in measured_ids if i in by_id]
    log = RaceLog(stopped=race.stopped or "sample", measured=race.measured,
                  looks=race.looks, alpha_spent=race.alpha_spent, budget_s=setup.budget_s,
                  spending=racing.SPENDING, twins=setup.twins)
    baseline_ms = None
    groups: dict[str, list[FinalistEntry]] = {}
    for f in finalists:
        own = race.shown.get(f.arm)
        if own is None:
            continue
        baseline_ms = own.baseline_latency_ms_per_token or baseline_ms
        groups.setdefault(f.engine, []).append(FinalistEntry(
            trial=f.trial, label=f.label, role=f.role, preset=f.preset, params=f.params,
            search=f.search, engine=None if f.engine == OWN_ENGINE else f.engine,
            figures=own, dropped_after=log.dropped_after(f.arm)))

    def judged(entries: list[FinalistEntry]) -> Judgement:
        verdict = judge(entries, setup.min_gain)
        if verdict.decision == UNDECIDED and log.stopped == "budget":
            verdict = verdict._replace(reason=verdict.reason + (
                f"; the race's {setup.budget_s:.0f} s (--validation-budget, or its "
                f"share of --time-budget) ran out after {race.measured} of "
                f"{race.planned} prompts: rerun with a larger one to resume where "
                "it stopped"))
        return verdict

    own_entries = groups.pop(OWN_ENGINE, [])
    engines = sorted({f.engine for f in finalists} - {OWN_ENGINE})
    facts = race.facts
    return ValidationRecord(
        statistic=STATISTIC, level=paired.INTERVAL_LEVEL, source=source,
        estimator=ppi.ESTIMATOR if setup.predicted else "measured",
        pool_prompts=len(pool), pool_sha256=workload_digest(pool),
        pool_categories=_counts(p.category for p in pool),
        prompts=len(measured_prompts), prompt_ids=measured_ids,
        categories=_counts(p.category for p in measured_prompts),
        workload_sha256=workload_digest(measured_prompts),
        # The sample as drawn (a rerun of the same plan finds this record by it), its
        # size as the race grew it.
        planned_prompts=race.planned, sample_sha256=workload_digest(prompts[:setup.sample]),
        repeats=setup.repeats, max_new_tokens=setup.ctx.max_new_tokens,
        complete_trials=complete_trials, min_gain=setup.min_gain,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        race=log, rows=race.rows,
        finalists=own_entries, baseline=Baseline(latency_ms_per_token=baseline_ms),
        **judged(own_entries)._asdict(),
        engine_finalists={name: groups.get(name, []) for name in engines},
        engines={name: judged(groups.get(name, [])) for name in engines},
        # Where the runs were measured: once a look measured any (else not written).
        **({"measured_by": facts.measured_by, "measured_by_label": facts.measured_by_label,
            "token_exact": facts.token_exact, "lossless_tier": facts.lossless_tier}
           if facts else {}))


def _interval_or_none(figures: FinalistFigures) -> tuple[float, float] | None:
    ci = figures.interval
    return (ci.low, ci.high) if ci is not None else None


def resumable(record: ValidationRecord) -> bool:
    """A race its time budget stopped before it was decided: a rerun resumes it."""
    return (record.race is not None and record.race.stopped == "budget"
            and record.decision == UNDECIDED)


def rejudged(record: ValidationRecord, min_gain: float) -> ValidationRecord:
    """`record` judged again under another `min_gain` (the figures stay as measured),
    each engine's part too."""
    return record.judged_again(
        judge(record.finalists, min_gain), min_gain=min_gain,
        engines={name: judge(record.engine_finalists.get(name, []), min_gain)
                 for name in record.engines},
        engine_races={name: rejudged(race, min_gain)
                      for name, race in record.engine_races.items()})


def _counts(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out
