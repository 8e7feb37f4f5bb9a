"""Which answer of a best.json a command serving one engine acts on.

A `--target all` search leaves, beside its own top-level answer (autotune's decoder under
its own rules), each engine's own answer under v5's `engines`. `export --format X` and
`measure --in X` serve engine X, so they act on X's answer when there is one, and say so
on stderr; a document without one (v1 to v4, a `--target X` run, dv) is acted on as it
always was.
"""

from __future__ import annotations

import sys

from autotune.schema.label import describe
from autotune.frozen.record import FrozenConfig


def answer_for(record: FrozenConfig, engine: str) -> tuple[FrozenConfig, str | None]:
    """(the answer to act on for `engine`, where it came from): `engine`'s own answer and
    `"engines.<engine>"`, or `record` itself and None when it holds no answer for it."""
    answer = record.engine_answer(engine)
    if answer is None:
        return record, None
    return answer, f"engines.{engine}"


def note_engine_answer(verb: str, engine: str, path: str, answer: FrozenConfig) -> None:
    """The stderr line saying the engine's own answer is used, not the top level's."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    print(f"autotune: {verb} {engine}'s own answer from {name}'s engines "
          f"({describe(answer.config.to_dict())}, {_figure(answer)}); the top level is "
          "autotune's own decoder's", file=sys.stderr, flush=True)


def not_speculating(answer: FrozenConfig) -> str | None:
    """Why `answer` recommends no speculation (validated "do not speculate", or
    "undecided"), in the export's refusal words; None when it speculates. Its params are
    then the AR baseline's (method none): measuring or exporting them says nothing."""
    from autotune.runs.exports_folder import refusal_reason
    from autotune.search.finalists import DO_NOT_SPECULATE, UNDECIDED

    validation = answer.validation
    if validation is not None and validation.decision in (DO_NOT_SPECULATE, UNDECIDED):
        return refusal_reason(answer)
    return None


def _figure(answer: FrozenConfig) -> str:
    """`validated 1.234x [1.100, 1.350], measured in hf itself` (or `predicted by
    autotune's decoder: ...`), or the search's own figure when not validated."""
    validation = answer.validation
    if validation is not None and isinstance(validation.speedup, (int, float)):
        # Where the figure was measured, or why it is autotune's decoder's prediction.
        suspect = ", suspect: faster than its τ allows" if validation.suspect else ""
        return (f"validated {validation.speedup_text()}, "
                f"{validation.figure_basis().text()}{suspect}")
    speedup = answer.metrics.speedup if answer.metrics is not None else None
    if isinstance(speedup, (int, float)):
        return f"{speedup:.3f}x in the search, not validated"
    return "no measured speedup"
