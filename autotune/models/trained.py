"""Trained drafter folders: what `autotune train-draft` writes and `--draft DIR` loads.

A folder holds `drafter.json` (what it is: kind, the target it was distilled from, the
prompts it was trained on, how training went), `heads.safetensors` (the head's weights,
named as the engines' checkpoints name them) and the target's tokenizer. Loading one
gives a `TrainedDraft`: a `LoadedModel` whose forward is the head over the *target's*
embedding, LM head and rotary tables, so everything that passes a draft model around
(`--draft`, the decoder, records) passes a trained drafter the same way.

Kinds and the method each serves (`SERVES`): `eagle` and `medusa` heads draft as
methods of their own name; `exits` (trained S2D exit adapters) serve `sorted_exit`,
which then runs on the target's own stack and reads each exit through its adapter.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from autotune.errors import AutotuneError
from autotune.models.heads import EagleHead, ExitAdapters, MedusaHeads
from autotune.models.llama import LlamaForward
from autotune.models.loading import LoadedModel

DRAFTER_FILE = "drafter.json"
WEIGHTS_FILE = "heads.safetensors"
FORMAT = "autotune.drafter/v1"
KINDS = ("eagle", "medusa", "exits")
# The method a drafter of each kind serves (the decoder refuses it to every other
# method that would draft with it).
SERVES = {"eagle": "eagle", "medusa": "medusa", "exits": "sorted_exit"}


def is_drafter_folder(spec: str | None) -> bool:
    return spec is not None and (Path(spec).expanduser() / DRAFTER_FILE).is_file()


class DrafterConfig:
    """What `LoadedModel.hf_model.config` answers for a trained drafter (fingerprints,
    provenance records): its description as JSON, its kind as the model type."""

    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        self.model_type = f"autotune_{meta['kind']}"

    def to_json_string(self) -> str:
        return json.dumps({k: self.meta[k] for k in ("format", "kind", "geometry", "target")},
                          sort_keys=True)


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
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def trained_kind(self) -> str | None:
        return self.kind


def build_head(kind: str, geometry: dict[str, Any]) -> nn.Module:
    if kind == "eagle":
        return EagleHead(geometry["hidden"], geometry["n_heads"], geometry["n_kv_heads"],
                         geometry["head_dim"], geometry["intermediate"], geometry["eps"],
                         geometry.get("attention_bias", False))
    if kind == "medusa":
        return MedusaHeads(geometry["hidden"], geometry["medusa_heads"],
                           geometry.get("medusa_layers", 1))
    if kind == "exits":
        return ExitAdapters(geometry["hidden"], geometry["exit_layers"], geometry["exit_rank"],
                            geometry["eps"])
    raise AutotuneError(f"drafter kind {kind!r} is not one of {', '.join(KINDS)}")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_meta(folder: Path) -> dict[str, Any]:
    try:
        meta = json.loads((folder / DRAFTER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AutotuneError(f"cannot read {folder / DRAFTER_FILE}: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise AutotuneError(f"{folder / DRAFTER_FILE} is not an autotune drafter "
                            f"({FORMAT})")
    if meta.get("kind") not in KINDS:
        raise AutotuneError(f"{folder / DRAFTER_FILE}: kind {meta.get('kind')!r} is not "
                            f"one of {', '.join(KINDS)}")
    return meta


def load_trained_draft(spec: str, target: LoadedModel) -> TrainedDraft:
    """The drafter folder `spec`, checked against `target` (the model it was distilled
    from: a head over another model's features drafts nonsense, so it is refused)."""
    from safetensors.torch import load_file

    from autotune.replay.reference import model_fingerprint

    folder = Path(spec).expanduser()
    meta = read_meta(folder)
    if not isinstance(target.forward, LlamaForward):
        raise AutotuneError(f"trained drafters read the target's features through the "
                            f"compact Llama-family forward, which {target.name} "
                            f"({target.hf_model.config.model_type}) does not run on")
    fingerprint = model_fingerprint(target)
    trained_for = (meta.get("target") or {}).get("fingerprint")
    if trained_for != fingerprint:
        raise AutotuneError(f"drafter {spec} was trained on {meta['target'].get('name')} "
                            f"(fingerprint {trained_for}), not on {target.name} "
                            f"({fingerprint}): train one with autotune train-draft")
    try:
        head = build_head(meta["kind"], meta["geometry"])
    except (KeyError, TypeError, ValueError) as exc:
        raise AutotuneError(f"{folder / DRAFTER_FILE}: its geometry is incomplete or "
                            f"malformed ({type(exc).__name__}: {exc})") from None
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
    if meta.get("weights_sha256") and file_sha256(weights) != meta["weights_sha256"]:
        raise AutotuneError(f"{weights} does not match the checksum in {DRAFTER_FILE}")
    return trained_draft(head, meta, target, f"{meta['kind']}:{folder.name}", str(folder))


def trained_draft(head: nn.Module, meta: dict[str, Any], target: LoadedModel, name: str,
                  path: str) -> TrainedDraft:
    """A TrainedDraft over `head` (moved to the target's device and dtype, frozen)."""
    head.to(device=target.device, dtype=target.dtype).eval().requires_grad_(False)
    head.config = DrafterConfig(meta)        # type: ignore[assignment]
    return TrainedDraft(name=name, path=path, hf_model=head, tokenizer=target.tokenizer,
                        forward=HeadForward(meta["kind"], head, target.forward),  # type: ignore[arg-type]
                        device=target.device, dtype=target.dtype, kind=meta["kind"], meta=meta)


def served_method(kind: str) -> str:
    """The method a trained drafter of `kind` drafts for."""
    return SERVES[kind]


def exit_adapters(draft: LoadedModel | None) -> ExitAdapters | None:
    """The trained exit adapters when `draft` is an `exits` drafter, else None (a
    plain exit reads the stack's final norm and LM head directly)."""
    if isinstance(draft, TrainedDraft) and draft.kind == "exits":
        head = draft.forward.head                     # type: ignore[attr-defined]
        assert isinstance(head, ExitAdapters)
        return head
    return None


def check_unseen(draft: LoadedModel | None, held_out: list[Any]) -> None:
    """Refuse a trained drafter that was trained on one of the search's held-out
    prompts: its validated figure would not be a held-out figure."""
    if not isinstance(draft, TrainedDraft) or not held_out:
        return
    from autotune.training.data import prompt_digest

    seen = set((draft.meta.get("trained_on") or {}).get("prompt_sha256") or [])
    overlap = [p for p in held_out if prompt_digest(p.text) in seen]
    if overlap:
        raise AutotuneError(f"drafter {draft.path} was trained on {len(overlap)} of this "
                            f"search's held-out prompts (e.g. {overlap[0].prompt_id}): train "
                            "it with the same --workload, --validation and --seed as the search")


def load_draft(spec: str | None, target: LoadedModel, device: str = "auto",
               dtype: str | None = None, trust_remote_code: bool = False
               ) -> LoadedModel | None:
    """`--draft`: None, a trained drafter folder (train-draft's output), or a model."""
    from autotune.models.loading import load_model

    if spec is None:
        return None
    if is_drafter_folder(spec):
        return load_trained_draft(spec, target)
    return load_model(spec, device, dtype, trust_remote_code)
