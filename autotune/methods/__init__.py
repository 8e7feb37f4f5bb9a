"""The built-in drafting methods, one package each, and their list (`BUILTINS`).

A method's package holds everything that is its own:
- `__init__.py`: its `SPEC` (a `MethodSpec`: label, colour, what it needs, its documented
  presets, its knob summary) and the loaders of its code (`_drafter`, `_scorer`, ...:
  each imports what it returns when first called). Imports no torch: the registry holds
  every built-in's spec for `autotune --help` and `validate`.
- `checks.py`: its rules on a config's values beyond their bounds (its keys are
  `DecodeConfig` fields, `own_knob` in autotune/schema/config.py).
- `drafter.py`: its `Drafter` (autotune/decoding/drafters/base.py's interface).
- `agreement.py`: its teacher-forced agreement scorer (the driver is
  autotune/measure/agreement.py).
- `replay.py`: its replay source (a prompt's track, what is exact) and its draft cost
  (drafting time per replayed round from the measured parts: a `DraftCost`).

`BUILTINS` below is the one list of the built-in methods, in their documented order (the
frozen schema's enum, error messages, legends, the README's table: the baseline first);
importing this package registers them (`autotune.schema.methods.register_builtins`), and
the package root (`autotune/__init__.py`) imports it, so that the registry is filled
before any entry point reads it. A new built-in method is one more package here, one
line in `BUILTINS`, its space YAML in autotune/space/presets/ and its tests.
`python -m autotune.methods.table` prints the README's table of methods.
"""

from __future__ import annotations

from autotune.methods import (
    draft_model,
    eagle,
    layer_skip,
    llama_draft,
    llama_ngram,
    medusa,
    ngram,
    none,
    sa,
    sglang_ngram,
    sorted_exit,
    suffix,
)
from autotune.schema.methods import MethodSpec, register_builtins

__all__ = ["BUILTINS"]

BUILTINS: tuple[MethodSpec, ...] = (
    none.SPEC,
    draft_model.SPEC,
    layer_skip.SPEC,
    sorted_exit.SPEC,
    ngram.SPEC,
    suffix.SPEC,
    sa.SPEC,
    llama_ngram.SPEC,
    llama_draft.SPEC,
    sglang_ngram.SPEC,
    eagle.SPEC,
    medusa.SPEC,
)

register_builtins(BUILTINS)
