"""The run folder of a search: `run.json`, `trials.csv`, `best.json`, the top-trials table.

Everything here is rebuilt from the study storage, so the files are always consistent
with it, and each is replaced atomically after every trial (a kill never leaves half of
one).
"""

from __future__ import annotations

import math
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState
from pydantic import JsonValue

from autotune.common.files import write_atomically
from autotune.common.interval import Interval
from autotune.frozen.document import frozen_config
from autotune.frozen.record import (
    AnswerBasis,
    CategoryFigures,
    DecoderPrediction,
    FrozenConfig,
    FrozenContext,
    Metrics,
    ObjectiveRecord,
    ParetoPoint,
    ProvenanceRecord,
    ScheduleDocument,
    Validation,
    write_frozen,
)
from autotune.records.summary import MeasurementSummary
from autotune.schema.label import describe
from autotune.search.finalists import (
    DO_NOT_SPECULATE,
    OWN_ENGINE,
    SPECULATE,
    UNDECIDED,
    answer,
    current_record,
    engine_names,
    engine_record,
    shown_faster,
)
from autotune.records.ranking import best_trial, pareto_numbers, ranked
from autotune.search.schedule import current_schedule
from autotune.records.trial import TrialRecord
from autotune.records.validation import ValidationRecord

if TYPE_CHECKING:      # objectives imports the measuring code (torch); the files need none
    from autotune.search.objectives import Objective

__all__ = ["BEST_FILE", "RUN_FILE", "TRIALS_FILE", "best_config", "best_document", "best_trial",
           "describe", "engine_config", "ranked_configs", "ranked_documents", "top_table",
           "trials_frame", "validation_table", "write_run_files"]

RUN_FILE = "run.json"
TRIALS_FILE = "trials.csv"
BEST_FILE = "best.json"


def _flat(value: JsonValue) -> JsonValue:
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return value


