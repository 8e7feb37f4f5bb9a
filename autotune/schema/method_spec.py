"""What a drafting method is: `MethodSpec`, its documented `Preset`s and the counts
(`DerivedKnob`) the report plots for it.

A built-in method's package (`autotune/methods/<name>/__init__.py`) defines its `SPEC`
from these; the registry (`autotune.schema.methods`) holds the specs. Kept apart from
the registry so that a method's package can be imported on its own, before the
registry has listed the built-ins. Imports no torch: a spec reaches its code (drafter,
scorer, replay source, draft cost, cross-request state) through loaders, zero-argument
functions in the method's package that import what they return when first called, so
that a reader and an import tool follow each to its definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from autotune.common.errors import AutotuneError
from autotune.common.packages import installed

__all__ = ["DRAFT_OR_TARGET_STACK", "TARGET_STACK", "DerivedKnob", "KnobCheck", "Loader",
           "MethodSpec", "Preset"]

# Where a method's layer-indexed knobs (skip sets, exits) point.
TARGET_STACK = "target"                  # the target's layers (layer_skip)
DRAFT_OR_TARGET_STACK = "draft_or_target"  # the --draft's layers if given, else the target's

# A loader: a zero-argument function that imports a class or function of the method's
# package and returns it (`def _drafter(): from .drafter import X; return X`).
Loader = Callable[[], Any]
# A method's rules on a config's values: (config, n_layers or None) -> None, raising one
# AutotuneError line on the first value it refuses.
KnobCheck = Callable[[Any, "int | None"], None]


@dataclass(frozen=True)
class Preset:
    """A documented default configuration, queued before the sampler's own trials."""

    name: str
    source: str
    values: dict[str, Any]
    # Queue position among all methods' presets (lower first): a short budget tries the
    # most-used server defaults first, whatever order the methods were registered in.
    rank: int = 100
    # The engine whose documented default this is (`search --target` queues only its
    # own engine's); None for a paper's or a repository's default. `targeted`: queued
    # only by a search with `--target <engine>`, not by the autotune target.
    engine: str | None = None
    targeted: bool = False


@dataclass(frozen=True)
class DerivedKnob:
    """A count the report plots for a method's set-valued key (`attn_skip` -> how many
    attention layers are skipped): one bit per layer is unreadable as a panel."""

    name: str          # e.g. "n_attn_skipped"
    title: str         # e.g. "attention layers skipped"
    key: str           # the config key counted, e.g. "attn_skip"


