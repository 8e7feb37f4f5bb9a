"""Shared pieces of the exporters: reading a frozen config, model references, losses.

Every format module exposes the same two functions:

- `check(src) -> list[Loss]`: what the engine cannot express of this config; a `fatal`
  loss means the engine cannot carry the method at all (not even with `lossy`).
- `render(src, options) -> dict[str, str]`: the files, primary first; called only when
  no loss is fatal, and then it applies the documented fallback for every other loss.

Draft trees (DecodeConfig's tree_width/tree_depth/tree_tokens, or a static tree in
tree_choices): only SGLang drafts a tree from a separate draft model (EAGLE-2's dynamic
tree, which STANDALONE inherits from its EAGLE worker); every other format drafts a chain.
A tree whose shape is one path (tree_width 1, or choices that are all rank 0) *is* a
chain and every format expresses it. Any other tree is a loss in a chain-only format;
with `lossy` it degrades to a chain as long as the tree is deep (its best path), which
`draft_length` gives and every chain export uses in place of k.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from autotune.decoding.config import DecodeConfig, config_from_mapping
from autotune.errors import AutotuneError

FROZEN_SCHEMA = "autotune.frozen/v1"

# Knobs that only mean something together with a method / an exit policy: an error or a
# dropped-knob line names them so the user sees everything that goes missing.
METHOD_KNOBS: dict[str, tuple[str, ...]] = {
    "draft_model": ("draft",),
    "layer_skip": ("attn_skip", "mlp_skip"),
    "sorted_exit": ("exits", "thresholds"),
    "ngram": ("ngram_min", "ngram_max"),
}
POLICY_KNOBS: dict[str, tuple[str, ...]] = {
    "fixed": (),
    "confidence": ("gamma",),
    "adaptive": ("gamma", "target_acceptance", "epsilon", "beta1", "beta2"),
    "heuristic": (),
}


@dataclass(frozen=True)
class Source:
    """What an exporter needs from a frozen config: the validated knobs and model names."""

    cfg: DecodeConfig
    target: str              # how an engine should name the target model
    draft: str | None        # same for the draft model; None when there is none
    model_id: str            # the target's short id (a key in Draft & Verify's file)


@dataclass(frozen=True)
class Loss:
    """One thing a format cannot express: `label` is `knob=value`, `knobs` the related
    knobs that go with it, `why` says what the export does instead."""

    label: str
    knobs: tuple[str, ...] = ()
    why: str = ""
    fatal: bool = False
    # A fact the error line adds after the alternatives (e.g. that no format has it).
    note: str = ""

    def summary(self) -> str:
        return f"{self.label} ({', '.join(self.knobs)})" if self.knobs else self.label

    def lines(self, cfg: DecodeConfig) -> list[str]:
        """One human line per dropped knob (the labelled one first)."""
        out = [f"{self.label}: {self.why}"]
        for name in self.knobs:
            value = getattr(cfg, name, None)
            shown = _show(value) if value is not None else "(set)"
            out.append(f"{name}={shown}: dropped with {self.label}")
        return out


def _show(value: Any) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)


def model_ref(model: Mapping[str, Any], role: str) -> str:
    """The name an engine loads: the user's spec, unless it is our built-in `default` or a
    .gguf file (engines want an HF folder), in which case the local folder we read."""
    spec = model.get("spec")
    path = model.get("path")
    if isinstance(spec, str) and spec and spec != "default" and not spec.lower().endswith(".gguf"):
        return spec
    if isinstance(path, str) and path:
        return path
    raise AutotuneError(f"frozen config's {role} model has neither a usable spec nor a path")


def read_frozen(frozen: Any) -> Source:
    """Validate a frozen-config document (see DESIGN: FrozenConfig) into a Source."""
    if not isinstance(frozen, Mapping):
        raise AutotuneError("a frozen config must be a mapping (the contents of best.json)")
    schema = frozen.get("schema", FROZEN_SCHEMA)
    if schema != FROZEN_SCHEMA:
        raise AutotuneError(f"frozen config schema {schema!r} is not {FROZEN_SCHEMA!r}")
    params, model, draft = frozen.get("params"), frozen.get("model"), frozen.get("draft")
    if not isinstance(params, Mapping):
        raise AutotuneError("frozen config has no 'params' mapping")
    if not isinstance(model, Mapping):
        raise AutotuneError("frozen config has no 'model' mapping")
    if draft is not None and not isinstance(draft, Mapping):
        raise AutotuneError("frozen config's 'draft' must be a mapping or null")
    cfg = config_from_mapping(params)
    # Exits index the draft stack when sorted_exit runs over a separate draft model.
    stack = draft if (cfg.method == "sorted_exit" and draft is not None) else model
    n_layers = stack.get("n_layers")
    cfg.validate(n_layers if isinstance(n_layers, int) else None)
    if cfg.method == "draft_model" and draft is None:
        raise AutotuneError("method=draft_model but the frozen config names no draft model")
    return Source(
        cfg=cfg,
        target=model_ref(model, "target"),
        draft=model_ref(draft, "draft") if draft is not None else None,
        model_id=str(model.get("id") or model_ref(model, "target")),
    )


def effective_policy(cfg: DecodeConfig) -> str:
    """The exit policy that actually shapes the drafts. N-gram drafts carry confidence
    1.0, so a confidence threshold (at most 1) never stops them: that policy is `fixed`."""
    if cfg.method == "ngram" and cfg.exit_policy == "confidence":
        return "fixed"
    return cfg.exit_policy


def method_loss(src: Source, supported: tuple[str, ...], why: str) -> Loss | None:
    """A fatal loss when the engine has no equivalent of the method."""
    method = src.cfg.method
    if method in supported:
        return None
    return Loss(f"method={method}", METHOD_KNOBS.get(method, ()), why, fatal=True)


def fixed_k_policy_loss(src: Source, engine: str) -> Loss | None:
    """For engines that always draft a fixed K: any other policy is dropped."""
    policy = effective_policy(src.cfg)
    if policy == "fixed":
        return None
    return Loss(f"exit_policy={policy}", POLICY_KNOBS[policy],
                f"{engine} drafts a fixed number of tokens every round; exported as "
                f"fixed k={src.cfg.k}")


# The error line's note for a static tree: the alternatives cannot name a format for it.
STATIC_TREE_NOTE = ("no export format takes a static tree (tree_choices) for this method: "
                    "engines take one only for EAGLE/Medusa heads, e.g. TensorRT-LLM's "
                    "eagle_choices")


def tree_is_chain(cfg: DecodeConfig) -> bool:
    """A tree of one path: width 1, or static paths that all take the top-ranked child
    (closed under prefixes, so exactly [0], [0, 0], ...). It drafts what a chain does."""
    if cfg.tree_choices:
        return all(rank == 0 for path in cfg.tree_choices for rank in path)
    return cfg.tree_width == 1


def tree_depth_of(cfg: DecodeConfig) -> int:
    """Levels a verified tree can have: its longest path (0 for a chain). A dynamic tree
    keeps tree_node_count() nodes, so it is no deeper than that either."""
    if cfg.tree_choices:
        return max(len(path) for path in cfg.tree_choices)
    if cfg.tree_width:
        return min(cfg.tree_depth, cfg.tree_node_count())
    return 0


def draft_length(cfg: DecodeConfig) -> int:
    """Tokens a chain export drafts per round: k for a chain; for a tree its depth, i.e.
    its best path as a chain (exact for a one-path tree, the lossy fallback otherwise)."""
    return tree_depth_of(cfg) if cfg.is_tree else cfg.k


def tree_label(cfg: DecodeConfig) -> tuple[str, tuple[str, ...]]:
    """`knob=value` and the related knobs of a tree, for a Loss."""
    if cfg.tree_choices:
        paths = [list(path) for path in cfg.tree_choices]
        shown = (str(paths) if len(paths) <= 8
                 else f"[{len(paths)} paths, depth {tree_depth_of(cfg)}]")
        return f"tree_choices={shown}", ()
    knobs = ("tree_depth",) + (("tree_tokens",) if cfg.tree_tokens else ())
    return f"tree_width={cfg.tree_width}", knobs


def chain_only_tree_loss(src: Source, why: str) -> Loss | None:
    """For engines that draft only chains: a tree of more than one path is dropped to its
    best path, a chain of draft_length tokens. `why` says what the engine lacks."""
    cfg = src.cfg
    if not cfg.is_tree or tree_is_chain(cfg):
        return None
    label, knobs = tree_label(cfg)
    return Loss(label, knobs,
                f"{why}; exported as a chain of {draft_length(cfg)} tokens, the tree's depth "
                "(its best path)",
                note=STATIC_TREE_NOTE if cfg.tree_choices else "")


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2) + "\n"
