"""`--target all`: each engine that runs on this machine answers from a race in itself.

The main race (`finalists.measure_finalists`) races every engine's finalists in our
decoder under that engine's drafting rules: exact in what the engine drafts and accepts
(the replay and the oracle tests), a prediction in what a pass costs there. On the same
2-core CPU vLLM's CPU build decodes at about twice our decoder's cost per token and
llama.cpp at a fifth, so the same acceptance pays differently (issue 50: vLLM's own
n-gram example measured 1.119x in vLLM where our decoder said 1.046x). Where an
answered engine's backend runs here, its finalists race again in the engine itself,
against the engine's own decoding without speculation, on the same held-out sample and
by the same rules (looks, alpha-spending, min-gain). That race's record
(`ValidationRecord.engine_races`) is the engine's answer, its interval and its export;
the decoder's part stays in the record as the prediction shown beside it.

An answered engine not raced in itself keeps the decoder's part as its answer, and the
record says why (`ValidationRecord.engine_bases`, `AnswerBasis`): `unraced` for those no
race was planned for (not installed, a GPU engine, an input it cannot run, races off),
`predicted_because` for a race skipped by the budget or failed; `race_filed` files a
finished race, whose answer is then measured in the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import optuna

from autotune.backends import BACKEND_RECORDS, Backend, input_error, unavailable
from autotune.common.errors import AutotuneError
from autotune.frozen.record import AnswerBasis, Number, PredictedWhy
from autotune.schema.engines import ENGINE_RECORDS, engine_rules
from autotune.search.finalists import (OWN_ENGINE, Finalist, current_record,
                                       measure_finalists, resumable, store_record)
from autotune.search.objectives import EvalContext
from autotune.records.validation import FinalistEntry, ValidationRecord
from autotune.workloads.prompts import Prompt, workload_digest

__all__ = ["EngineRaceSetup", "note_unraced", "predicted_because", "race_filed",
           "race_in_engine", "raced_finalists", "stale_races", "unraced", "why_unraced"]


@dataclasses.dataclass(frozen=True)
class EngineRaceSetup:
    """What every engine's race shares: the held-out sample and pool of the main race,
    its passes and its decision rule."""

    sample: list[Prompt]
    pool: list[Prompt]
    repeats: int
    min_gain: float
    source: str
    on_prompt: Callable[[int, int], None] | None = None


def raced_finalists(entries: Sequence[FinalistEntry]) -> list[Finalist]:
    """The engine's finalists of the main race, as its own race's (single-engine shape:
    each competes for the race's one answer). Those the decoder dropped race too: a
    pass's cost in the engine is what the decoder could not tell."""
    return [Finalist(trial=e.trial, label=e.label, role=e.role, preset=e.preset,
                     params=dict(e.params), search=dict(e.search), engine=OWN_ENGINE)
            for e in entries]


def stale_races(record: ValidationRecord, engines: Sequence[str],
                sample: Sequence[Prompt]) -> list[str]:
    """The engines of `engines` the record answers for whose race in the engine is
    missing, was run on another sample or other finalists, or was stopped by its budget
    undecided (a rerun resumes it)."""
    stale = []
    for engine in engines:
        if engine not in record.engines:
            continue
        race = record.engine_races.get(engine)
        finalists = [f.arm for f in raced_finalists(record.engine_finalists.get(engine, []))]
        if (race is None or race.sample_sha256 != workload_digest(list(sample))
                or [entry.arm for entry in race.finalists] != finalists
                or resumable(race)):
            stale.append(engine)
    return stale


def race_in_engine(ctx: EvalContext, record: ValidationRecord, engine: str,
                   setup: EngineRaceSetup, backend: Backend, seconds: float | None
                   ) -> ValidationRecord:
    """`engine`'s finalists of `record` raced again in the engine itself, through
    `backend`, in `seconds` (None: no limit): that race's record (single-engine shape,
    measured by the engine), resumed where a race its budget stopped left off. The
    caller files it under `record.engine_races` and closes the backend."""
    chosen = raced_finalists(record.engine_finalists.get(engine, []))
    earlier = record.engine_races.get(engine)
    resume = (earlier if earlier is not None and resumable(earlier)
              and earlier.sample_sha256 == workload_digest(setup.sample)
              and [e.arm for e in earlier.finalists] == [f.arm for f in chosen] else None)
    return measure_finalists(
        dataclasses.replace(ctx, final_backend=backend), chosen, setup.sample,
        setup.repeats, record.complete_trials or 0, setup.source,
        on_prompt=setup.on_prompt, min_gain=setup.min_gain, pool=setup.pool,
        budget_s=seconds, resume=resume)


# ---- what each engine's answer is: measured in itself, or predicted and why ----------

def predicted_because(record: ValidationRecord, engine: str, why: PredictedWhy,
                      detail: str | None = None, needed_s: float | None = None,
                      had_s: float | None = None) -> ValidationRecord:
    """`record` with `engine`'s answer on record as autotune's decoder's prediction, and
    why: `detail` is the one line the engine or the failure gave; for a race the budget
    skipped, the seconds it `needed_s` (its engines' start-up) and `had_s`."""
    figures: dict[str, Number | str] = {}
    if detail:
        figures["detail"] = detail
    if needed_s is not None:
        figures["needed_s"] = round(needed_s, 1)
    if had_s is not None:
        figures["had_s"] = round(had_s, 1)
    basis = AnswerBasis.model_validate({"kind": "predicted", "measured_in": "autotune",
                                        "why": why, **figures})
    return record.model_copy(update={"engine_bases": {**record.engine_bases,
                                                      engine: basis}})


def race_filed(record: ValidationRecord, engine: str, raced: ValidationRecord
               ) -> ValidationRecord:
    """`record` with `raced`, `engine`'s race in itself, filed under `engine_races`: its
    answer, measured in the engine (a reason an earlier run left for a prediction is
    dropped)."""
    bases = {name: basis for name, basis in record.engine_bases.items() if name != engine}
    return record.model_copy(update={"engine_races": {**record.engine_races, engine: raced},
                                     "engine_bases": bases})


def why_unraced(engine: str, model: str, draft: str | None, device: str
                ) -> tuple[PredictedWhy, str | None]:
    """Why no race in itself was planned for `engine` on this machine (`device`: the
    kind the run measured on, "cpu" or "cuda"): a GPU engine without a build that runs
    here, not installed (the engine's own one line), an input it cannot run, else races
    in the engines themselves were turned off."""
    record = BACKEND_RECORDS.get(engine)
    rules = engine_rules(engine).label
    engine_record = ENGINE_RECORDS.get(engine)
    if (engine_record is not None and engine_record.serves_on_gpu
            and (record is None or record.opener is None
                 or (device == "cpu" and not record.on_cpu))):
        return "gpu_engine", f"{rules} serves on a GPU; this run measured on a {device}"
    if record is None or record.opener is None:
        return "not_raced", f"no backend measures in {rules}"
    try:
        wrong_input = input_error(engine, model, draft)
        missing = unavailable(engine, model, draft)
    except AutotuneError as exc:          # a model the engine's check cannot find
        return "unsupported_input", str(exc)
    # `unavailable` says what is missing first, then what in the input it cannot run.
    if missing is not None and missing != wrong_input:
        return "not_installed", missing
    if wrong_input is not None:
        return "unsupported_input", wrong_input
    return "races_off", "AUTOTUNE_ENGINE_RACES=0"


def unraced(record: ValidationRecord, raced: Sequence[str], model: str,
            draft: str | None, device: str) -> ValidationRecord:
    """`record` with why, for each engine it answers for that no race in itself was
    planned for (not in `raced`) and that no earlier run raced: `why_unraced`."""
    for engine in record.engine_names():
        if engine in raced or engine in record.engine_races:
            continue
        record = predicted_because(record, engine, *why_unraced(engine, model, draft, device))
    return record


def note_unraced(study: optuna.Study, raced: Sequence[str], model: str,
                 draft: str | None, device: str) -> None:
    """`unraced` on the study's current validation record, stored (nothing without
    one, or where nothing changed)."""
    record = current_record(study)
    if record is None:
        return
    noted = unraced(record, raced, model, draft, device)
    if noted.engine_bases != record.engine_bases:
        store_record(study, noted)
