"""Shared pieces of the exporters: a frozen config as a Source, model references, losses.

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
`DraftShape.chain_length` gives and every chain export uses in place of k.

Engine rules (`rules_loss`): every config records the engine whose drafting and
verification rules it was measured under (DecodeConfig's `engine`, set by `search
--target`; autotune/schema/engines.py). Each format runs its engine's rules (vllm,
sglang, trtllm, hf, llama_server; Draft & Verify's repository drafts as autotune does).
Where the measured rules differ from the format's in a rule that matters to the config
(`engines.relevant`), the figures were measured on a decoder the engine is not, and the
export is a (non-fatal) loss labelled `engine=<measured>`.

Every format module also has `launch(src, files) -> str`: the Markdown section of
`exports/launch.md` that starts the engine with its files (`request_parameters` is the
shared line for the tuned sampling, a request parameter of every server).

Per-batch-size K (a frozen config's optional `schedule`; `Source.schedule`):
the search measured which K the method runs at each batch size (K = 0: not at all).
vLLM, TensorRT-LLM and SGLang (EAGLE chains only) take such a schedule (their modules
say how and with what limits); elsewhere it is a loss. A schedule that never speculates is
refused before any format is asked (`autotune.runs.exports_folder.refusal_reason`).
`schedule_paragraph` is the shared launch.md text: which batch sizes were measured and
what the engine does beyond the largest one.

Nothing here names a method: what a method reads, whether it needs a draft model, whose
layers it indexes and whether its drafts are always confident come from the method
registry (`autotune.schema.methods`), a tree's numbers from `DraftShape`. Which methods
an engine runs is engine knowledge, kept in each format module (`engine_methods`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from autotune.common.errors import AutotuneError
from autotune.schema.config import KNOBS, ROUTED_DRAFTER, DecodeConfig, own_keys
from autotune.schema.engines import describe_rule, differences, engine_rules, relevant
from autotune.schema.methods import MethodSpec, get_method
from autotune.schema.shape import STATIC, DraftShape
from autotune.frozen.checks import read_parts
from autotune.frozen.record import FrozenConfig, ModelRecord
from autotune.frozen.schedule import Schedule


def engine_methods(*names: str) -> tuple[str, ...]:
    """The methods an engine runs, by registry name. A name the registry does not know
    fails on import, so a renamed method cannot silently drop out of an exporter."""
    for name in names:
        get_method(name)
    return names


def method_knobs(spec: MethodSpec) -> tuple[str, ...]:
    """What goes missing with a method an engine cannot run: the keys only it reads, and
    the draft model when it needs one (an error line names them all)."""
    return own_keys(spec) + (("draft",) if spec.needs_draft else ())


def policy_knobs(policy: str) -> tuple[str, ...]:
    """The knobs exit policy `policy` reads (`adaptive`: gamma, target_acceptance, epsilon,
    beta1, beta2), from the knobs' metadata."""
    return tuple(name for name, knob in KNOBS.items() if policy in knob.policies)


@dataclass(frozen=True)
class ExportOptions:
    """Settings of an export that are not knobs: `draft_tensor_parallel_size` (vLLM's
    draft model's tensor parallelism; ignored elsewhere)."""

    draft_tensor_parallel_size: int | None = None

    def __post_init__(self) -> None:
        tp = self.draft_tensor_parallel_size
        if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp < 1):
            raise AutotuneError(f"draft_tensor_parallel_size={tp!r} must be an integer >= 1")


@dataclass(frozen=True)
class Source:
    """What an exporter needs from a frozen config: the validated knobs and model names."""

    cfg: DecodeConfig
    target: str              # how an engine should name the target model
    draft: str | None        # same for the draft model; None when there is none
    model_id: str            # the target's short id (a key in Draft & Verify's file)
    # The target as the user named it (`default`, a .gguf file, a folder, a hub id):
    # llama.cpp loads the GGUF itself, not the folder `target` names. None: unknown.
    target_spec: str | None = None
    # K per batch size for this method (None: tuned at batch size 1 only).
    schedule: Schedule | None = None

    @property
    def spec(self) -> MethodSpec:
        """The registry's description of the config's method."""
        return get_method(self.cfg.method)

    @property
    def shape(self) -> DraftShape:
        """What one round drafts: a chain, a dynamic or a static tree."""
        return self.cfg.shape


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
            # A knob by its name (a loss lists them); "draft" names the draft model.
            value = getattr(cfg, name) if name in KNOBS else None
            shown = _show(value) if value is not None else "(set)"
            out.append(f"{name}={shown}: dropped with {self.label}")
        return out


