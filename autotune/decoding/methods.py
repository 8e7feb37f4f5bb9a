"""The method registry: one `MethodSpec` per drafting method, the one place that says what
a method is.

Everything that used to restate a method's name reads it from here: config validation
(which methods exist, which need `--draft`, layer access or can draft a tree), the
decoder (which drafter to build), the agreement proxy (which scorer), the frozen
schema's `method` enum, the exporters' and the report's key lists, the report's labels
and colours, the search's documented presets.

A new drafter is one module (its `Drafter` class with `build`, optionally a `score`
function for the agreement proxy) plus one `register_method(MethodSpec(...))` and one
space YAML. This module imports no torch: `autotune --help`, `validate`, the report and
the exporters read the registry without loading a model library. Drafter classes and
scorers are named by a `"module:attribute"` string and imported on first use (or given
as the object itself, as a test's toy drafter does).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import did_you_mean

# Where a method's layer-indexed knobs (skip sets, exits) point.
TARGET_STACK = "target"                  # the target's layers (layer_skip)
DRAFT_OR_TARGET_STACK = "draft_or_target"  # the --draft's layers if given, else the target's

Factory = Any        # a class or function, or "package.module:attribute" naming one


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
    (The config keys a method reads come from the knobs' metadata:
        `decoding.config.own_keys` / `method_keys`.)
    drafts: False only for the AR baseline (`none`): it reads no k, no policy.
    needs_draft: runs only with a separate draft model (`--draft`).
    uses_draft: runs over the draft model when one is given (its cache, its layers).
    layer_stack: None, TARGET_STACK or DRAFT_OR_TARGET_STACK: whose layers its
        layer-indexed keys (skip sets, exits) index; such a method needs the compact
        Llama-family forward on that stack.
    can_tree: its drafts come with distributions, so it can draft a tree (EAGLE-2).
    confident_drafts: every draft token carries confidence 1.0 (n-gram lookups), so a
        confidence exit rule never stops it: its effective policy is `fixed`.
    reads_target_features: its drafter reads the target's features (trained heads:
        EAGLE, Medusa); every target pass hands it those of the tokens kept
        (`target_features(features [1, T, H])`), so the target needs the compact forward.
    drafter: the Drafter class (`build(context) -> Drafter`), or its "module:Class".
    scorer: the agreement proxy's scorer factory, `(target, config, draft) -> Scorer`,
        or its "module:function"; None when the method has no cheap proxy.
    replay: the replay tier's source factory, `(target, draft) -> ReplaySource`
        (autotune/replay/sources.py), or its "module:function"; None when the method
        cannot be replayed (it is then only measured).
    derived: counts of set-valued keys for the report's knob panels.
    summary: a short label of the method's own knobs for progress lines and tables.
    presets: documented defaults of this method for an n-layer target, first trials of
        a search when the space can express them.
    """

    name: str
    label: str
    color: str
    drafter: Factory
    drafts: bool = True
    needs_draft: bool = False
    uses_draft: bool = False
    layer_stack: str | None = None
    can_tree: bool = False
    confident_drafts: bool = False
    reads_target_features: bool = False
    scorer: Factory | None = None
    replay: Factory | None = None
    derived: tuple[DerivedKnob, ...] = ()
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

    # -- the code behind it (imported on first use) --------------------------------------

    def drafter_class(self) -> Any:
        return _resolve(self.drafter)

    def scorer_factory(self) -> Any | None:
        return _resolve(self.scorer) if self.scorer is not None else None

    def replay_factory(self) -> Any | None:
        return _resolve(self.replay) if self.replay is not None else None


def _resolve(factory: Factory) -> Any:
    if not isinstance(factory, str):
        return factory
    module, _, attribute = factory.partition(":")
    return getattr(importlib.import_module(module), attribute)


_REGISTRY: dict[str, MethodSpec] = {}


def register_method(spec: MethodSpec, replace: bool = False) -> MethodSpec:
    """Add a method (a test's toy drafter, a plug-in). Refuses a second spec of the same
    name unless `replace`."""
    if spec.name in _REGISTRY and not replace:
        raise AutotuneError(f"method {spec.name!r} is already registered")
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


# ------------------------------------------------------------------ the built-ins

def _layer_skip_summary(c: Mapping[str, Any]) -> str:
    return f"attn={len(c.get('attn_skip') or [])} mlp={len(c.get('mlp_skip') or [])}"


def _sorted_exit_summary(c: Mapping[str, Any]) -> str:
    return f"exits={','.join(map(str, c.get('exits') or []))}"


