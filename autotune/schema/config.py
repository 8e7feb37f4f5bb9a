"""DecodeConfig: the canonical knobs of one speculative-decoding candidate.

Parsing (`key=value` strings, JSON/YAML files) and validation live here, so the CLI,
the search and exported configs all agree on names, types and defaults.

Every knob is a field written out below, with its type, default and metadata (`knob`:
kind, owner, doc, bounds): the knobs every method shares (`method`, `k`, the exit
policy's, the tree's, the workload's) and each method's own (`own_knob`: owned by the
method that reads it, its package's checks beside its drafter), so that a type checker
and a reader see all 41 fields where they are declared, as vLLM's speculative config
writes its own out. `validate` checks the shared knobs and asks the methods for the rest
(their scalar keys' bounds, `check`, `check_every_config`): it names no method.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import did_you_mean
from autotune.schema.engines import RULES, retirement
from autotune.schema.knobs import (
    ALL,
    DRAFT,
    DRAFTING,
    KNOB_METADATA_KEY,
    SCALAR_KINDS,
    SHAPE,
    WORKLOAD,
    Knob,
    check_bounds,
    check_exit_order,
    knob,
    own_knob,
    policy_owner,
)
from autotune.schema.methods import MethodSpec, all_methods, get_method, tree_method_names
from autotune.schema.shape import DraftShape

__all__ = ["DRAFTER_NAME", "EXIT_POLICIES", "VERIFY_RULES", "GENERAL_DRAFTER", "KNOBS", "MAX_TREE_NODES",
           "ROUTED_DRAFTER", "DecodeConfig", "check_choices", "check_exit_order", "check_knobs",
           "config_from_mapping", "load_config_file", "method_keys", "own_keys",
           "parse_assignments", "shape_of_mapping"]

EXIT_POLICIES = ("fixed", "confidence", "adaptive", "heuristic")
# `verify` values: how a sampled chain is verified (verify.rejection_sample, block_verify).
VERIFY_RULES = ("token", "block")
# `drafter` values: all, routed, or a workload category (a per-category folder's member).
DRAFTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# The `drafter` knob's values besides a category (the per-category folder format's names,
# `autotune.models.drafter_folder`): the member trained on every category (the default,
# and what a plain drafter is), and each prompt's own category's member.
GENERAL_DRAFTER, ROUTED_DRAFTER = "all", "routed"
# One verify pass carries the root plus at most this many tree nodes.
MAX_TREE_NODES = 255


@dataclass(frozen=True)
class DecodeConfig:
    """One candidate: every knob of the decoder, with canonical names.

    Knobs a method does not use are ignored by it (e.g. `exits` under `layer_skip`), so
    one flat record serves every method. The adaptive-rule defaults (γ0 0.6, α 0.85,
    ε 0.01, β1 0.5, β2 0.9) are our starting point, not values a paper prescribes.
    A method's own knobs (`own_knob`) sit where best.json's `params` and the docs' key
    table have always had them: the list-valued ones after `k`, the others after `beta2`.
    """

    method: str = field(default="none", metadata=knob(
        "str", ALL, "`none` (the AR baseline) or a registered drafting method"))
    k: int = field(default=4, metadata=knob(
        "int", DRAFTING, "most draft tokens per round (start value for `heuristic`)", low=1))
    # layer_skip: the layers its draft skips.
    attn_skip: tuple[int, ...] = own_knob(
        "layer_skip", "int_set", (),
        "layers whose attention the `layer_skip` draft skips, e.g. `12,17`", low=0)
    mlp_skip: tuple[int, ...] = own_knob(
        "layer_skip", "int_set", (), "layers whose MLP the `layer_skip` draft skips", low=0)
    # sorted_exit (and llama_draft, which reads `exits`): the exits of the draft stack.
    exits: tuple[int, ...] = own_knob(
        ("sorted_exit", "llama_draft"), "int_list", (),
        "`sorted_exit`: exit depths n1<…<nm over the draft stack (the target, or `--draft`); "
        "`llama_draft`: the one depth its GGUF draft keeps (none: the whole `--draft`)",
        low=1)
    thresholds: tuple[float, ...] = own_knob(
        "sorted_exit", "float_list", (),
        "`sorted_exit`: top-1 threshold per exit; the deepest exit always emits",
        low=0.0, high=1.0)
    exit_policy: str = field(default="fixed", metadata=knob(
        "str", DRAFTING, "`fixed`, `confidence` (stop when top-1 < `gamma`), `adaptive` "
        "(Draft & Verify), `heuristic` (HF: +2 if all accepted, else −1)",
        choices=EXIT_POLICIES))
    gamma: float = field(default=0.6, metadata=knob(
        "float", policy_owner("confidence", "adaptive"),
        "confidence threshold γ; γ0 of the adaptive rule", low=0.0, high=1.0))
    target_acceptance: float = field(default=0.85, metadata=knob(
        "float", policy_owner("adaptive"), "α: Draft & Verify's target acceptance rate",
        low=0.0, high=1.0))
    epsilon: float = field(default=0.01, metadata=knob(
        "float", policy_owner("adaptive"), "ε: step of γ per round", low=0.0, high=1.0))
    beta1: float = field(default=0.5, metadata=knob(
        "float", policy_owner("adaptive"), "β1: smoothing of the acceptance rate",
        low=0.0, high=1.0))
    beta2: float = field(default=0.9, metadata=knob(
        "float", policy_owner("adaptive"), "β2: smoothing of γ", low=0.0, high=1.0))
    # ngram: prompt lookup's n-gram sizes and TensorRT-LLM's pool.
    ngram_min: int = own_knob("ngram", "int", 1, "shortest prompt-lookup n-gram", low=1)
    ngram_max: int = own_knob("ngram", "int", 3, "longest prompt-lookup n-gram", low=1)
    ngram_pool: str = own_knob(
        "ngram", "str", "private",
        "TensorRT-LLM's n-gram pool (`engine=trtllm`): this request's own (`private`) or one "
        "shared by every request (`public`; is_public_pool)", choices=("private", "public"))
    # suffix: vLLM's suffix_decoding_* fields, named and defaulted as SpeculativeConfig in
    # PROVENANCE["vllm"].version (vllm/config/speculative.py L537-556).
    suffix_max_tree_depth: int = own_knob(
        "suffix", "int", 24, "suffix trees' depth: the longest match plus draft "
        "(vLLM suffix_decoding_max_tree_depth)", low=1)
    suffix_max_cached_requests: int = own_knob(
        "suffix", "int", 10000, "earlier requests' outputs kept for drafting, FIFO "
        "(0 = this request's own tokens only; vLLM suffix_decoding_max_cached_requests)",
        low=0)
    suffix_max_spec_factor: float = own_knob(
        "suffix", "float", 1.0, "draft at most factor × match length tokens "
        "(vLLM suffix_decoding_max_spec_factor)", low=0.0)
    suffix_min_token_prob: float = own_knob(
        "suffix", "float", 0.1, "draft only tokens whose frequency estimate is "
        "at least this (vLLM suffix_decoding_min_token_prob)", low=0.0, high=1.0)
    # sa: TensorRT-LLM's SADecodingConfig.max_matching_ngram_size.
    sa_max_matching_ngram_size: int = own_knob(
        "sa", "int", -1,
        "`sa`: the longest suffix matched (-1 = the longest repeated suffix; TensorRT-LLM "
        "max_matching_ngram_size)", low=-1)
    # sglang_ngram: SGLang's speculative_ngram_* fields (python/sglang/srt/arg_groups/
    # fields/spec.py L252-275, PROVENANCE["sglang"]); its `k` is num_draft_tokens - 1.
    sglang_ngram_max_trie_depth: int = own_knob(
        "sglang_ngram", "int", 18, "suffixes matched and inserted, up to this "
        "many tokens (SGLang speculative_ngram_max_trie_depth)", low=2)
    sglang_ngram_min_bfs_breadth: int = own_knob(
        "sglang_ngram", "int", 1, "BFS children taken per node at the longest "
        "match (SGLang speculative_ngram_min_bfs_breadth)", low=1)
    sglang_ngram_max_bfs_breadth: int = own_knob(
        "sglang_ngram", "int", 10, "BFS children per node at a one-token match; "
        "PROB: children weighed per node (SGLang speculative_ngram_max_bfs_breadth)", low=1)
    sglang_ngram_match_type: str = own_knob(
        "sglang_ngram", "str", "BFS", "draft tree by recency (BFS) or by frequency "
        "(PROB) (SGLang speculative_ngram_match_type)", choices=("BFS", "PROB"))
    sglang_ngram_capacity: int = own_knob(
        "sglang_ngram", "int", 10_000_000, "trie nodes kept, least recently used evicted "
        "(SGLang speculative_ngram_capacity)", low=2)
    # llama_ngram: llama-server's model-free drafters (common/common.h L357-368,
    # common/arg.cpp L4283-4405, PROVENANCE["llama_server"]); `k` is each type's draft cap.
    llama_spec_type: str = own_knob(
        "llama_ngram", "str", "ngram-simple", "llama-server --spec-type: one of "
        "ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache, or a comma "
        "chain (the server tries them in its fixed order)")
    llama_ngram_size_n: int = own_knob(
        "llama_ngram", "int", 12, "n-gram looked up by ngram-simple / -map-k / "
        "-map-k4v (--spec-ngram-*-size-n)", low=1)
    llama_ngram_min_hits: int = own_knob(
        "llama_ngram", "int", 1, "ngram-map-k4v: lookups of a key before it "
        "drafts (--spec-ngram-map-k4v-min-hits)", low=1)
    llama_ngram_mod_n_match: int = own_knob(
        "llama_ngram", "int", 24, "ngram-mod: tokens hashed per lookup "
        "(--spec-ngram-mod-n-match)", low=1)
    llama_ngram_mod_n_min: int = own_knob(
        "llama_ngram", "int", 48, "ngram-mod: a draft shorter than this is "
        "dropped (--spec-ngram-mod-n-min)", low=0)
    # llama_draft: llama-server's draft-simple (common/arg.cpp L4150-4213, common/common.h
    # L328-333); `k` is --spec-draft-n-max.
    llama_draft_n_min: int = own_knob(
        "llama_draft", "int", 0, "draft-simple: a draft shorter than this is "
        "dropped (--spec-draft-n-min)", low=0)
    llama_draft_p_min: float = own_knob(
        "llama_draft", "float", 0.0, "draft-simple: drafting stops at a token whose "
        "draft probability (over the draft's top 10) is below this (--spec-draft-p-min)",
        low=0.0, high=1.0)
    verify: str = field(default="token", metadata=knob(
        "str", DRAFTING, "how a sampled chain is verified: `token` (token-by-token "
        "rejection sampling) or `block` (block verification, Sun et al. 2024: vLLM "
        "`rejection_sample_method`, SGLang `speculative_use_block_verification`); greedy "
        "decoding is unchanged", choices=VERIFY_RULES))
    drafter: str = field(default=GENERAL_DRAFTER, metadata=knob(
        "str", DRAFT,
        "which member of a per-category `--draft` folder drafts: `all` (the drafter "
        "trained on every category), a category's specialist, or `routed` (each prompt "
        "its own category's specialist, `all` where it has none)"))
    temperature: float = field(default=0.0, metadata=knob(
        "float", WORKLOAD, "0 = greedy; sampling uses Leviathan rejection sampling", low=0.0))
    top_p: float = field(default=1.0, metadata=knob(
        "float", WORKLOAD, "nucleus mass kept when sampling (0 excluded)", low=0.0, high=1.0))
    concurrency: int = field(default=1, metadata=knob(
        "int", WORKLOAD, "requests served side by side: llama-server's `-np` slots, each "
        "timed request beside that many minus one others (`search --concurrency`; "
        "llama_server only)", low=1))
    engine: str = field(default="autotune", metadata=knob(
        "str", WORKLOAD, "whose drafting and verification rules the decoder follows "
        "(`search --target`): `autotune`, `vllm`, `sglang`, `trtllm`, `hf`, `llama_server`; "
        "`vllm_v1`: vLLM's Model Runner V1, which a vLLM search on a CPU measures under",
        choices=tuple(RULES)))
    # Draft trees (EAGLE-2's dynamic tree, or a static one). tree_width 0 and no
    # tree_choices = a chain of up to k tokens under the exit policy.
    tree_width: int = field(default=0, metadata=knob(
        "int", SHAPE, "children expanded per node, EAGLE-2's top-k (0 = a chain)", low=0))
    tree_depth: int = field(default=0, metadata=knob(
        "int", SHAPE, "levels drafted (draft passes per round)", low=0))
    tree_tokens: int = field(default=0, metadata=knob(
        "int", SHAPE, "nodes kept after the rerank by cumulative draft probability "
        "(0 = all)", low=0))
    tree_choices: tuple[tuple[int, ...], ...] = field(default=(), metadata=knob(
        "paths", SHAPE, "a static tree as paths of child ranks, e.g. `0;1;0,0`", low=0))

    @property
    def is_tree(self) -> bool:
        return self.tree_width > 0 or bool(self.tree_choices)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def shape(self) -> DraftShape:
        """What one round drafts: a chain, a dynamic tree or a static tree."""
        return DraftShape.of(self)

    def to_dict(self) -> dict[str, Any]:
        """Canonical keys and JSON-ready values (lists for sets)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = _to_json(value)
        return out

    def validate(self, n_layers: int | None = None) -> "DecodeConfig":
        """Raise AutotuneError on the first bad value; `n_layers` enables layer checks.

        The shared knobs are checked here; a method's own keys by the methods: every
        method's `check_every_config` (rules that hold under any method), then this
        config's method's scalar bounds and choices and its `check`; last, layer-valued
        keys against `n_layers`, by their kind."""
        spec = get_method(self.method)             # "method='x' is not one of ..."
        choices = KNOBS["exit_policy"].choices or ()
        if self.exit_policy not in choices:
            raise AutotuneError(
                f"exit_policy={self.exit_policy!r} is not one of {', '.join(choices)}")
        engines = KNOBS["engine"].choices or ()
        if (retired := retirement(self.engine)) is not None:
            raise AutotuneError(f"engine: {retired}")
        if self.engine not in engines:
            raise AutotuneError(f"engine={self.engine!r} is not one of {', '.join(engines)}")
        self._validate_verify()
        for name in ("k", "gamma", "target_acceptance", "beta1", "beta2", "top_p"):
            self._check_bounds(name)
        if self.top_p == 0.0:
            raise AutotuneError("top_p=0 keeps no token; use temperature=0 for greedy")
        for name in ("epsilon", "temperature", "concurrency"):
            self._check_bounds(name)
        if not DRAFTER_NAME.fullmatch(self.drafter):
            raise AutotuneError(f"drafter={self.drafter!r} must be all, routed or a "
                                "category name (letters, digits, _ and -)")
        for other in all_methods():
            if other.check_every_config is not None:
                other.check_every_config(self, n_layers)
        # A method that cannot draft a tree says first what it takes instead (its rules
        # name the tree knobs it refuses); a tree-capable method's rules follow the shape's.
        if spec.can_tree:
            self._validate_tree()
            self._check_method(spec, n_layers)
        else:
            self._check_method(spec, n_layers)
            self._validate_tree()
        if n_layers is not None:
            self._check_layers(n_layers)
        return self

    def _validate_verify(self) -> None:
        """`verify=block` needs a chain (a tree has its own multi-candidate rule) and an
        engine that runs block verification (greedy configs ignore it)."""
        if self.verify not in VERIFY_RULES:
            raise AutotuneError(f"verify={self.verify!r} is not one of "
                                f"{', '.join(VERIFY_RULES)}")
        if self.verify != "block":
            return
        if self.is_tree:
            raise AutotuneError("verify=block verifies a chain; a draft tree is verified "
                                "by its own multi-candidate rule: use verify=token")
        rules = RULES[self.engine]
        if not rules.block_verification:
            raise AutotuneError(f"verify=block: {rules.label} does not run block "
                                "verification; use verify=token")

    def _check_method(self, spec: MethodSpec, n_layers: int | None) -> None:
        """This config's method's own keys: its scalars' bounds and choices, its rules."""
        check_knobs(self, *(name for name, knob_ in KNOBS.items()
                            if knob_.methods[:1] == (spec.name,)
                            and knob_.kind in SCALAR_KINDS))
        if spec.check is not None:
            spec.check(self, n_layers)

    def _check_layers(self, n_layers: int) -> None:
        """Layer-valued knobs inside a stack of `n_layers`, whatever the method (a frozen
        config carries every key): a layer set's indices (`int_set`: skip sets) in
        0..n-1, a list of exit depths (`int_list`) ending at n at most."""
        for name, knob_ in KNOBS.items():
            values = getattr(self, name)
            if knob_.kind == "int_set":
                bad = [i for i in values if not 0 <= i < n_layers]
                if bad:
                    raise AutotuneError(f"{name} has layer(s) {bad} outside "
                                        f"0..{n_layers - 1} of this model")
            elif knob_.kind == "int_list" and values and values[-1] > n_layers:
                raise AutotuneError(
                    f"{name}={list(values)} goes past the draft stack's {n_layers} layers")

    def _check_bounds(self, name: str) -> None:
        """The bounds of a scalar knob, as its metadata (`KNOBS[name].low/high`) gives them."""
        check_bounds(name, getattr(self, name), KNOBS[name].low, KNOBS[name].high)

    def _validate_tree(self) -> None:
        for name in ("tree_width", "tree_depth", "tree_tokens"):
            self._check_bounds(name)
        if not self.is_tree:
            if self.tree_depth or self.tree_tokens:
                raise AutotuneError("tree_depth and tree_tokens need tree_width >= 1 "
                                    "(or a static tree in tree_choices)")
            return
        if not get_method(self.method).can_tree:
            raise AutotuneError(
                f"method={self.method} cannot draft a tree: a tree ranks children by the "
                f"draft's probabilities, which only {', '.join(tree_method_names())} give")
        if self.exit_policy != "fixed":
            raise AutotuneError(f"exit_policy={self.exit_policy} does not apply to a tree, "
                                "whose shape is set by tree_width/tree_depth/tree_tokens: "
                                "use exit_policy=fixed")
        if self.tree_choices:
            if self.tree_width or self.tree_depth or self.tree_tokens:
                raise AutotuneError("give either tree_choices (a static tree) or "
                                    "tree_width/tree_depth/tree_tokens (a dynamic one), "
                                    "not both")
            check_choices(self.tree_choices)
            return
        if self.tree_depth < 1:
            raise AutotuneError(f"tree_width={self.tree_width} needs tree_depth >= 1")
        shape = self.shape
        if shape.tree_nodes > MAX_TREE_NODES:
            raise AutotuneError(
                f"a tree of width {self.tree_width} and depth {self.tree_depth} drafts "
                f"{shape.pool_size} nodes: set tree_tokens <= {MAX_TREE_NODES}")

    def exit_thresholds(self) -> tuple[float, ...]:
        """One threshold per exit; missing entries are 0 (always emit), deepest ignored."""
        padded = tuple(self.thresholds) + (0.0,) * (len(self.exits) - len(self.thresholds))
        return padded[: len(self.exits)]