def _show(value: Any) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)


def model_ref(model: ModelRecord, role: str) -> str:
    """The name an engine loads: the user's spec, unless it is our built-in `default` or a
    .gguf file (engines want an HF folder), in which case the local folder we read."""
    spec, path = model.spec, model.path
    if spec and spec != "default" and not spec.lower().endswith(".gguf"):
        return spec
    if path:
        return path
    raise AutotuneError(f"frozen config's {role} model has neither a usable spec nor a path")


# A per-category drafter folder (`train-draft --per-category`): its index names each
# member's sub-folder (models/trained.py writes it; read here without torch).
DRAFTER_SET_FILE = "drafters.json"


def member_draft(draft: str | None, drafter: str) -> str | None:
    """The draft an engine loads for `drafter`: the named member's folder when `draft`
    is a per-category folder, else `draft` itself (`routed` keeps the folder: no
    single member serves it, `routing_loss` names that)."""
    if draft is None or drafter == ROUTED_DRAFTER:
        return draft
    index = Path(draft).expanduser() / DRAFTER_SET_FILE
    if not index.is_file():
        return draft
    try:
        members = json.loads(index.read_text(encoding="utf-8"))["members"]
        return str(Path(draft) / members[drafter])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AutotuneError(f"{index} names no member {drafter!r} "
                            f"({type(exc).__name__})") from None


def routing_loss(src: Source) -> Loss | None:
    """`drafter=routed`: each category's prompts draft with their own specialist. No
    engine routes requests to drafters by category; every one loads one draft per
    server, so the routed answer is one server per category, each exported from a
    config with `drafter=<category>`."""
    if src.cfg.drafter != ROUTED_DRAFTER or not src.spec.uses_draft:
        return None
    why = ("engines load one draft per server: export a config with drafter=<category> "
           "per category and route each category's requests to its own server")
    return Loss("drafter=routed", ("draft",), why, fatal=True, note=why)


def read_frozen(frozen: FrozenConfig | Mapping[str, Any]) -> Source:
    """A frozen config (a record, or a document: `autotune.frozen.checks.read_parts`
    checks it) as a Source; an engine also needs the target model's record."""
    parts = read_parts(frozen)
    model, draft = parts.model, parts.draft
    if model is None:
        raise AutotuneError("frozen config has no 'model' mapping")
    return Source(
        cfg=parts.config,
        target=model_ref(model, "target"),
        draft=(member_draft(model_ref(draft, "draft"), parts.config.drafter)
               if draft is not None else None),
        model_id=model.id or model_ref(model, "target"),
        target_spec=model.spec,
        schedule=parts.schedule,
    )


def effective_policy(src: Source) -> str:
    """The exit policy that actually shapes the drafts. A method whose drafts always carry
    confidence 1.0 (n-gram lookups) is never stopped by a confidence threshold (at most 1):
    that policy is `fixed`."""
    if src.spec.confident_drafts and src.cfg.exit_policy == "confidence":
        return "fixed"
    return src.cfg.exit_policy


def method_loss(src: Source, supported: tuple[str, ...], why: str,
                heads: str | None = None) -> Loss | None:
    """A fatal loss when the engine has no equivalent of the method (any method not in
    `supported`, a registered one the engine has never heard of included). `heads`:
    the reason given for a trained head (EAGLE, Medusa) instead of `why`."""
    if src.cfg.method in supported:
        return None
    if heads is not None and src.spec.reads_target_features:
        why = heads
    return Loss(f"method={src.cfg.method}", method_knobs(src.spec), why, fatal=True)


