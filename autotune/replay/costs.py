"""The replay tier's cost model: predicted time of a round from measured parts only.

Prediction per round: the drafter's passes + the target's pass over the verified tokens
+ the loop's overhead. The drafter's passes are the method's own (`MethodSpec.draft_cost`,
a `DraftCost` in its package's replay.py, which says how its passes add up). Latency
per token = the rounds' sum ÷ the tokens decoded, as a measurement counts it.

The parts (`CostParts`: the target's pass curve, the loop's overhead, the sublayers,
the draft's curve, a tree's costs, a trained head's passes, each method's calibration)
are measured by `replay/parts.py` and kept, with the key of the models and machine they
were measured on (`parts_key`, `stored_parts`), in the replay cache's file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter
from typing_extensions import TypedDict       # pydantic reads typing's only from 3.12

from autotune.schema.methods import get_method
from autotune.replay.draft_cost import DraftCost, HeadParts
from autotune.replay.effort import FULL
from autotune.replay.simulate import ReplayRound

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig
    from autotune.models.loading import LoadedModel

FORMAT = "autotune.replay-costs/v4"


@dataclass
class LayerParts:
    """A one-token pass of a layer stack, in ms: `base` (embedding + final norm + head),
    `attn`/`mlp` one sublayer, `kv` one layer's k/v fill (CALM propagation), `head` the
    final norm + head alone, `choose` softmax + top-1 over the logits."""

    layers: int
    base: float
    attn: float
    mlp: float
    kv: float
    head: float
    choose: float

    def skip_pass(self, n_attn_skipped: int, n_mlp_skipped: int) -> float:
        return (self.base + (self.layers - n_attn_skipped) * self.attn
                + (self.layers - n_mlp_skipped) * self.mlp + self.choose)

    def run_share(self, attn_layers: int, mlp_layers: int) -> float:
        """The share of a one-token pass (embedding + head + every sublayer) that a pass
        running `attn_layers` attention and `mlp_layers` MLP sublayers runs; 0 where no
        sublayer cost was measured (a forward without layer access)."""
        full = self.base + self.layers * (self.attn + self.mlp)
        if full <= 0:
            return 0.0
        return min((self.base + attn_layers * self.attn + mlp_layers * self.mlp) / full, 1.0)

    def exit_pass(self, exit_layer: int, exits_reached: int, depth: int) -> float:
        """A token run to `exit_layer`, scored at `exits_reached` exits, its k/v filled
        up to `depth`."""
        embed = max(self.base - self.head, 0.0)
        return (embed + exit_layer * (self.attn + self.mlp)
                + exits_reached * (self.head + self.choose) + (depth - exit_layer) * self.kv)


class PartsKey(TypedDict, total=False):
    """What parts were measured for (`parts_key`): the models, the device and dtype, the
    threads and CPU; the workload's median context and token budget (`load_or_measure_parts`);
    a trained --draft's kind (only then: files measured without one have no such key).
    Stored parts are reused when their key agrees with the one wanted on every entry the
    wanted one names."""

    target: str
    draft: str | None
    device: str
    dtype: str
    threads: int
    cpu: str | None
    device_name: str | None
    drafter: str
    context: int
    max_new_tokens: int


@dataclass
class CostParts:
    """Every measured part, in ms (see the module docstring)."""

    format: str
    key: PartsKey
    target_curve: list[list[float]]       # [[tokens, ms], ...] after calibration
    ar_other: float                       # an AR round beyond its target pass
    spec_other: float                     # a speculative chain round's bookkeeping
    ngram_lookup: float                   # an n-gram lookup (one per round)
    tree_node: float                      # tree bookkeeping per drafted node
    tree_other: float                     # a tree round's verify-side bookkeeping per node
    tree_verify_factor: float             # a tree-masked verify pass ÷ a chain's of that size
    target_layers: LayerParts
    draft_curve: list[list[float]] | None
    draft_layers: LayerParts | None
    # In-loop factors (measured ÷ modelled, from the real decoder's rounds): a pass inside
    # the decoder loop runs slower than the same pass timed back to back (caches, the
    # Python between passes); per method for the drafter's passes.
    draft_factor: dict[str, float]
    # A trained --draft's passes (None without one; files written before trained heads
    # have no such key and read as None).
    head: HeadParts | None = None
    # Parts only one method's drafting has, in ms by the name its `DraftCost.loop_parts`
    # gives them (absent where its method could not run when the parts were measured).
    method_parts: dict[str, float] = field(default_factory=dict)
    # The level they were measured at (`replay.effort`; files written before it: full).
    effort: str = FULL.name

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "CostParts":
        """A stored file's parts (older layouts upgraded); ValueError (pydantic's) or
        TypeError when the document does not hold them."""
        return _COST_PARTS.validate_python(_upgrade(doc))


def _upgrade(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored document in this version's layout. Files written before `method_parts`
    kept a method's part as a key of its own at the top level: such keys are read into
    `method_parts`, so those parts need no new measuring. (Keys added since, `head` and
    `effort`, read as their defaults where absent.)"""
    if not isinstance(doc, dict):
        raise TypeError("replay cost parts are a mapping")
    known = {f.name for f in fields(CostParts)}
    legacy = {key: value for key, value in doc.items() if key not in known}
    current = {key: value for key, value in doc.items() if key in known}
    current["method_parts"] = {
        **{key: float(value) for key, value in legacy.items()
           if isinstance(value, (int, float)) and not isinstance(value, bool)},
        **(current.pop("method_parts", None) or {})}
    return current


