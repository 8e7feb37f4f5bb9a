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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from autotune.backends import Backend
from autotune.search.finalists import (OWN_ENGINE, Finalist, measure_finalists,
                                       resumable)
from autotune.search.objectives import EvalContext
from autotune.search.validation_record import FinalistEntry, ValidationRecord
from autotune.workloads.prompts import Prompt, workload_digest

__all__ = ["EngineRaceSetup", "race_in_engine", "raced_finalists", "stale_races"]


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
