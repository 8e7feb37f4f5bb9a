"""The built-in drafting methods, one package each.

A method's package holds everything that is its own:
- `__init__.py`: its `SPEC` (a `MethodSpec`: label, colour, what it needs, its documented
  presets, its knob summary), naming the rest by "module:attribute" strings. Imports no
  torch: the registry reads every built-in's spec for `autotune --help` and `validate`.
- `drafter.py`: its `Drafter` (autotune/decoding/drafters/base.py's interface).
- `agreement.py`: its teacher-forced agreement scorer (the driver is
  autotune/measure/agreement.py).
- `replay.py`: its replay source (a prompt's track, what is exact) and its draft cost
  (drafting time per replayed round from the measured parts: a `DraftCost`).

The registry (`autotune.schema.methods`) lists this folder's subpackages: a new
built-in method is one more package here, plus its space YAML in
autotune/space/presets/ and its tests. `python -m autotune.methods.table` prints the
README's table of methods. Nothing in autotune imports these packages by name but the
registry; the import layers put them above the replay, measure and decoding machinery
they build on.
"""
