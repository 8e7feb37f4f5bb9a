"""The declared schema: what a decoding config is (its knobs, their types, bounds and
defaults), which methods and engines there are and what each engine's rules allow.

Torch-free, and below everything that runs a model: the decoder, the search, the report
and the exporters all read a config from here, and `autotune --help`, `validate`, the
report and the exporters import no model library (tests/test_schema_imports.py).
"""
