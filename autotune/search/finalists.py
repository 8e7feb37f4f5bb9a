"""Finalists: the search's best distinct configs validated on prompts it never saw.

A search ranks hundreds of noisy single measurements; its best is partly luck (the
winner's curse). After the study stops, the top `n` distinct configs, the strongest
documented default the space holds (vLLM's n-gram, Draft & Verify, ...) and the AR
baseline are predicted by replay on the held-out pool and raced on a random sample of it
(`measure_finalists`: looks, drops and error spending in `autotune.search.racing`;
prediction-powered figures from `autotune.measure.ppi`, measured-alone ones where replay
cannot predict). The answer is chosen there:

- a finalist counts when its greedy output matched the baseline's and the interval of
  its paired speedup lies wholly above 1.0;
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
the one rule that `best.json`, the report and the exports follow. A record judges the
trials complete when it was made: a resumed search that adds trials makes it stale until
the finalists are measured again.

Torch-free but for `measure_finalists`, which imports the measuring code when called.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial

from autotune.common.interval import CI_KEY, Interval
from autotune.decoding.label import describe
from autotune.measure import paired
from autotune.search import ranking
from autotune.search.samplers import BASELINE, BASELINE_ATTR, is_baseline

if TYPE_CHECKING:
    from autotune.decoding.config import DecodeConfig
    from autotune.search.objectives import EvalContext
    from autotune.workloads.prompts import Prompt

__all__ = ["DEFAULT_MIN_GAIN", "DO_NOT_SPECULATE", "OWN_ENGINE", "SPECULATE", "UNDECIDED",
           "VALIDATION_ATTR", "Answer", "Finalist",
           "answer", "current_record", "engine_names", "engine_record", "finalist_view",
           "finalist_of", "measure_finalists", "record_arms", "rejudged",
           "resumable",
           "measured_in", "pick_finalists", "shown_faster"]

VALIDATION_ATTR = "validation"
# The finalists of autotune's own search (its decoder, its rules): the record's top level.
OWN_ENGINE = "autotune"
SPECULATE = "speculate"
DO_NOT_SPECULATE = "do_not_speculate"
UNDECIDED = "undecided"
# The gain below which speculating is not worth having (`--min-gain`): 5%.
DEFAULT_MIN_GAIN = 0.05
STATISTIC = ("AR / candidate decode time per generated token, summed over the held-out "
             "prompts (repeats pooled), runs interleaved per prompt; prediction-powered "
             "(ppi++) over the held-out pool where the replay tier predicts the config, "
             "else over the measured prompts; 90% percentile bootstrap interval over "
             "prompts")
# Figures kept per finalist from its validation summary.
_KEPT = ("speedup", "latency_ms_per_token", "baseline_latency_ms_per_token",
         "mean_accepted_tokens", "acceptance_rate", "lossless", "lossless_binding",
         "mismatched_prompts", "near_tie_prompts", "divergences",
         "by_category")
# What names a finalist in the record, beside its figures.
_IDENTITY = ("trial", "label", "role", "preset", "params", "search", "dropped_after",
             "engine")
# The prediction-powered figures a finalist carries besides (`ppi.PoolEstimate.to_json`).
_POOLED = ("estimator", "ppi_lambda", "measured_prompts", "pool_prompts",
           "measured_speedup", "measured_ci90", "predicted_speedup", "look_level", "dropped_after")


@dataclass(frozen=True)
class Finalist:
    """A config chosen for validation: its trial, why it was chosen and its search figures."""

    trial: int
    label: str
    role: str                      # "search #1", or "default vllm_ngram"
    preset: str | None
    params: dict[str, Any]
    search: dict[str, Any]         # the search's own figures for it
    # Whose answer it competes for: autotune's own (a trial of the measured study), or
    # an engine's (a trial of that engine's replay screen, its figures predicted).
    engine: str = OWN_ENGINE

    @property
    def arm(self) -> str:
        own = f"trial{self.trial}"
        return own if self.engine == OWN_ENGINE else f"{self.engine}.{own}"


def _config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def finalist_of(trial: FrozenTrial, role: str, engine: str = OWN_ENGINE) -> Finalist:
    """`trial` as a finalist: its config and its search figures (an engine screen's
    trial: its replay predictions, marked `fidelity: replay`)."""
    config = dict(trial.user_attrs.get("config", {}))
    metrics = trial.user_attrs.get("metrics", {})
    search = {k: metrics.get(k) for k in ("speedup", "latency_ms_per_token",
                                          "mean_accepted_tokens")}
    if engine != OWN_ENGINE:
        search["fidelity"] = "replay"
    return Finalist(trial=trial.number, label=describe(config), role=role,
                    preset=trial.user_attrs.get(BASELINE_ATTR), params=config,
                    search=search, engine=engine)


def pick_finalists(study: optuna.Study, objective: ranking.Directions,
                   n: int) -> list[Finalist]:
    """The `n` best distinct speculative configs by `autotune.search.ranking` (a point measured
    twice is one finalist), plus the best-ranked documented default (a queued preset)
    when it is not among them. The AR baseline is the reference, never a finalist."""
    order = [t for t in ranking.ranked(study, objective)
             if t.user_attrs.get("config") is not None and not is_baseline(t)
             and t.user_attrs["config"].get("method", "none") != "none"]
    chosen: list[Finalist] = []
    seen: set[str] = set()
    for trial in order:
        key = _config_key(trial.user_attrs["config"])
        if key not in seen and len(chosen) < n:
            seen.add(key)
            chosen.append(finalist_of(trial, f"search #{len(chosen) + 1}"))

    def is_default(trial: FrozenTrial) -> bool:
        preset = trial.user_attrs.get(BASELINE_ATTR)
        return preset not in (None, BASELINE) and not str(preset).startswith("enqueue")

    default = next((t for t in order if is_default(t)), None)
    if default is not None and _config_key(default.user_attrs["config"]) not in seen:
        chosen.append(finalist_of(default, f"default {default.user_attrs[BASELINE_ATTR]}"))
    return chosen


def _refused_as_lossy(figures: dict[str, Any]) -> bool:
    """Its greedy output differed from the baseline's in an engine where that counts
    (`lossless_binding` is False only where the engine's multi-token numerics differ)."""
    return figures.get("lossless") is False and figures.get("lossless_binding") is not False


def shown_faster(figures: dict[str, Any]) -> bool:
    """Validated faster than the AR baseline: lossless (where checked) and the whole
    interval above 1.0."""
    ci = Interval.of(figures)
    return not _refused_as_lossy(figures) and ci is not None and ci.above(1.0)


def judge(finalists: list[dict[str, Any]], min_gain: float = DEFAULT_MIN_GAIN
          ) -> tuple[str, int | None, str]:
    """(decision, winning trial or None, a one-line reason) from measured finalists:
    SPECULATE, DO_NOT_SPECULATE or UNDECIDED (the module docstring says when)."""
    def figure(f: dict[str, Any]) -> str:
        ci = Interval.of(f)
        return (f"trial {f['trial']} ({f['label']}) {f['speedup']:.3f}x "
                f"{ci if ci is not None else '(no interval)'}")

    faster = [f for f in finalists if shown_faster(f)]
    if faster:
        best = max(faster, key=lambda f: (f["speedup"], -f["trial"]))
        return SPECULATE, best["trial"], f"{figure(best)}: the highest validated speedup " \
                                         "whose interval lies above 1.0"
    if not finalists:
        return DO_NOT_SPECULATE, None, "no speculative config completed in the search"
    lossy = [f for f in finalists if _refused_as_lossy(f)]
    measured = [f for f in finalists if isinstance(f.get("speedup"), (int, float))]
    if not measured:
        return DO_NOT_SPECULATE, None, "no finalist decoded a token on the validation prompts"
    best = max(measured, key=lambda f: f["speedup"])
    # A lossy finalist may well be faster: it is refused for its output, not its speed.
    which = "lossless finalist's" if lossy else "finalist's"
    not_lossless = ""
    if lossy:
        not_lossless = (f"; not lossless (the speculative output differed from the same "
                        f"engine's greedy output): trial "
                        f"{', '.join(str(f['trial']) for f in lossy)}")
    worth = 1.0 + min_gain
    open_ = [f for f in measured if not _refused_as_lossy(f) and not _below(f, worth)]
    if open_:
        leader = max(open_, key=lambda f: (f["speedup"], -f["trial"]))
        return UNDECIDED, None, (
            f"likely {figure(leader)}, not shown: its 90% interval reaches below 1.0 and "
            f"above {worth:.2f} (a gain worth having); rerun with more "
            f"--validation-prompts (or a larger --validation-pool){not_lossless}")
    reason = (f"no {which} 90% interval lies above 1.0, and none reaches {worth:.2f} "
              f"(--min-gain {min_gain:g}) (best {figure(best)}){not_lossless}")
    return DO_NOT_SPECULATE, None, reason


def _below(figures: dict[str, Any], worth: float) -> bool:
    """Its whole interval lies below `worth` (a finalist without one, measured on one
    prompt, never does: one prompt decides nothing)."""
    ci = Interval.of(figures)
    return ci is not None and ci.below(worth)


def measure_finalists(ctx: EvalContext, finalists: list[Finalist], prompts: list[Prompt],
                      repeats: int, complete_trials: int, source: str,
                      on_prompt: Callable[[int, int], None] | None = None,
                      min_gain: float = DEFAULT_MIN_GAIN, pool: list[Prompt] | None = None,
                      predicted: dict[str, list[paired.PromptPair]] | None = None,
                      budget_s: float | None = None, resume: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
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

    `complete_trials` is how many trials the study had complete (the record is current
    while that holds); `source` says where the prompts came from, for the record.
    `on_prompt(done, total)` follows each prompt and repeat. `min_gain`: the gain below
    which speculating is not worth having (`judge`).
    """
    from autotune.decoding.config import config_from_mapping

    pool = list(pool) if pool is not None else list(prompts)
    setup = _RaceSetup(
        ctx=ctx, prompts=prompts, repeats=repeats, min_gain=min_gain, budget_s=budget_s,
        configs={f.arm: config_from_mapping(f.params).validate() for f in finalists},
        groups={f.arm: f.engine for f in finalists},
        predicted={arm: pairs for arm, pairs in (predicted or {}).items()
                   if len(pool) > len(prompts)},
        on_prompt=on_prompt)
    setup = dataclasses.replace(setup, twins=_twins(setup.configs, setup.predicted))
    race = _RaceState.resumed(finalists, len(prompts), resume or {})
    _run_race(setup, race)
    record = _record(setup, race, pool, complete_trials, source)
    _judge_record(record, setup, race, finalists)
    return record


@dataclass(frozen=True)
class _RaceSetup:
    """What a race is run with and does not change while it runs."""

    ctx: EvalContext
    prompts: list[Prompt]          # the measured sample, in order
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


@dataclass
class _RaceState:
    """Where a race stands after its latest look: what a resumed race starts from and
    what the record is written from (kept in one place rather than a dozen locals)."""

    rows: dict[str, list[list[Any]]]   # per arm, every measured run (`row_of`)
    looks: list[dict[str, Any]]        # each look: prompts, level, active, dropped
    active: list[str]                  # arms still racing
    measured: int                      # prompts of the sample measured so far
    alpha_spent: float
    # What each finalist showed at its last look (a dropped one's stays as it was).
    shown: dict[str, dict[str, Any]]
    facts: dict[str, Any]              # where the runs were measured, what lossless means
    stopped: str | None                # None while it runs, else racing's reason
    began: float                       # time.monotonic() when this run took it up
    looks_this_run: int = 0            # what the time budget counts
    # Earlier looks' outputs, for a warm history (methods with cross-request state).
    responses: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def resumed(cls, finalists: list[Finalist], sample: int, earlier: dict[str, Any]
                ) -> _RaceState:
        """A fresh race (`earlier` empty), or the one `earlier`'s record stopped."""
        race = earlier.get("race") or {}
        looks: list[dict[str, Any]] = list(race.get("looks", []))
        dropped = {arm for look in looks for arm in look.get("dropped", [])}
        measured = int(race.get("measured", 0))
        return cls(
            rows={f.arm: list((earlier.get("rows") or {}).get(f.arm, [])) for f in finalists},
            looks=looks, active=[f.arm for f in finalists if f.arm not in dropped],
            measured=measured, alpha_spent=float(race.get("alpha_spent", 0.0)),
            shown={_entry_arm(entry): {k: v for k, v in entry.items() if k not in _IDENTITY}
                   for entry in _all_entries(earlier)},
            facts={k: earlier[k] for k in ("measured_by", "measured_by_label",
                                           "token_exact", "lossless_tier") if k in earlier},
            stopped="sample" if measured >= sample else None, began=time.monotonic())


def _entry_arm(entry: dict[str, Any]) -> str:
    """The race arm of a record's finalist entry (`Finalist.arm`)."""
    engine = entry.get("engine", OWN_ENGINE)
    own = f"trial{entry['trial']}"
    return own if engine == OWN_ENGINE else f"{engine}.{own}"


def _all_entries(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Every finalist entry of `record`: autotune's own, then each engine's."""
    engines = record.get("engine_finalists") or {}
    return [*record.get("finalists", []),
            *(entry for entries in engines.values() for entry in entries)]


def record_arms(record: dict[str, Any]) -> list[str]:
    """The race arms of a record's finalists, autotune's own first (`Finalist.arm`)."""
    return [_entry_arm(entry) for entry in _all_entries(record)]


def _run_race(setup: _RaceSetup, race: _RaceState) -> None:
    """Look after look until the race is decided, its sample measured, or a look would
    pass the time budget."""
    from autotune.search import racing

    for size in racing.look_sizes(len(setup.prompts)):
        if size <= race.measured or race.stopped is not None or not race.active:
            continue
        if racing.overruns(time.monotonic() - race.began, race.looks_this_run,
                           setup.budget_s):
            race.stopped = "budget"
            break
        _measure_look(setup, race, size)
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
    from autotune.measure.measurement import lossless_tier, measure_arms
    from autotune.search.finalist_figures import row_of

    ctx, prompts, offset = setup.ctx, setup.prompts, race.measured
    total = len(prompts) * setup.repeats

    def each(index: int, repeat: int, runs: Any, so_far: Any) -> None:
        if setup.on_prompt is not None:
            setup.on_prompt(repeat * len(prompts) + offset + index + 1, total)

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
        race.facts = {"measured_by": measurement.measured_by,
                      "measured_by_label": measurement.measured_by_label,
                      "token_exact": measurement.token_exact,
                      # What `lossless` means here: exact (float32) or near-tie (bf16).
                      "lossless_tier": lossless_tier(measurement.runs)}
    race.measured, race.looks_this_run = size, race.looks_this_run + 1


def _take_look(setup: _RaceSetup, race: _RaceState, size: int) -> None:
    """Spend this look's error, refresh the active arms' figures, and drop or stop as
    `racing.next_look` says."""
    from autotune.search import racing
    from autotune.search.finalist_figures import figures

    n = len(setup.prompts)
    level = racing.look_level(setup.alpha, race.alpha_spent, size, n)
    race.alpha_spent += 1.0 - level
    token_exact = bool(race.facts.get("token_exact", True))
    for arm in race.active:
        race.shown[arm] = figures(race.rows[arm], setup.predicted.get(arm), setup.repeats,
                                  level, setup.configs[arm].greedy, token_exact)
    look = racing.next_look_by_group(
        {arm: _interval_or_none(race.shown[arm]) for arm in race.active},
        groups=setup.groups, last=size >= n, min_gain=setup.min_gain)
    race.looks.append({"prompts": size, "level": level, "active": list(race.active),
                       "dropped": look.dropped})
    race.active = look.keep
    race.stopped = look.stop


def _record(setup: _RaceSetup, race: _RaceState, pool: list[Prompt], complete_trials: int,
            source: str) -> dict[str, Any]:
    """The race's record, its finalists and decision still to be filled in."""
    from autotune.measure import ppi
    from autotune.search import racing
    from autotune.workloads.prompts import workload_digest

    prompts = setup.prompts
    measured_ids = list(dict.fromkeys(row[0] for arm_rows in race.rows.values()
                                      for row in arm_rows))
    by_id = {p.prompt_id: p for p in prompts}
    measured_prompts = [by_id[i] for i in measured_ids if i in by_id]
    return {
        "statistic": STATISTIC, "level": paired.INTERVAL_LEVEL, "source": source,
        "estimator": ppi.ESTIMATOR if setup.predicted else "measured",
        "pool_prompts": len(pool), "pool_sha256": workload_digest(pool),
        "pool_categories": _counts(p.category for p in pool),
        "prompts": len(measured_prompts), "prompt_ids": measured_ids,
        "categories": _counts(p.category for p in measured_prompts),
        "workload_sha256": workload_digest(measured_prompts),
        "planned_prompts": len(prompts), "sample_sha256": workload_digest(prompts),
        "repeats": setup.repeats, "max_new_tokens": setup.ctx.max_new_tokens,
        "complete_trials": complete_trials, "min_gain": setup.min_gain,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "race": {"stopped": race.stopped or "sample", "measured": race.measured,
                 "looks": race.looks, "alpha_spent": race.alpha_spent,
                 "budget_s": setup.budget_s, "spending": racing.SPENDING,
                 **({"twins": setup.twins} if setup.twins else {})},
        "rows": race.rows, **race.facts, "finalists": [],
    }


def _judge_record(record: dict[str, Any], setup: _RaceSetup, race: _RaceState,
                  finalists: list[Finalist]) -> None:
    """Fill `record` in: every finalist's last figures, the baseline's latency, and the
    decision of autotune's own finalists and of each engine's (`judge`, each group on its
    own), saying so when the budget stopped an undecided race."""
    baseline_ms = None
    groups: dict[str, list[dict[str, Any]]] = {}
    for f in finalists:
        own = race.shown.get(f.arm)
        if own is None:
            continue
        baseline_ms = own.get("baseline_latency_ms_per_token") or baseline_ms
        dropped_at = next((look["prompts"] for look in race.looks
                           if f.arm in look["dropped"]), None)
        entry = {**asdict(f), **own, "dropped_after": dropped_at}
        if f.engine == OWN_ENGINE:
            entry.pop("engine")       # autotune's own entries read as they always did
        groups.setdefault(f.engine, []).append(entry)
    record["baseline"] = {"latency_ms_per_token": baseline_ms}
    record["finalists"] = groups.pop(OWN_ENGINE, [])

    def judged(entries: list[dict[str, Any]]) -> dict[str, Any]:
        decision, winner, reason = judge(entries, setup.min_gain)
        if decision == UNDECIDED and record["race"]["stopped"] == "budget":
            reason += (f"; the --validation-budget of {setup.budget_s:g} s ran out after "
                       f"{race.measured} of {len(setup.prompts)} prompts: rerun with a "
                       "larger one to resume where it stopped")
        return {"decision": decision, "winner": winner, "reason": reason}

    record.update(judged(record["finalists"]))
    engines = sorted({f.engine for f in finalists} - {OWN_ENGINE})
    if engines:
        record["engine_finalists"] = {name: groups.get(name, []) for name in engines}
        record["engines"] = {name: judged(groups.get(name, [])) for name in engines}


def _interval_or_none(figures: dict[str, Any]) -> tuple[float, float] | None:
    ci = Interval.of(figures)
    return (ci.low, ci.high) if ci is not None else None


def resumable(record: dict[str, Any]) -> bool:
    """A race its time budget stopped before it was decided: a rerun resumes it."""
    race = record.get("race") or {}
    return race.get("stopped") == "budget" and record.get("decision") == UNDECIDED


def rejudged(record: dict[str, Any], min_gain: float) -> dict[str, Any]:
    """`record` judged again under another `min_gain` (the figures stay as measured),
    each engine's part too."""
    decision, winner, reason = judge(record.get("finalists", []), min_gain)
    out = {**record, "min_gain": min_gain, "decision": decision, "winner": winner,
           "reason": reason}
    if record.get("engines"):
        out["engines"] = {}
        for name, entries in (record.get("engine_finalists") or {}).items():
            decision, winner, reason = judge(entries, min_gain)
            out["engines"][name] = {"decision": decision, "winner": winner, "reason": reason}
    return out


def engine_names(record: dict[str, Any] | None) -> list[str]:
    """The engines `record` answers for besides autotune's own (none: a single-engine
    search's record)."""
    return sorted((record or {}).get("engines") or {})


def engine_record(record: dict[str, Any], engine: str) -> dict[str, Any] | None:
    """`engine`'s part of `record` in the single-engine shape (its finalists under
    `finalists`, its decision, winner and reason at the top, the race's shared facts as
    they are), or None when `record` has no answer for it. `OWN_ENGINE`: the record's
    own part (without the engines')."""
    if engine == OWN_ENGINE:
        return {k: v for k, v in record.items() if k not in ("engines", "engine_finalists")}
    judged = (record.get("engines") or {}).get(engine)
    if not isinstance(judged, dict):
        return None
    shared = {k: v for k, v in record.items() if k not in ("engines", "engine_finalists")}
    return {**shared, **judged,
            "finalists": list((record.get("engine_finalists") or {}).get(engine, []))}


def measured_in(record: dict[str, Any]) -> dict[str, str]:
    """Display facts of where a record's figures were measured: `measured in` (the
    backend's label, "the engine itself" for an engine backend) and, per finalist whose
    speculative output differed from the same engine's greedy output on some prompts,
    which prompts (`not lossless`). Empty for a record without them."""
    facts: dict[str, str] = {}
    label, who = record.get("measured_by_label"), record.get("measured_by")
    if label:
        facts["measured in"] = (f"{label}: the engine itself, its own decoding without "
                                "speculation as the baseline" if who not in (None, "autotune")
                                else str(label))
    lossy = [f for f in record.get("finalists") or []
             if isinstance(f, dict) and f.get("lossless") is False]
    if lossy:
        facts["not lossless"] = "; ".join(
            f"trial {f.get('trial')}: output differed from greedy on "
            f"{len(f.get('mismatched_prompts') or [])} of {record.get('prompts')} prompts "
            f"({', '.join(map(str, (f.get('mismatched_prompts') or [])[:6]))}"
            f"{', ...' if len(f.get('mismatched_prompts') or []) > 6 else ''})" for f in lossy)
        if any(f.get("lossless_binding") is False for f in lossy):
            facts["not lossless"] += (
                f". {label or 'This engine'}'s multi-token passes break near-ties unlike "
                "its one-token passes, so its speculative output may differ from its own "
                "greedy output with no drafting fault: reported, not held against a config")
    tied = [f for f in record.get("finalists") or []
            if isinstance(f, dict) and f.get("near_tie_prompts")]
    if tied:
        facts["near-ties"] = "; ".join(
            f"trial {f.get('trial')}: {len(f['near_tie_prompts'])} of "
            f"{record.get('prompts')} prompts" for f in tied) + (
            " differ from greedy AR only at a near-tie the dtype's rounding explains "
            f"(lossless tier: {record.get('lossless_tier') or 'near-tie'}; counted, not "
            "held against a config)")
    return facts


def _counts(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def current_record(study: optuna.Study) -> dict[str, Any] | None:
    """The study's validation record while it still judges the study's complete trials
    (a resumed search that completed more makes it stale: None)."""
    record = study.user_attrs.get(VALIDATION_ATTR)
    if not isinstance(record, dict):
        return None
    if record.get("complete_trials") != len(ranking.complete(study)):
        return None
    return record


def finalist_view(record: dict[str, Any], trial: int | None) -> dict[str, Any]:
    """What a frozen config carries under `validation`: the record's shared facts, the
    figures of the finalist from `trial` (the AR baseline's for None: speedup 1 by
    definition) and every finalist's, as evidence."""
    shared = {k: record.get(k) for k in ("statistic", "level", "source", "prompts",
                                         "prompt_ids", "categories", "workload_sha256",
                                         "repeats", "max_new_tokens", "decision", "reason",
                                         "winner", "measured_by", "measured_by_label")}
    if record.get("lossless_tier"):            # records before the near-tie tier have none
        shared["lossless_tier"] = record["lossless_tier"]
    # Records before prediction-powered validation have no pool, nor a race.
    shared.update({k: record[k] for k in ("estimator", "pool_prompts", "pool_sha256",
                                          "pool_categories", "planned_prompts", "race")
                   if k in record})
    if isinstance(record.get("min_gain"), (int, float)):     # records before v4 have none
        shared["min_gain"] = record["min_gain"]
    own = next((f for f in record.get("finalists", []) if f["trial"] == trial), None)
    figures: dict[str, Any]
    if own is not None:
        figures = {k: own[k] for k in (*_KEPT, CI_KEY, *_POOLED) if k in own}
    else:
        baseline_ms = (record.get("baseline") or {}).get("latency_ms_per_token")
        figures = {"speedup": 1.0, CI_KEY: None, "latency_ms_per_token": baseline_ms,
                   "baseline_latency_ms_per_token": baseline_ms, "lossless": True}
    evidence = [{k: f.get(k) for k in ("trial", "label", "role", "preset", "search",
                                       "speedup", CI_KEY, "mean_accepted_tokens", "lossless",
                                       "divergences", "by_category", *_POOLED)
                 if k in f or k not in (*_POOLED, "divergences")}
                for f in record.get("finalists", [])]
    return {**shared, **figures, "finalists": evidence}


@dataclass(frozen=True)
class Answer:
    """What a run recommends. `trial` is the config's trial (the AR baseline's trial, or
    None when there is none, for "do not speculate"); `record` the validation behind it
    (None: not validated, the search's own best by `autotune.search.ranking`)."""

    trial: FrozenTrial | None
    record: dict[str, Any] | None

    @property
    def validated(self) -> bool:
        return self.record is not None

    @property
    def speculate(self) -> bool:
        return self.record is None or self.record.get("decision") == SPECULATE


def answer(study: optuna.Study, objective: ranking.Directions) -> Answer:
    """The one rule behind `best.json`, the report's headline and the exports: the
    validated winner when the study has a current validation record, "do not speculate"
    (the AR baseline) when that record says so, else the search's best."""
    record = current_record(study)
    if record is None:
        return Answer(ranking.best_trial(study, objective), None)
    trials = {t.number: t for t in ranking.complete(study)}
    if record.get("decision") == SPECULATE and record.get("winner") in trials:
        return Answer(trials[record["winner"]], record)
    baseline = next((t for t in trials.values() if is_baseline(t)), None)
    return Answer(baseline, record)