def _ngram_summary(c: Mapping[str, Any]) -> str:
    return f"n={c.get('ngram_min')}..{c.get('ngram_max')}"


def _upper_attention(n_layers: int) -> list[int]:
    # Draft & Verify publishes searched masks per model, not a default one; for a model
    # it has not searched we start from the attention of every other layer in the upper
    # half, which its Fig. 6 and SWIFT find the most redundant. Our choice, not theirs.
    return list(range(n_layers // 2, n_layers - 1, 2))


def _draft_model_presets(n_layers: int) -> list[Preset]:
    return [
        Preset("hf_assisted", "transformers assisted generation defaults: "
               "num_assistant_tokens=20, schedule constant, assistant_confidence_threshold=0.4",
               {"method": "draft_model", "k": 20, "exit_policy": "confidence", "gamma": 0.4},
               rank=1, engine="hf"),
        Preset("sglang_chain", "SGLang chain drafting: speculative_num_steps=3, eagle_topk=1",
               {"method": "draft_model", "k": 3, "exit_policy": "fixed"}, rank=4,
               engine="sglang"),
        Preset("sglang_tree", "SGLang STANDALONE tree example: speculative_num_steps=4, "
               "eagle_topk=2, num_draft_tokens=7 (the root included)",
               {"method": "draft_model", "exit_policy": "fixed", "tree_width": 2,
                "tree_depth": 4, "tree_tokens": 6}, rank=5, engine="sglang"),
    ]


def _ngram_presets(n_layers: int) -> list[Preset]:
    return [Preset("vllm_ngram", "vLLM ngram: num_speculative_tokens=5, prompt_lookup_min=5, "
                   "prompt_lookup_max=5",
                   {"method": "ngram", "k": 5, "ngram_min": 5, "ngram_max": 5,
                    "exit_policy": "fixed"}, rank=2, engine="vllm"),
            # transformers 5.23.0 generation/utils.py: `max_matching_ngram_size or 2`;
            # 10 tokens is its prompt-lookup documentation's example.
            Preset("hf_prompt_lookup", "transformers prompt lookup: prompt_lookup_num_tokens=10, "
                   "max_matching_ngram_size=2 (its default)",
                   {"method": "ngram", "k": 10, "ngram_min": 1, "ngram_max": 2,
                    "exit_policy": "fixed"}, rank=7, engine="hf", targeted=True),
            # SGLang (sgl-project/sglang arg_groups speculative_hook.py @ 004c82e0, fields
            # spec.py @ 015c8726): NGRAM's num_draft_tokens defaults to 12 (11 drafts after
            # the root) and max_trie_depth to 18, which our export maps as ngram_max + k.
            Preset("sglang_ngram", "SGLang NGRAM defaults: speculative_num_draft_tokens=12, "
                   "speculative_ngram_max_trie_depth=18",
                   {"method": "ngram", "k": 11, "ngram_min": 1, "ngram_max": 7,
                    "exit_policy": "fixed"}, rank=8, engine="sglang", targeted=True),
            # llama-cpp-python 0.3.36 llama_speculative.py LlamaPromptLookupDecoding
            # (max_ngram_size=2, num_pred_tokens=10); its server's draft_model_num_pred_tokens
            # defaults to 10 as well (notes/engines/llama_cpp.md).
            Preset("llama_cpp_prompt_lookup", "llama-cpp-python prompt lookup defaults: "
                   "LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=10)",
                   {"method": "ngram", "k": 10, "ngram_min": 1, "ngram_max": 2,
                    "exit_policy": "fixed"}, rank=9, engine="llama_cpp", targeted=True)]


def _layer_skip_presets(n_layers: int) -> list[Preset]:
    upper = _upper_attention(n_layers)
    return [
        Preset("dv_default", "Draft & Verify: max draft 8, threshold 0.8, adaptive "
               "(auto_parameters α 0.9, ε 0.01, β1 0.5, β2 0.9)",
               {"method": "layer_skip", "k": 8, "exit_policy": "adaptive", "gamma": 0.8,
                "target_acceptance": 0.9, "epsilon": 0.01, "beta1": 0.5, "beta2": 0.9,
                "attn_skip": upper, "mlp_skip": []}, rank=3),
        # EAGLE-2's tree (top-k 10, depth 6, 60 tokens) is tuned for its trained head on a
        # GPU; over the layer-skip draft above it is our starting point, not theirs.
        Preset("eagle2_tree", "EAGLE-2 dynamic tree: top-k 10, depth 6, total tokens 60 "
               "(over the dv_default mask)",
               {"method": "layer_skip", "exit_policy": "fixed", "tree_width": 10,
                "tree_depth": 6, "tree_tokens": 60, "attn_skip": upper, "mlp_skip": []}, rank=6),
    ]


def _eagle_presets(n_layers: int) -> list[Preset]:
    # EAGLE-2's dynamic tree (as in layer_skip's eagle2_tree preset) over the trained
    # head it was made for; the short chain is our starting point, not a published one.
    return [Preset("eagle_chain", "EAGLE chain of 3 (a short chain, our starting point)",
                   {"method": "eagle", "k": 3, "exit_policy": "fixed"}, rank=10),
            Preset("eagle2_tree_head", "EAGLE-2 dynamic tree: top-k 10, depth 6, total "
                   "tokens 60", {"method": "eagle", "exit_policy": "fixed", "tree_width": 10,
                                 "tree_depth": 6, "tree_tokens": 60}, rank=11)]


def _medusa_presets(n_layers: int) -> list[Preset]:
    return [Preset("medusa_chain", "Medusa: one token per head (a chain of 3)",
                   {"method": "medusa", "k": 3, "exit_policy": "fixed"}, rank=12)]


_DRAFTERS = "autotune.decoding.drafters"
_SCORERS = "autotune.measure.agreement"
_REPLAY = "autotune.replay.sources"

BUILTIN_METHODS: tuple[str, ...] = ("none", "draft_model", "layer_skip", "sorted_exit", "ngram",
                                    "eagle", "medusa")

for _spec in (
    MethodSpec("none", label="AR baseline", color="#7f7f7f", drafts=False,
               drafter=f"{_DRAFTERS}.none:NoDraft", replay=f"{_REPLAY}:no_draft_source"),
    MethodSpec("draft_model", label="draft_model", color="#E69F00", needs_draft=True,
               uses_draft=True, can_tree=True,
               drafter=f"{_DRAFTERS}.draft_model:DraftModelDrafter",
               scorer=f"{_SCORERS}:draft_model_scorer",
               replay=f"{_REPLAY}:draft_model_source", presets=_draft_model_presets),
    MethodSpec("layer_skip", label="layer_skip", color="#009E73",
               layer_stack=TARGET_STACK, can_tree=True,
               drafter=f"{_DRAFTERS}.layer_skip:LayerSkipDrafter",
               scorer=f"{_SCORERS}:layer_skip_scorer",
               replay=f"{_REPLAY}:layer_skip_source",
               derived=(DerivedKnob("n_attn_skipped", "attention layers skipped", "attn_skip"),
                        DerivedKnob("n_mlp_skipped", "MLP layers skipped", "mlp_skip")),
               summary=_layer_skip_summary, presets=_layer_skip_presets),
    MethodSpec("sorted_exit", label="sorted_exit", color="#CC79A7", uses_draft=True,
               layer_stack=DRAFT_OR_TARGET_STACK, can_tree=True,
               drafter=f"{_DRAFTERS}.sorted_exit:SortedExitDrafter",
               scorer=f"{_SCORERS}:sorted_exit_scorer",
               replay=f"{_REPLAY}:sorted_exit_source",
               derived=(DerivedKnob("n_exits", "number of exits", "exits"),),
               summary=_sorted_exit_summary),
    MethodSpec("ngram", label="ngram", color="#0072B2", confident_drafts=True,
               drafter=f"{_DRAFTERS}.ngram:NgramDrafter", scorer=f"{_SCORERS}:ngram_scorer",
               replay=f"{_REPLAY}:ngram_source",
               summary=_ngram_summary, presets=_ngram_presets),
    # Trained heads (`autotune train-draft`), named by --draft DIR.
    MethodSpec("eagle", label="eagle", color="#D55E00", needs_draft=True, uses_draft=True,
               can_tree=True, reads_target_features=True,
               drafter=f"{_DRAFTERS}.eagle:EagleDrafter",
               scorer=f"{_SCORERS}:trained_head_scorer", replay=f"{_REPLAY}:eagle_source",
               presets=_eagle_presets),
    MethodSpec("medusa", label="medusa", color="#56B4E9", needs_draft=True, uses_draft=True,
               can_tree=True, reads_target_features=True,
               drafter=f"{_DRAFTERS}.medusa:MedusaDrafter",
               scorer=f"{_SCORERS}:trained_head_scorer", replay=f"{_REPLAY}:medusa_source",
               presets=_medusa_presets),
):
    register_method(_spec)
