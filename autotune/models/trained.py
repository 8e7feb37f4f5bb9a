"""Loading trained drafter folders (their format: `models.drafter_folder`).

Loading one gives a `TrainedDraft`: a `LoadedModel` whose forward is the head over the *target's*
embedding, LM head and rotary tables, so everything that passes a draft model around
(`--draft`, the decoder, records) passes a trained drafter the same way.

A per-category folder loads as a `DrafterSet`, and the `drafter` knob picks the member
that drafts (`decoding.drafter_choice.pick_drafter`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from torch import nn

from autotune.common.errors import AutotuneError
from autotune.models.drafter_folder import (
    DRAFTER_FILE,
    GENERAL,
    KINDS,
    ROUTED,
    SET_FILE,
    WEIGHTS_FILE,
    DrafterConfig,
    DrafterMeta,
    EagleGeometry,
    ExitsGeometry,
    HeadGeometry,
    MedusaGeometry,
    file_sha256,
    is_drafter_folder,
    is_drafter_set,
    read_meta,
    read_set_index,
)
from autotune.models.heads import EagleHead, ExitAdapters, MedusaHeads
from autotune.models.llama import LlamaForward
from autotune.models.loading import LoadedModel


class HeadForward:
    """A trained head ready to draft: `head` (EagleHead | MedusaHeads | ExitAdapters,
    eval, no grad) and, for EAGLE, `layer_forward`: the compact forward over its one
    decoder layer, sharing the target's embedding, LM head and rotary tables. Exit
    adapters run inside the target's own stack, so their `n_layers` is the target's
    (layer-indexed keys are checked against it)."""

    supports_layers = True          # drafts trees through the compact forward

    def __init__(self, kind: str, head: nn.Module, target: LlamaForward) -> None:
        self.kind, self.head, self.target = kind, head, target
        self.vocab_size = target.vocab_size
        self.layer_forward: LlamaForward | None = None
        if isinstance(head, EagleHead):
            self.layer_forward = LlamaForward.over_layers(target, [head.inference_layer()])
            self.fc_weight = head.fc.weight.detach()
        if isinstance(head, ExitAdapters):
            self.n_layers = target.n_layers
        else:
            self.n_layers = 1 if self.layer_forward is not None else 0

    def nbytes(self) -> int:
        """The head's own weights (the target's embedding and LM head are shared)."""
        return sum(p.element_size() * p.nelement() for p in self.head.parameters())


@dataclass
class TrainedDraft(LoadedModel):
    """A LoadedModel over a trained head; `kind` says which, `meta` is drafter.json."""

    kind: str = "eagle"
    meta: DrafterMeta | None = None

    @property
    def trained_kind(self) -> str | None:
        return self.kind

    @property
    def exit_layers(self) -> tuple[int, ...] | None:
        """The exit layers of trained exit adapters (None for other kinds)."""
        adapters = exit_adapters(self)
        return tuple(adapters.layers) if adapters is not None else None


def _eagle_head(g: EagleGeometry) -> nn.Module:
    return EagleHead(g.hidden, g.n_heads, g.n_kv_heads, g.head_dim, g.intermediate, g.eps,
                     g.attention_bias)


def _medusa_heads(g: MedusaGeometry) -> nn.Module:
    return MedusaHeads(g.hidden, g.medusa_heads, g.medusa_layers)


def _exit_adapters(g: ExitsGeometry) -> nn.Module:
    return ExitAdapters(g.hidden, g.exit_layers, g.exit_rank, g.eps)


# The head each kind's geometry (drafter.json's) builds: one for every kind of KINDS.
HEAD_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "eagle": _eagle_head, "medusa": _medusa_heads, "exits": _exit_adapters}
assert set(HEAD_BUILDERS) == set(KINDS), (sorted(HEAD_BUILDERS), KINDS)


def build_head(kind: str, geometry: HeadGeometry) -> nn.Module:
    """A fresh (untrained) head of `kind` from its geometry: what a drafter folder's
    weights load into, and what train-draft starts from."""
    if kind not in HEAD_BUILDERS:
        raise AutotuneError(f"drafter kind {kind!r} is not one of {', '.join(KINDS)}")
    return HEAD_BUILDERS[kind](geometry)


def load_trained_draft(spec: str, target: LoadedModel) -> TrainedDraft:
    """The drafter folder `spec`, checked against `target` (the model it was distilled
    from: a head over another model's features drafts nonsense, so it is refused)."""
    from safetensors.torch import load_file

    from autotune.models.fingerprint import model_fingerprint

    folder = Path(spec).expanduser()
    meta = read_meta(folder)
    if not isinstance(target.forward, LlamaForward):
        raise AutotuneError(f"trained drafters read the target's features through the "
                            f"compact Llama-family forward, which {target.name} "
                            f"({target.hf_model.config.model_type}) does not run on")
    fingerprint = model_fingerprint(target)
    trained_for = meta.target.fingerprint
    if trained_for != fingerprint:
        raise AutotuneError(f"drafter {spec} was trained on {meta.target.name} "
                            f"(fingerprint {trained_for}), not on {target.name} "
                            f"({fingerprint}): train one with autotune train-draft")
    try:
        head = build_head(meta.kind, meta.geometry)
    except (TypeError, ValueError) as exc:          # torch's, for sizes it cannot build
        raise AutotuneError(f"{folder / DRAFTER_FILE}: its geometry is malformed "
                            f"({type(exc).__name__}: {exc})") from None
    if isinstance(head, ExitAdapters) and not all(1 <= e < target.n_layers
                                                  for e in head.layers):
        raise AutotuneError(f"{folder / DRAFTER_FILE}: exit layers {list(head.layers)} do "
                            f"not all lie in 1..{target.n_layers - 1} of {target.name}")
    weights = folder / WEIGHTS_FILE
    try:
        state = load_file(str(weights))
        head.load_state_dict(state)
    except Exception as exc:        # safetensors / torch raise many types for a bad file
        raise AutotuneError(f"cannot load {weights}: {str(exc).splitlines()[0]}") from None
    if meta.weights_sha256 and file_sha256(weights) != meta.weights_sha256:
        raise AutotuneError(f"{weights} does not match the checksum in {DRAFTER_FILE}")
    return trained_draft(head, meta, target, f"{meta.kind}:{folder.name}", str(folder))


def trained_draft(head: nn.Module, meta: DrafterMeta, target: LoadedModel, name: str,
                  path: str) -> TrainedDraft:
    """A TrainedDraft over `head` (moved to the target's device and dtype, frozen)."""
    head.to(device=target.device, dtype=target.dtype).eval().requires_grad_(False)
    head.config = DrafterConfig(meta)        # type: ignore[assignment]
    return TrainedDraft(name=name, path=path, hf_model=head, tokenizer=target.tokenizer,
                        forward=HeadForward(meta.kind, head, target.forward),  # type: ignore[arg-type]
                        device=target.device, dtype=target.dtype, kind=meta.kind, meta=meta)



@dataclass
class DrafterSet(TrainedDraft):
    """A per-category folder (`train-draft --per-category`): one drafter of one kind per
    category plus `all`, trained on every category. As a LoadedModel it *is* its `all`
    member (kind, forward, fingerprint checks), so it passes wherever one drafter does;
    `pick_drafter` gives the member a config's `drafter` knob names."""

    members: dict[str, TrainedDraft] = field(default_factory=dict)

    @property
    def specialists(self) -> tuple[str, ...]:
        return tuple(sorted(m for m in self.members if m != GENERAL))

    def drafter_choices(self) -> tuple[str, ...]:
        """The `drafter` knob's values: all, each specialist, routed."""
        return (GENERAL, *self.specialists, ROUTED)


def load_drafter_set(spec: str, target: LoadedModel) -> DrafterSet:
    """The per-category folder `spec`: its index, then every member (each checked as
    one drafter is), all of one kind."""
    folder = Path(spec).expanduser()
    index = read_set_index(folder)
    members = {name: load_trained_draft(str(folder / sub), target)
               for name, sub in sorted(index.members.items())}
    kinds = {m.kind for m in members.values()}
    if len(kinds) != 1:
        raise AutotuneError(f"{folder / SET_FILE}: its members are of several kinds "
                            f"({', '.join(sorted(kinds))}); a set holds one kind")
    general = members[GENERAL]
    values = {f.name: getattr(general, f.name) for f in dataclasses.fields(TrainedDraft)}
    values.update(name=f"{general.kind}:{folder.name} (per category)", path=str(folder))
    return DrafterSet(**values, members=members)


def trained_prompt_digests(draft: LoadedModel | None) -> set[str]:
    """Every prompt digest a trained drafter (each member of a set) was trained on."""
    parts = list(draft.members.values()) if isinstance(draft, DrafterSet) else [draft]
    seen: set[str] = set()
    for part in parts:
        if isinstance(part, TrainedDraft) and part.meta is not None:
            seen.update(part.meta.trained_on.prompt_sha256)
    return seen


def exit_adapters(draft: LoadedModel | None) -> ExitAdapters | None:
    """The trained exit adapters when `draft` is an `exits` drafter, else None (a
    plain exit reads the stack's final norm and LM head directly)."""
    if isinstance(draft, TrainedDraft) and draft.kind == "exits":
        head = draft.forward.head                     # type: ignore[attr-defined]
        assert isinstance(head, ExitAdapters)
        return head
    return None


def load_draft(spec: str | None, target: LoadedModel, device: str = "auto",
               dtype: str | None = None, trust_remote_code: bool = False
               ) -> LoadedModel | None:
    """`--draft`: None, a trained drafter folder (train-draft's output), or a model."""
    from autotune.models.loading import load_model

    if spec is None:
        return None
    if is_drafter_set(spec):
        return load_drafter_set(spec, target)
    if is_drafter_folder(spec):
        return load_trained_draft(spec, target)
    return load_model(spec, device, dtype, trust_remote_code)
