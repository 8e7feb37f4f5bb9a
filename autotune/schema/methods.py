"""The method registry: one `MethodSpec` per drafting method, the one place that says which
methods there are.

Everything that used to restate a method's name reads it from here: config validation
(which methods exist, which need `--draft`, layer access or can draft a tree), the
decoder (which drafter to build), the agreement proxy (which scorer), the replay tier
(which source, which draft cost), the frozen schema's `method` enum, the exporters' and
the report's key lists, the report's labels and colours, the search's documented
presets, the README's methods table (`autotune.methods.table`).

Built-in methods: every package under `autotune/methods/` is one, found by listing that
folder (no list of names here). Its `__init__` defines `SPEC` (a `MethodSpec`, presets
and labels included) and names the rest of the method by "module:attribute" strings:
its drafter (`drafter.py`), agreement scorer (`agreement.py`), replay source and draft
cost (`replay.py`), imported on first use. A new built-in is one such package plus its
space YAML. A method from elsewhere (a plug-in, a test's toy drafter) calls
`register_method` with the objects themselves or their "module:attribute" names.

This module imports no torch: `autotune --help`, `validate`, the report and the
exporters read the registry without loading a model library (a method package's
`__init__` stays torch-free for that reason).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Iterator

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import did_you_mean
from autotune.schema.method_spec import (
    DRAFT_OR_TARGET_STACK,
    TARGET_STACK,
    DerivedKnob,
    Factory,
    KnobCheck,
    MethodKnob,
    MethodSpec,
    Preset,
)

__all__ = ["DRAFT_OR_TARGET_STACK", "TARGET_STACK", "BUILTIN_METHODS", "DerivedKnob",
           "Factory", "KnobCheck", "MethodKnob", "MethodSpec", "Preset", "all_methods",
           "find_method", "get_method", "method_names", "register_method",
           "tree_method_names", "unregister_method"]

# The package whose subpackages are the built-in methods.
METHODS_PACKAGE = "autotune.methods"


def _builtin_specs() -> list[MethodSpec]:
    """The `SPEC` of every subpackage of `autotune.methods`, in their `order`.

    Loaded by name (`importlib`), not by a static import: the method packages sit above
    the decoding machinery (their drafters, scorers and replay sources import decoding,
    models, measure and replay), so the registry reaches them as it reaches any plug-in's
    "module:attribute" string, and the import layers stay one way. Only each package's
    `__init__` is imported here, and it imports no torch.
    """
    package = importlib.import_module(METHODS_PACKAGE)
    specs = []
    for info in pkgutil.iter_modules(package.__path__):
        if not info.ispkg:                   # e.g. methods/table.py: not a method
            continue
        module = importlib.import_module(f"{METHODS_PACKAGE}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, MethodSpec) or spec.name != info.name:
            raise AutotuneError(f"{module.__name__} must define SPEC = MethodSpec("
                                f"{info.name!r}, ...)")
        specs.append(spec)
    return sorted(specs, key=lambda spec: (spec.order, spec.name))


_REGISTRY: dict[str, MethodSpec] = {spec.name: spec for spec in _builtin_specs()}

BUILTIN_METHODS: tuple[str, ...] = tuple(_REGISTRY)


def register_method(spec: MethodSpec, replace: bool = False) -> MethodSpec:
    """Add a method (a test's toy drafter, a plug-in). Refuses a second spec of the same
    name unless `replace`, and config keys of its own: `DecodeConfig`'s fields are made
    from the built-in specs when it is defined, so a key declared later would have no
    field (its rules, `check`, are welcome)."""
    if spec.name in _REGISTRY and not replace:
        raise AutotuneError(f"method {spec.name!r} is already registered")
    builtin = _REGISTRY.get(spec.name) if spec.name in BUILTIN_METHODS else None
    if (spec.knobs, spec.reads) != ((builtin.knobs, builtin.reads) if builtin else ((), ())):
        raise AutotuneError(f"method {spec.name!r}: a method registered at run time "
                            "declares no config keys (knobs, reads); a built-in "
                            "method's package declares them")
    _REGISTRY[spec.name] = spec
    return spec


def unregister_method(name: str) -> None:
    """Remove a method registered by `register_method` (tests clean up after a toy)."""
    if name in BUILTIN_METHODS:
        raise AutotuneError(f"method {name!r} is built in")
    _REGISTRY.pop(name, None)


def method_names() -> tuple[str, ...]:
    """Every registered method name, built-ins first in their documented order."""
    return tuple(_REGISTRY)


def all_methods() -> Iterator[MethodSpec]:
    return iter(tuple(_REGISTRY.values()))


def tree_method_names() -> tuple[str, ...]:
    """The registered methods that can draft a tree (`can_tree`), in registry order."""
    return tuple(spec.name for spec in _REGISTRY.values() if spec.can_tree)


def get_method(name: str) -> MethodSpec:
    """The spec of `name`, or one line naming the methods there are."""
    spec = _REGISTRY.get(name)
    if spec is None:
        raise AutotuneError(f"method={name!r} is not one of {', '.join(_REGISTRY)}"
                            f"{did_you_mean(str(name), list(_REGISTRY))}")
    return spec


def find_method(name: Any) -> MethodSpec | None:
    """The spec of `name`, or None (a hand-edited trial, an unknown name in a report)."""
    return _REGISTRY.get(name) if isinstance(name, str) else None
