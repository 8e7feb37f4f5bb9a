"""The method registry: one `MethodSpec` per drafting method, the one place that says which
methods there are.

Everything that used to restate a method's name reads it from here: config validation
(which methods exist, which need `--draft`, layer access or can draft a tree), the
decoder (which drafter to build), the agreement proxy (which scorer), the replay tier
(which source, which draft cost), the frozen schema's `method` enum, the exporters' and
the report's key lists, the report's labels and colours, the search's documented
presets, the README's methods table (`autotune.methods.table`).

Built-in methods: `autotune/methods/__init__.py` lists them (`BUILTINS`, one import per
method package, in their documented order) and registers them here
(`register_builtins`); the package root imports that list, so every entry point (the
`autotune` command, `import autotune`, a subprocess) finds them registered before it
reads the registry. This module imports no method package: the packages sit above the
decoding machinery their drafters use, and the registry sits below everything that
reads it. A method from elsewhere (a plug-in, a test's toy drafter) calls
`register_method`.

This module imports no torch: `autotune --help`, `validate`, the report and the
exporters read the registry without loading a model library (a method package's
`__init__` stays torch-free for that reason).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import did_you_mean
from autotune.schema.method_spec import (
    DRAFT_OR_TARGET_STACK,
    TARGET_STACK,
    DerivedKnob,
    KnobCheck,
    Loader,
    MethodSpec,
    Preset,
)

__all__ = ["DRAFT_OR_TARGET_STACK", "TARGET_STACK", "DerivedKnob", "KnobCheck", "Loader",
           "MethodSpec", "Preset", "all_methods", "builtin_methods", "find_method",
           "get_method", "method_names", "register_builtins", "register_method",
           "tree_method_names", "unregister_method"]

_REGISTRY: dict[str, MethodSpec] = {}
_BUILTINS: list[str] = []


def register_builtins(specs: Iterable[MethodSpec]) -> None:
    """Register the built-in methods (`autotune.methods.BUILTINS`), in the order given,
    ahead of any method registered at run time. Once: a second call with other specs
    is a mistake of the caller."""
    specs = tuple(specs)
    if _BUILTINS:
        if [spec.name for spec in specs] != _BUILTINS:
            raise AutotuneError("the built-in methods are registered already")
        return
    others = dict(_REGISTRY)
    _REGISTRY.clear()
    for spec in specs:
        if spec.name in _REGISTRY:
            raise AutotuneError(f"built-in method {spec.name!r} is listed twice")
        _REGISTRY[spec.name] = spec
        _BUILTINS.append(spec.name)
    _REGISTRY.update({name: spec for name, spec in others.items() if name not in _REGISTRY})


def builtin_methods() -> tuple[str, ...]:
    """The built-in methods' names, in their documented order (the baseline first)."""
    return tuple(_BUILTINS)


def register_method(spec: MethodSpec, replace: bool = False) -> MethodSpec:
    """Add a method (a test's toy drafter, a plug-in). Refuses a second spec of the same
    name unless `replace`. Its config keys are those of `DecodeConfig` (a method's own
    keys are fields written there); its rules on them (`check`) are welcome."""
    if spec.name in _REGISTRY and not replace:
        raise AutotuneError(f"method {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def unregister_method(name: str) -> None:
    """Remove a method registered by `register_method` (tests clean up after a toy)."""
    if name in _BUILTINS:
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