@dataclass(frozen=True)
class MethodSpec:
    """What one drafting method is, needs and reads.

    name: the `method` value in configs, spaces and frozen configs.
    label / color: legend name and colour on every report figure.
    about: one line saying what the method is (the README's methods table).
    check: its rules on a config of this method, `(config, n_layers) -> None`, beyond
        the bounds and choices of its scalar keys (its own knobs are `DecodeConfig`
        fields, `own_knob`, whose bounds are checked for it): a rule between keys,
        a list's items, another knob it needs (`exit_policy=fixed`).
    check_every_config: rules on its keys that hold whatever a config's method is (a
        layer index inside the model, a range checked for every config as it always
        was); None: its keys are checked only for configs of this method.
    drafts: False only for the AR baseline (`none`): it reads no k, no policy.
    needs_draft: runs only with a separate draft model (`--draft`).
    uses_draft: runs over the draft model when one is given (its cache, its layers).
    layer_stack: None, TARGET_STACK or DRAFT_OR_TARGET_STACK: whose layers its
        layer-indexed keys (skip sets, exits) index; such a method needs the compact
        Llama-family forward on that stack.
    can_tree: its drafts come with distributions, so it can draft a tree (EAGLE-2).
    own_trees: its drafter builds the whole verify tree itself, every round, with no
        tree knobs (SGLang's NGRAM trie: `drafters.base.TreeProposer`); the decoder
        verifies it as a tree.
    confident_drafts: every draft token carries confidence 1.0 (n-gram lookups), so a
        confidence exit rule never stops it: its effective policy is `fixed`.
    reads_target_features: its drafter reads the target's features (trained heads:
        EAGLE, Medusa); every target pass hands it those of the tokens kept
        (`target_features(features [1, T, H])`), so the target needs the compact forward.
    drafter: the loader of its Drafter class (`build(context) -> Drafter`).
    scorer: the loader of the agreement proxy's scorer factory, `(target, config,
        draft) -> Scorer`; None when the method has no cheap proxy.
    replay: the loader of the replay tier's source factory, `(target, draft) ->
        ReplaySource` (autotune/replay/sources.py); None when the method cannot be
        replayed (it is then only measured).
    draft_cost: the loader of the replay cost model's `DraftCost` class for this method
        (autotune/replay/draft_cost.py: its drafting time per replayed round from the
        measured parts); None: it drafts at no cost (the AR baseline).
    model_free: it drafts from token statistics alone (n-grams, suffix trees), so the
        engines' model-free rules apply to it (`EngineRules.ngram_ignores_budget`).
    shared_state: the loader of a factory `(config) -> state` of what the method keeps
        across the requests one arm serves (an engine's cache of earlier outputs); None
        when every request starts afresh. The decoder makes one
        per arm (the factory may return None: this config keeps nothing) and hands it
        to each generation's drafter (`DraftContext.shared`); the state
        `absorb(prompt, response, max_new_tokens)`s a finished request that was served
        untimed (a warm history), and `forget()` is a new state.
    requires: (module, install command) when the method runs on an optional package;
        without it the method drops out of spaces and a config naming it is refused in
        one line naming the command.
    derived: counts of set-valued keys for the report's knob panels.
    summary: a short label of the method's own knobs for progress lines and tables.
    presets: documented defaults of this method for an n-layer target, first trials of
        a search when the space can express them.
    """

    name: str
    label: str
    color: str
    drafter: Loader
    about: str = ""
    drafts: bool = True
    needs_draft: bool = False
    uses_draft: bool = False
    layer_stack: str | None = None
    can_tree: bool = False
    own_trees: bool = False
    confident_drafts: bool = False
    reads_target_features: bool = False
    model_free: bool = False
    shared_state: Loader | None = None
    requires: tuple[str, str] | None = None
    scorer: Loader | None = None
    replay: Loader | None = None
    draft_cost: Loader | None = None
    derived: tuple[DerivedKnob, ...] = ()
    check: KnobCheck | None = None
    check_every_config: KnobCheck | None = None
    summary: Callable[[Mapping[str, Any]], str] | None = None
    presets: Callable[[int], list[Preset]] = field(default=lambda n_layers: [])

    # -- what the method reads ----------------------------------------------------------

    @property
    def needs_layers(self) -> bool:
        """Whether it reads or skips individual layers (the compact forward only)."""
        return self.layer_stack is not None

    def stack_role(self, has_draft: bool) -> str | None:
        """"target" or "draft": the model whose layers its layer keys index (None if it
        indexes none)."""
        if self.layer_stack == TARGET_STACK:
            return "target"
        if self.layer_stack == DRAFT_OR_TARGET_STACK:
            return "draft" if has_draft else "target"
        return None

    def stack_layers(self, target_layers: int | None, draft_layers: int | None) -> int | None:
        """The layer count its layer-indexed keys are checked against (None: unknown or
        not a layer method). Exits index the draft's stack when it runs over --draft."""
        role = self.stack_role(draft_layers is not None)
        return draft_layers if role == "draft" else target_layers if role == "target" else None

    def require_draft(self, has_draft: bool) -> None:
        """Refuse, in one line, to run a method that needs `--draft` without one."""
        if self.needs_draft and not has_draft:
            if self.reads_target_features:
                raise AutotuneError(f"method={self.name} needs a trained {self.name} drafter: "
                                    f"pass --draft DIR (autotune train-draft --kind {self.name})")
            raise AutotuneError(f"method={self.name} needs a draft model: pass --draft")

    def available(self) -> bool:
        """Whether the optional package it runs on (`requires`) is installed."""
        return self.requires is None or installed(self.requires[0])

    def require_available(self) -> None:
        """Refuse, in one line, to run a method whose optional package is missing."""
        if not self.available():
            assert self.requires is not None
            raise AutotuneError(f"method={self.name} needs {self.requires[0]}: "
                                f"{self.requires[1]}")

    # -- the code behind it (its loaders, imported on first use) --------------------------

    def drafter_class(self) -> Any:
        return self.drafter()

    def scorer_factory(self) -> Any | None:
        return self.scorer() if self.scorer is not None else None

    def replay_factory(self) -> Any | None:
        return self.replay() if self.replay is not None else None

    def shared_state_factory(self) -> Any | None:
        return self.shared_state() if self.shared_state is not None else None

    def draft_cost_class(self) -> Any | None:
        return self.draft_cost() if self.draft_cost is not None else None