# Reads a document into CostParts with its LayerParts/HeadParts (pydantic over the
# dataclasses: what does not fit is a ValueError).
_COST_PARTS: TypeAdapter[CostParts] = TypeAdapter(CostParts)


def interpolate(curve: list[list[float]], n: float) -> float:
    """Piecewise-linear ms at n tokens; straight on past either end."""
    points = sorted((float(a), float(b)) for a, b in curve)
    if len(points) == 1:
        return points[0][1] * n / points[0][0]
    if n <= points[0][0]:
        (x0, y0), (x1, y1) = points[0], points[1]
    elif n >= points[-1][0]:
        (x0, y0), (x1, y1) = points[-2], points[-1]
    else:
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x0 <= n <= x1:
                break
    return y0 + (y1 - y0) * (n - x0) / (x1 - x0) if x1 != x0 else y0


class CostModel:
    """Predicted seconds of replayed rounds for one config: the target's passes and the
    loop's overhead from the parts; the drafting from the method's own `DraftCost`
    (`MethodSpec.draft_cost`, draft_cost.py)."""

    def __init__(self, parts: CostParts, config: "DecodeConfig", n_layers: int) -> None:
        self.parts, self.config = parts, config
        self.method = config.method
        self.n_layers = n_layers
        cost = get_method(config.method).draft_cost_class()
        self.drafting: DraftCost = (cost if cost is not None else DraftCost)(self)

    def target(self, tokens: int) -> float:
        return interpolate(self.parts.target_curve, tokens)

    def ratio(self, tokens: int) -> float:
        """A T-token pass's cost relative to a one-token pass (tree levels)."""
        return self.target(tokens) / self.target(1)

    def draft_seconds(self, r: ReplayRound) -> float:
        """Predicted seconds of round r's drafting (none when it drafted nothing)."""
        if r.drafted == 0 and not r.passes:
            return 0.0
        return self.drafting.round_ms(r) / 1000

    def draft_floor_seconds(self, r: ReplayRound) -> float:
        """The least round r's drafting can cost: the target's measured one-token pass,
        scaled to the share of its layers each draft pass runs (`DraftCost.floor_round_ms`;
        0 for drafters that run none of the target's layers)."""
        if r.drafted == 0 and not r.passes:
            return 0.0
        return self.drafting.floor_round_ms(r) / 1000

    def round_seconds(self, r: ReplayRound) -> tuple[float, float, float]:
        """(draft, verify, other) predicted seconds of one round."""
        verify = self.target(r.verified)
        if self.config.is_tree or get_method(self.config.method).own_trees:
            other = self.parts.spec_other + self.parts.tree_other * r.drafted
            verify *= self.parts.tree_verify_factor
        else:
            other = self.parts.spec_other if r.drafted else self.parts.ar_other
        return self.draft_seconds(r), verify / 1000, other / 1000

    def ar_round_seconds(self) -> tuple[float, float]:
        """(verify, other) of one AR round."""
        return self.target(1) / 1000, self.parts.ar_other / 1000

    def prefill_seconds(self, prompt_tokens: int) -> float:
        return self.target(prompt_tokens) / 1000


# ------------------------------------------------------------------ measuring the parts


def parts_key(target: "LoadedModel", draft: "LoadedModel | None") -> PartsKey:
    import torch

    from autotune.frozen.environment import hardware_record
    from autotune.models.fingerprint import model_fingerprint

    hardware = hardware_record(target.device)
    key = PartsKey(target=model_fingerprint(target),
                   draft=model_fingerprint(draft) if draft is not None else None,
                   device=str(target.device), dtype=str(target.dtype),
                   threads=torch.get_num_threads(),
                   cpu=hardware["cpu"], device_name=hardware["device_name"])
    # A trained head's parts are its own passes, not a draft model's: the key says which
    # drafter (added only then, so the keys of files measured without one still match).
    if draft is not None and draft.trained_kind is not None:
        key["drafter"] = draft.trained_kind
    return key


def stored_parts(path: Path, wanted: PartsKey) -> CostParts | None:
    """The parts at `path` when their key agrees with `wanted` on every entry it names
    (`parts_key` alone: these models on this machine, at whatever context; another
    workload's parts then price this one's passes, with the error a predictor may
    have); None when absent, unreadable or made for something else."""
    try:
        parts = CostParts.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):       # pydantic's ValidationError is one
        return None
    agree = all(parts.key.get(key) == value for key, value in wanted.items())
    return parts if parts.format == FORMAT and agree else None