def trials_frame(study: optuna.Study, objective: Objective) -> pd.DataFrame:
    """One row per trial: number, state, preset, duration, fidelity (measure or replay),
    values, the screen's prediction (`predicted.<metric>`, multi-fidelity), metrics,
    config, params, error. Columns that no trial has are left out.

    A pruned trial's `values` hold Optuna's last intermediate value: the figure over the
    prompts it ran before it was stopped, not a measurement of the config. It goes to
    `partial.<metric>` (with `partial.prompts_measured`, how many prompt runs it
    covers), and `value.<metric>` stays empty, so no reader takes it for a result."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        record = TrialRecord.of(t)
        row: dict[str, JsonValue] = {
            "number": t.number,
            "state": t.state.name,
            "preset": record.preset,
            "label": describe(record.config_json) if record.config_json is not None else None,
            "duration_s": t.duration.total_seconds() if t.duration is not None else None,
            "started": t.datetime_start.isoformat() if t.datetime_start else None,
            # Which tier the figures came from: measured (decoded, timed) or predicted by
            # replay (`--fidelity replay`); older runs were all measured.
            "fidelity": record.fidelity,
        }
        if record.screen is not None:       # multi-fidelity: what replay predicted for it
            row["screen.rank"] = record.screen.rank
            for key, value in (record.screen.predicted or {}).items():
                row[f"predicted.{key}"] = value
        pruned = t.state == TrialState.PRUNED
        for metric, value in zip(objective.metrics, t.values or []):
            row[f"{'partial' if pruned else 'value'}.{metric}"] = value
        if pruned and t.values and t.last_step is not None:
            row["partial.prompts_measured"] = t.last_step + 1     # steps count prompt runs
        stored = record.metrics.to_json() if record.metrics is not None else {}
        for key, value in stored.items():
            row[f"metrics.{key}"] = _flat(value)
        for key, value in (record.config_json or {}).items():
            row[f"config.{key}"] = _flat(value)
        for key, param in t.params.items():
            row[f"params.{key}"] = param
        row.update(error=record.error, infeasible=record.infeasible,
                   interrupted=True if record.interrupted else None,
                   retry_of=record.retry_of, worker=record.worker)
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.dropna(axis="columns", how="all") if not frame.empty else frame


def _trial_point(t: FrozenTrial, objective: Objective) -> ParetoPoint:
    """A trial as best.json names it (its Pareto front's entries, its provenance)."""
    record = TrialRecord.of(t)
    return ParetoPoint(
        trial=t.number, preset=record.preset, label=describe(record.config_json or {}),
        values=dict(zip(objective.metrics, t.values)), params=record.config_json or {},
        optuna_params=t.params,
        metrics=Metrics.model_validate(record.metrics.to_json() if record.metrics else {}))


def best_config(study: optuna.Study, objective: Objective,
                context: FrozenContext | Mapping[str, Any] | None = None) -> FrozenConfig | None:
    """What `best.json` holds: a FrozenConfig of what the run recommends by
    `autotune.records.answer.answer` (+ the Pareto front for several objectives). Validated:
    the winner, or for "do not speculate" the AR baseline, with the validation under
    `validation`; not (yet) validated: the search's best by `autotune.records.ranking`.
    `context`: the run's `FrozenContext` (or run.json's `frozen` entry): model, draft,
    hardware, workload and the run's provenance."""
    run = FrozenContext.of(context)
    chosen = answer(study, objective)
    front = None
    if objective.multi:
        front = [_trial_point(t, objective)
                 for t in sorted(study.best_trials, key=lambda t: t.number)]
    if chosen.trial is None:
        if chosen.record is None:
            return None
        # Do not speculate, and the study has no baseline trial to point at.
        config = frozen_config({}, context=run, pareto_front=front)
    else:
        config = _trial_config(chosen.trial, objective, run, front)
    parts: dict[str, Validation | ScheduleDocument | dict[str, FrozenConfig]] = {}
    if chosen.record is not None:
        parts["validation"] = Validation.model_validate(chosen.record.frozen_view(
            chosen.trial.number if chosen.speculate and chosen.trial else None))
    schedule = current_schedule(study, chosen.trial.number if chosen.trial else None)
    if schedule is not None:
        parts["schedule"] = ScheduleDocument.model_validate(schedule)
    if chosen.record is not None and engine_names(chosen.record):
        parts["engines"] = {name: engine_config(chosen.record, name, run)
                            for name in engine_names(chosen.record)}
    return config.model_copy(update=parts)


def best_document(study: optuna.Study, objective: Objective,
                  context: FrozenContext | Mapping[str, Any] | None = None
                  ) -> dict[str, Any] | None:
    """`best_config` as the JSON best.json holds (None: nothing to recommend yet)."""
    config = best_config(study, objective, context)
    return config.to_json() if config is not None else None


def engine_config(record: ValidationRecord, engine: str,
                  context: FrozenContext | None = None) -> FrozenConfig:
    """`engine`'s answer in a `--target all` run's record as a frozen config of its own:
    its winner's knobs (measured under its rules: `params.engine`), or for "do not
    speculate" / "undecided" no speculation, with its part of the validation. Its
    `metrics` are the engine screen's replay predictions for the config (it was never a
    measured trial; its measured figures are under `validation`)."""
    part = engine_record(record, engine)
    assert part is not None, engine                  # engine_names(record) names it
    # Raced in the engine itself: the decoder's race of the same finalists is the
    # prediction that race checked, kept beside its answer.
    predicted = record.predicted_for(engine) if engine in record.engine_races else None
    # Measured in the engine itself, or the decoder's prediction and why.
    basis = record.basis(engine)
    winner = part.winning_entry()
    if part.decision != SPECULATE or winner is None:
        config = frozen_config({}, context=context)
        validation = Validation.model_validate(part.frozen_view(None, basis))
    else:
        search = {k: v for k, v in winner.search.items() if v is not None}
        config = frozen_config(winner.params, metrics=search, context=context,
                               trial=ProvenanceRecord(preset=winner.preset, label=winner.label))
        validation = Validation.model_validate(part.frozen_view(winner.trial, basis))
    if predicted is not None:
        # The decoder's figure for the config the answer is read by (its winner, or
        # its best finalist where it does not speculate).
        shown = part.shown_entry()
        prediction = DecoderPrediction.model_validate(
            predicted.prediction_view(shown.trial if shown is not None else None))
        validation = validation.model_copy(update={"decoder_prediction": prediction})
    return config.model_copy(update={"validation": validation})


def _trial_config(t: FrozenTrial, objective: Objective, context: FrozenContext,
                  pareto_front: list[ParetoPoint] | None = None) -> FrozenConfig:
    """One trial as a FrozenConfig."""
    point = _trial_point(t, objective)
    metrics = point.metrics.to_json() if point.metrics is not None else {}
    return frozen_config(
        point.params or {}, metrics={k: v for k, v in metrics.items() if k != "config"},
        objective=ObjectiveRecord(name=objective.name, metrics=list(objective.metrics),
                                  directions=objective.directions, values=point.values),
        context=context, pareto_front=pareto_front,
        trial=ProvenanceRecord(trial=point.trial, preset=point.preset, label=point.label,
                               optuna_params=point.optuna_params))


def ranked_configs(study: optuna.Study, objective: Objective,
                   context: FrozenContext | Mapping[str, Any] | None = None
                   ) -> list[FrozenConfig]:
    """The exports' fallback configs, best first. Validated: the finalists shown faster
    than the AR baseline (`validation.shown_faster`), by validated speedup, each with its
    own validated figures; otherwise every complete trial in `autotune.records.ranking` order."""
    run = FrozenContext.of(context)
    record = current_record(study)
    if record is None:
        return [_trial_config(t, objective, run) for t in ranked(study, objective)]
    trials = {t.number: t for t in ranked(study, objective)}
    # A record from before --min-gain (None) asked for no gain beyond 1.0.
    gain = record.min_gain or 0.0
    faster = sorted((f for f in record.finalists
                     if shown_faster(f, gain) and f.trial in trials),
                    key=lambda f: (-(f.speedup or 0.0), f.trial))
    return [_trial_config(trials[f.trial], objective, run).model_copy(
                update={"validation": Validation.model_validate(record.frozen_view(f.trial))})
            for f in faster]


def ranked_documents(study: optuna.Study, objective: Objective,
                     context: FrozenContext | Mapping[str, Any] | None = None
                     ) -> list[dict[str, Any]]:
    """`ranked_configs` as JSON documents."""
    return [config.to_json() for config in ranked_configs(study, objective, context)]


def write_run_files(run_dir: Path, study: optuna.Study, objective: Objective,
                    context: FrozenContext | Mapping[str, Any] | None = None) -> None:
    """Rewrite `trials.csv` and `best.json` from the storage."""
    frame = trials_frame(study, objective)
    write_atomically(run_dir / TRIALS_FILE, frame.to_csv(index=False))
    config = best_config(study, objective, context)
    if config is not None:
        write_frozen(run_dir / BEST_FILE, config)


def _interval(ci: Interval | None) -> str:
    return str(ci) if ci is not None else "-"


def top_table(study: optuna.Study, objective: Objective, n: int = 10) -> str:
    """The top `n` complete trials in `autotune.records.ranking` order (the Pareto front first for
    several objectives), with the validated speedup and its interval for finalists."""
    order, front = ranked(study, objective), pareto_numbers(study, objective)
    if not order:
        return "no trial completed"
    record = current_record(study)
    validated = {f.trial: f for f in (record.finalists if record is not None else [])}
    rows = []
    for t in order[:n]:
        record = TrialRecord.of(t)
        figures = record.metrics or MeasurementSummary()
        row: dict[str, JsonValue] = {"trial": t.number,
                                     "config": describe(record.config_json or {})}
        for metric, value in zip(objective.metrics, t.values):
            row[metric] = value
        for key, head in (("speedup", "speedup"), ("baseline_latency_ms_per_token", "AR ms/tok"),
                          ("mean_accepted_tokens", "tau"), ("acceptance_rate", "accept")):
            if key not in objective.metrics and key in figures.model_fields_set:
                row[head] = figures.figure(key)
        if objective.multi:
            row["pareto"] = "*" if t.number in front else ""
        if validated:
            f = validated.get(t.number)
            speedup = f.speedup if f is not None else None
            row["held-out speedup"] = speedup if speedup is not None else math.nan
            row["90% interval"] = _interval(f.figures.interval if f is not None else None)
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.to_string(index=False, na_rep="-",
                           float_format=lambda v: f"{v:.3f}" if math.isfinite(v) else "-")


def validation_table(study: optuna.Study, objective: Objective,
                     engine: str = OWN_ENGINE) -> str:
    """The finalists' validation: one row per finalist (search figure beside the held-out
    one), the answer with its reason, and the answer's speedup per category; for an
    `engine` of a `--target all` run, that engine's finalists and answer."""
    record = current_record(study)
    predicted = None
    basis = None
    if record is not None and engine != OWN_ENGINE:
        if engine in record.engine_races:
            predicted = record.predicted_for(engine)
        basis = record.basis(engine)
        record = engine_record(record, engine)
    if record is None:
        return ("not validated: the figures above are the search's own (no held-out "
                "prompts, or the search was stopped before its finalists were measured)")
    pooled = record.pooled
    tied = any(g.figures.near_tie_prompts for g in record.finalists)
    rows = [{"trial": f.trial, "config": f.label, "role": f.role,
             "search speedup": f.search.get("speedup"),
             "held-out speedup": f.speedup, "90% interval": _interval(f.figures.interval),
             **({head: f.figures.pooled.get(key) for key, head in _POOLED_COLUMNS}
                if pooled else {}),
             "tau": f.figures.mean_accepted_tokens, "lossless": f.figures.lossless,
             # Prompts whose output left AR's at a near-tie (bf16 / fp16 rounding).
             **({"near-ties": len(f.figures.near_tie_prompts)} if tied else {}),
             "chosen": "*" if f.trial == record.winner else ""}
            for f in record.finalists]
    table = (pd.DataFrame(rows).to_string(index=False, na_rep="-",
                                          float_format=lambda v: f"{v:.3f}")
             if rows else "no finalist")
    lines = [_validation_head(record, predicted, basis), table, ""]
    if record.decision == DO_NOT_SPECULATE:
        lines.append(f"answer: do not speculate: {record.reason}")
        return "\n".join(lines)
    if record.decision == UNDECIDED:
        lines.append(f"answer: undecided: {record.reason}; nothing is recommended "
                     "or exported")
        return "\n".join(lines)
    lines.append(f"answer: {record.reason}")
    return "\n".join(lines + _category_lines(record))


def _validation_head(record: ValidationRecord, predicted: ValidationRecord | None,
                     basis: AnswerBasis | None) -> str:
    """The lines above the finalists' table: where and how they were measured, what
    our decoder predicted beside an engine's race, warnings, the race's course and the
    prediction-powered estimate."""
    head = (f"finalists on {record.prompts} held-out prompts x {record.repeats} "
            f"pass(es) ({record.source}); AR {_ms(record)} ms/token")
    if record.measured_by not in (None, "autotune"):
        # Raced in the engine itself (`search --target vllm` with vLLM here): say so,
        # so the figures are not read as our decoder's.
        head += f"\nmeasured in {record.measured_by_label or record.measured_by}"
        if predicted is not None:
            shown = record.shown_entry()
            view = DecoderPrediction.model_validate(
                predicted.prediction_view(shown.trial if shown is not None else None))
            head += (f"; autotune's decoder under its rules predicted "
                     f"{view.speedup_text()} ({str(view.decision).replace('_', ' ')}) for "
                     f"{view.label or 'its best finalist'}")
    if basis is not None and basis.predicted:
        # Not raced in the engine itself: the figures are our decoder's, and why.
        head += f"\n{basis.text()}"
    shown = record.shown_entry()
    for f in record.implausible():
        head += (f"\nwarning: trial {f.trial}'s speedup {f.speedup:.3f}x exceeds its τ "
                 f"{f.figures.mean_accepted_tokens:.3f}, more than a speculative decode can "
                 "gain: its baseline ran slower than its own decoding explains (other work "
                 "on the cores while it was timed?); rerun on a quiet machine"
                 + ("; the answer's figure is suspect"
                    if shown is not None and f.trial == shown.trial else ""))
    race = record.race
    if race is not None and race.looks:
        dropped = [f"trial {f.trial} after {f.dropped_after}"
                   for f in record.finalists if f.dropped_after]
        head += (f"\nraced in {len(race.looks)} look(s), stopped after "
                 f"{race.measured} of {record.planned_prompts} prompts "
                 f"({_STOPPED.get(race.stopped, race.stopped)})"
                 + (f"; dropped: {', '.join(dropped)}" if dropped else ""))
    if record.pooled:
        head += (f"\nprediction-powered (ppi++): the replay tier's predictions on all "
                 f"{record.pool_prompts} held-out prompts, corrected by the "
                 f"{record.prompts} measured (weight: how much the predictions count, "
                 "0 to 1)")
    return head


def _category_lines(record: ValidationRecord) -> list[str]:
    """The answer's speedup per category on the held-out prompts (none: no lines)."""
    winner = record.winning_entry()
    if winner is None or not winner.figures.by_category:
        return []
    categories = {c: CategoryFigures.model_validate(v)
                  for c, v in winner.figures.by_category.items()}
    per = [{"category": c, "prompts": v.prompts,
            **({"measured": v.measured_prompts} if record.pooled else {}),
            "speedup": v.speedup,
            "90% interval": _category_interval(v),
            "tau": v.mean_accepted_tokens}
           for c, v in categories.items()]
    return ["", "by category (the answer, held-out prompts):",
            pd.DataFrame(per).to_string(index=False, na_rep="-",
                                        float_format=lambda v: f"{v:.3f}")]


_STOPPED = {"decided": "decided", "sample": "the whole sample measured",
            "budget": "its time ran out: --validation-budget, or its share of --time-budget"}


# The pooled (ppi++) figures of a finalist, as the validation table heads them.
_POOLED_COLUMNS = (("measured_speedup", "measured alone"), ("predicted_speedup", "predicted"),
                   ("ppi_lambda", "weight"))


def _category_interval(figures: CategoryFigures) -> str:
    if figures.interval is not None:
        return _interval(figures.interval)
    if figures.estimator == "predicted":
        return "- (predicted only: too few measured)"
    return "- (1 prompt)"


def _ms(record: ValidationRecord) -> str:
    value = record.baseline_ms
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"