def fixed_k_policy_loss(src: Source, engine: str) -> Loss | None:
    """For engines that always draft a fixed K: any other policy is dropped."""
    policy = effective_policy(src)
    if policy == "fixed":
        return None
    return Loss(f"exit_policy={policy}", policy_knobs(policy),
                f"{engine} drafts a fixed number of tokens every round; exported as "
                f"fixed k={src.cfg.k}")


# The error line's note for a static tree: the alternatives cannot name a format for it.
STATIC_TREE_NOTE = ("no export format takes a static tree (tree_choices) for this method: "
                    "engines take one only for EAGLE/Medusa heads, e.g. TensorRT-LLM's "
                    "eagle_choices")


def chain_only_tree_loss(src: Source, why: str) -> Loss | None:
    """For engines that draft only chains: a tree of more than one path is dropped to its
    best path, a chain of `chain_length` tokens. `why` says what the engine lacks."""
    shape = src.shape
    if not shape.is_tree or shape.one_path:
        return None
    label, knobs = shape.loss_label()
    return Loss(label, knobs,
                f"{why}; exported as a chain of {shape.chain_length} tokens, the tree's depth "
                "(its best path)",
                note=STATIC_TREE_NOTE if shape.kind == STATIC else "")


def rules_loss(src: Source, engine: str) -> Loss | None:
    """A loss when `src` was measured under rules other than `engine`'s, in a rule that
    changes what the config does: model_drafter = the method drafts with a model (not
    lookups, not the baseline), separate_draft = it needs a separate draft model."""
    cfg, spec = src.cfg, src.spec
    measured, rules = engine_rules(cfg.engine), engine_rules(engine)
    if cfg.verify == "block" and not cfg.greedy and not rules.block_verification:
        # Measured with block verification, which this engine does not run: it verifies
        # the same drafts token by token (or by match) and accepts fewer of them.
        return Loss("verify=block", (),
                    f"{rules.label} has no block verification; it verifies sampled drafts "
                    "its own way, which accepts fewer tokens than measured")
    if measured.family == rules.family:
        # Another runner of the same engine (vLLM's V1 beside its default V2): the
        # export's launch notes name the runner its figures hold for.
        return None
    names = relevant(cfg.method, cfg.greedy, cfg.exit_policy,
                     model_drafter=spec.drafts and not spec.confident_drafts,
                     separate_draft=spec.needs_draft, model_free=spec.model_free)
    diff = differences(measured, rules, names)
    if not diff:
        return None
    told = "; ".join(f"{describe_rule(measured, name)}; {describe_rule(rules, name)}"
                     for name in diff)
    advice = search_advice(engine)
    return Loss(f"engine={cfg.engine}", (),
                f"measured with {measured.label}'s rules: {told}; {advice}", note=advice)


def search_advice(engine: str) -> str:
    """`search with --target E to measure it as E runs it`."""
    rules = engine_rules(engine)
    return f"search with --target {rules.name} to measure it as {rules.label} runs it"


def schedule_paragraph(schedule: Schedule, written: str, beyond: str) -> str:
    """The launch.md paragraph of a per-batch-size schedule: what was measured, what
    the engine is given (`written`) and what it does past the largest tuned batch size
    (`beyond`), where nothing was measured."""
    sizes = ", ".join(map(str, schedule.batch_sizes))
    return (f"Per-batch-size K (measured at batch sizes {sizes}; {schedule.describe()}): "
            f"{written}. Beyond batch size {schedule.largest} nothing was measured: "
            f"{beyond}.\n")


def request_parameters(cfg: DecodeConfig) -> str:
    """The launch line for the tuned sampling: a request parameter of the servers
    (OpenAI-style body), not a server flag."""
    if cfg.greedy:
        return ('Requests: greedy: temperature 0 (`{"temperature": 0}` in each '
                "OpenAI-style request body).")
    body = json.dumps({"temperature": cfg.temperature, "top_p": cfg.top_p})
    return (f"Requests: the tuned sampling, `{body}` in each OpenAI-style request body "
            "(a request parameter, not a server flag).")


def fenced(text: str, lang: str = "") -> str:
    """A Markdown code block."""
    return f"```{lang}\n{text.rstrip()}\n```\n"


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2) + "\n"
