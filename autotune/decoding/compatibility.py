"""Whether a config can decode on these models: every check the decoder makes before it
builds anything, callable without building one.

`check_decodable(target, config, draft)` runs them in the decoder's order and returns
what they settled (`Decodable`: the method's spec, the draft that drafts, the shared
vocabulary), or raises one AutotuneError line on the first it refuses: a valid config,
a per-category folder's member, a shared vocabulary, a draft where the method needs
one, a trained drafter of the method's own kind, layer access (and layer indices inside
the stack they index), a tree-capable forward, an installed optional package.

The decoder calls it first; the replay tier, the agreement proxy and the replay cost
model call it alone, to refuse what the decoder would refuse without allocating its
caches or building a drafter.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.common.errors import AutotuneError
from autotune.decoding.drafter_choice import pick_drafter
from autotune.decoding.drafters.base import stack_model
from autotune.models.drafter_folder import served_method
from autotune.models.loading import LoadedModel, check_shared_vocabulary, draft_model
from autotune.schema.config import DecodeConfig
from autotune.schema.methods import MethodSpec, get_method

__all__ = ["Decodable", "check_decodable"]


@dataclass(frozen=True)
class Decodable:
    """What the checks settled about one config on these models.

    spec: the config's method. drafters: `--draft` as given (a per-category folder
    stays whole: `routed` picks its member per prompt). draft: the model that drafts
    (the `drafter` knob's member of a folder; `all` stands in for `routed`), or None.
    vocab_size: the vocabulary target and draft share (the smaller one's size).
    """

    spec: MethodSpec
    drafters: LoadedModel | None
    draft: LoadedModel | None
    vocab_size: int


def check_decodable(target: LoadedModel, config: DecodeConfig,
                    draft: LoadedModel | None = None) -> Decodable:
    """Every check `SpeculativeDecoder(target, config, draft)` makes, in its order; the
    first refusal raises one AutotuneError line."""
    config.validate()
    spec = get_method(config.method)
    drafters = draft
    if spec.uses_draft:
        draft = pick_drafter(draft, config.drafter)
    if draft is not None:
        check_shared_vocabulary(target, draft)
    spec.require_draft(draft is not None)
    _check_trained(spec, target, draft)
    _check_layer_access(spec, target, config, draft)
    if config.is_tree or spec.own_trees:
        _check_tree_forward(spec, target, draft)
    vocab_size = target.forward.vocab_size if draft is None else min(
        target.forward.vocab_size, draft.forward.vocab_size)
    spec.require_available()
    return Decodable(spec, drafters, draft, vocab_size)


def _check_layer_access(spec: MethodSpec, target: LoadedModel, config: DecodeConfig,
                        draft: LoadedModel | None) -> None:
    """A method with layer-indexed keys needs the compact forward on the stack they
    index, and indices inside that stack."""
    if not spec.needs_layers:
        return
    stack = stack_model(spec, target, draft)
    if not stack.forward.supports_layers:
        raise AutotuneError(
            f"method={spec.name} needs layer access, which {stack.name} "
            f"({stack.hf_model.config.model_type}) does not offer: only Llama-family "
            "models run on the compact forward; use draft_model or ngram")
    model = draft_model(draft)
    draft_layers = model.n_layers if model is not None else None
    config.validate(n_layers=spec.stack_layers(target.n_layers, draft_layers))


def _check_trained(spec: MethodSpec, target: LoadedModel, draft: LoadedModel | None
                   ) -> None:
    """A trained drafter serves one method only (eagle, medusa: their own; exits:
    sorted_exit), and eagle and medusa need theirs. Methods that never draft with
    --draft (layer_skip, ngram, none) ignore it."""
    kind = draft.trained_kind if draft is not None else None
    if spec.reads_target_features:
        if kind != spec.name:
            raise AutotuneError(f"method={spec.name} needs a trained {spec.name} "
                                f"drafter as --draft (autotune train-draft --kind "
                                f"{spec.name}), not {draft.name if draft else 'none'}")
        if not target.forward.supports_layers:
            raise AutotuneError(f"method={spec.name} reads the target's features, "
                                "which only the compact Llama-family forward gives")
        return
    if kind is None or not spec.uses_draft:
        return
    serves = served_method(kind)
    if serves == spec.name:
        return
    assert draft is not None
    if spec.needs_draft:
        raise AutotuneError(f"method={spec.name} needs a draft model; {draft.name} "
                            f"is a trained {kind} drafter (it serves method={serves})")
    raise AutotuneError(f"method={spec.name} cannot draft with {draft.name}: a "
                        f"trained {kind} head serves method={serves}")


def _check_tree_forward(spec: MethodSpec, target: LoadedModel, draft: LoadedModel | None
                        ) -> None:
    """Tree masks and per-node positions exist only in the compact forward."""
    for role, model in (("target", target), ("draft", draft if spec.uses_draft else None)):
        if model is not None and not model.forward.supports_layers:
            raise AutotuneError(
                f"draft trees need the compact Llama-family forward for the {role} "
                f"({model.name}, {model.hf_model.config.model_type}); use a chain "
                "(tree_width=0) with this model")