def check_choices(choices: tuple[tuple[int, ...], ...]) -> None:
    """A static tree: non-empty, distinct paths of child ranks >= 0, closed under
    prefixes (every path's parent path is listed too), at most MAX_TREE_NODES."""
    if len(choices) > MAX_TREE_NODES:
        raise AutotuneError(f"tree_choices has {len(choices)} paths; at most "
                            f"{MAX_TREE_NODES} fit one verify pass")
    seen = set(choices)
    if len(seen) != len(choices):
        raise AutotuneError("tree_choices lists a path twice")
    for path in choices:
        if not path or any(rank < 0 for rank in path):
            raise AutotuneError(f"tree_choices path {list(path)} must be a non-empty list "
                                "of child ranks >= 0")
        if len(path) > 1 and path[:-1] not in seen:
            raise AutotuneError(f"tree_choices path {list(path)} has no parent path "
                                f"{list(path[:-1])}: list every prefix")


def _to_json(value: Any) -> Any:
    return [_to_json(v) for v in value] if isinstance(value, tuple) else value


def _parse_choices(value: Any) -> tuple[tuple[int, ...], ...]:
    """`[[0], [0, 0], [1]]` (JSON or YAML) or the CLI form `0;0,0;1`."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = json.loads(text)
        else:
            value = [[v for v in part.split(",") if v.strip()]
                     for part in text.split(";") if part.strip()]
    if not isinstance(value, (list, tuple)):
        raise ValueError
    paths = []
    for path in value:
        if not isinstance(path, (list, tuple)):
            raise ValueError
        ranks = []
        for rank in path:
            if isinstance(rank, bool) or (isinstance(rank, float) and not rank.is_integer()):
                raise ValueError
            ranks.append(int(rank))
        paths.append(tuple(ranks))
    return tuple(paths)


# Every knob's metadata, in field order: the one source of types, bounds, owners, docs.
KNOBS: dict[str, Knob] = {f.name: f.metadata[KNOB_METADATA_KEY]
                          for f in dataclasses.fields(DecodeConfig)}
# What a value of each knob kind must look like, for the one-line coercion error.
_EXPECTED = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "int_set": "a comma-separated list of integers",
    "int_list": "a comma-separated list of integers",
    "float_list": "a comma-separated list of numbers",
    "paths": "a list of paths like [[0], [0, 0], [1]] or 0;0,0;1",
}


def check_knobs(config: DecodeConfig, *names: str) -> None:
    """The bounds and choices of `config`'s values of these scalar knobs, in order (a
    method's checks call it for keys it checks whatever a config's method is)."""
    for name in names:
        knob_, value = KNOBS[name], getattr(config, name)
        if knob_.choices is not None and value not in knob_.choices:
            raise AutotuneError(f"{name}={value!r} is not one of {', '.join(knob_.choices)}")
        if knob_.kind in ("int", "float"):
            check_bounds(name, value, knob_.low, knob_.high)


def own_keys(method: MethodSpec | str) -> tuple[str, ...]:
    """The config keys only `method` reads: the DecodeConfig fields whose knob metadata
    names it as owner (beyond k and the exit policy's)."""
    name = method if isinstance(method, str) else method.name
    return tuple(key for key, knob_ in KNOBS.items() if name in knob_.methods)


def method_keys(method: MethodSpec) -> tuple[str, ...]:
    """The canonical config keys `method` reads (the exit policy's own knobs aside)."""
    return ("k", *own_keys(method), "exit_policy") if method.drafts else ()


def shape_of_mapping(values: Mapping[str, Any]) -> DraftShape | None:
    """The draft shape of a config given as canonical keys (a trial's stored config);
    None when its shape keys do not parse (a hand-edited config)."""
    keys = ("k", "tree_width", "tree_depth", "tree_tokens", "tree_choices")
    try:
        config = config_from_mapping({key: values[key] for key in keys
                                      if values.get(key) is not None})
    except AutotuneError:
        return None
    return DraftShape.of(config)


def _unknown_key(key: str) -> AutotuneError:
    return AutotuneError(f"unknown config key {key!r}{did_you_mean(key, KNOBS, inline=True)}; "
                         f"keys: {', '.join(KNOBS)}")


def _coerce(key: str, value: Any) -> Any:
    """Turn a CLI string or a file value into the field's type (by its knob's kind), or
    raise one clear line."""
    kind = KNOBS[key].kind
    try:
        if kind == "paths":
            return _parse_choices(value)
        if kind in ("int_set", "int_list", "float_list"):
            return _coerce_list(kind, value)
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind == "str":
            if not isinstance(value, str):
                raise ValueError
            return value.strip()
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise AutotuneError(f"bad value for {key}: {value!r} is not {_EXPECTED[kind]}") from None


def _coerce_list(kind: str, value: Any) -> tuple[Any, ...]:
    """`"1, 2"`, `[1, 2]` or `1` -> a tuple of ints or floats; a set (int_set) comes
    back sorted without repeats. Raises ValueError or TypeError on anything else."""
    cast = float if kind == "float_list" else int
    if isinstance(value, str):
        items = [v for v in value.replace(" ", "").split(",") if v != ""]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        items = [value]
    else:
        raise ValueError
    if cast is int and any(isinstance(v, float) and not v.is_integer() for v in items):
        raise ValueError
    values = tuple(cast(v) for v in items)
    return tuple(sorted(set(values))) if kind == "int_set" else values


def config_from_mapping(values: Mapping[str, Any], base: DecodeConfig | None = None) -> DecodeConfig:
    """Overlay `values` (canonical keys) on `base` (defaults when None)."""
    updates = {}
    for key, value in values.items():
        if key not in KNOBS:
            raise _unknown_key(str(key))
        updates[key] = _coerce(key, value)
    return dataclasses.replace(base or DecodeConfig(), **updates)


def parse_assignments(assignments: list[str]) -> dict[str, str]:
    """`["k=4", "attn_skip=12,17"]` -> `{"k": "4", "attn_skip": "12,17"}`."""
    out: dict[str, str] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AutotuneError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def load_config_file(path: str | Path, allow_list: bool = False) -> Any:
    """Read a JSON or YAML mapping of config keys; a top-level `params` mapping (an
    exported frozen config) is used when present. `allow_list` also accepts a list of
    such mappings (returned as is, for `--enqueue`)."""
    path = Path(path)
    if not path.is_file():
        raise AutotuneError(f"config file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise AutotuneError(f"cannot read config file {path}: {first}") from None
    if isinstance(data, dict) and isinstance(data.get("params"), dict):
        data = data["params"]
    if allow_list and isinstance(data, list):
        return data
    if not isinstance(data, dict):
        raise AutotuneError(f"config file {path} must hold a mapping of config keys")
    return data
