"""The per-engine answers of a frozen config (v5's optional `engines`).

A search that answers for every engine (`autotune search --target all`) keeps, beside
its own top-level answer (autotune's decoder under its own rules: the ceiling), one
answer per engine under `engines`: each a complete frozen config of its own, measured
under that engine's drafting rules and judged among that engine's finalists. Consumers
that serve one engine (`autotune export --format X`, `autotune measure --in X`) read
that engine's answer with `engine_answer`; a document without `engines` (v1 to v4, or a
`--target X` run) is its own answer for every engine, as it always was.
"""

from __future__ import annotations

from typing import Any, Mapping

ENGINES_KEY = "engines"


def engine_answers(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Engine name -> that engine's answer (a frozen config); empty without any."""
    found = doc.get(ENGINES_KEY)
    if not isinstance(found, Mapping):
        return {}
    return {str(name): dict(answer) for name, answer in found.items()
            if isinstance(answer, Mapping)}


def engine_answer(doc: Mapping[str, Any], engine: str) -> dict[str, Any] | None:
    """`engine`'s own answer in `doc`, or None when `doc` holds no answer for it."""
    return engine_answers(doc).get(engine)
