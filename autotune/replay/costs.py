"""The replay tier's cost model: predicted time of a round from measured parts only.

Parts (`measure_parts`, all timed with `autotune.measure.measurement.Clock` after a warm-up, the
median of several runs, on this process's threads):
- the target's forward over n tokens (all logits, as a verify pass) after as many
  cached tokens as the workload's rounds see (the hardware profile's curve, made
  monotone), scaled by what the decoder's own AR verify pass measured on its prompts;
- the decoder loop's overhead per round, from the real decoder: an AR run (a round's
  time beyond its target pass) and an n-gram chain run (the bookkeeping of a
  speculative round, and a lookup's cost);
- a one-token pass split into sublayers: embedding + head, one attention sublayer, one
  MLP sublayer, a k/v fill, the head alone and picking a token from the head's logits
  (for skip masks and early exits), for the target and for the draft;
- the draft model's forward by tokens (a separate draft);
- a draft tree's per-node bookkeeping and its tree-masked verify pass against a chain's,
  from real tree rounds of a layer-skip draft;
- a trained head's passes (`HeadParts`, with a trained `--draft`): EAGLE's fc + decoder
  layer by tokens fed, the target's LM head by rows scored, Medusa's residual blocks;
- per drafting method, the decoder's drafting time against the parts' prediction for the
  same rounds (passes inside the loop run slower than back to back).

Prediction per round: the drafter's passes (per method, below) + the target's pass over
the verified tokens + the loop's overhead. EAGLE: a chain's first pass catches up on
the pairs since its last round (the whole prompt in the first round), then one
one-token pass per further draft, each pass = the head's layer over the tokens fed +
the LM head over the last one + picking a token; a tree: the root's catch-up pass, then
one pass per level over the nodes fed (the LM head over all of them). Medusa: one pass
per round (every head's blocks + the LM head over n_heads rows), plus picking each
chain draft. Latency per token = the rounds' sum ÷ the
tokens decoded, as a measurement counts it.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from autotune.common.errors import AutotuneError
from autotune.common.files import write_atomically
from autotune.replay.simulate import OwnCache, ReplayRound

if TYPE_CHECKING:
    from autotune.decoding.config import DecodeConfig
    from autotune.models.loading import LoadedModel
    from autotune.replay.reference import Reference

FORMAT = "autotune.replay-costs/v4"
CURVE_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128)
DRAFT_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
PART_REPEATS = 7


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

    def exit_pass(self, exit_layer: int, exits_reached: int, depth: int) -> float:
        """A token run to `exit_layer`, scored at `exits_reached` exits, its k/v filled
        up to `depth`."""
        embed = max(self.base - self.head, 0.0)
        return (embed + exit_layer * (self.attn + self.mlp)
                + exits_reached * (self.head + self.choose) + (depth - exit_layer) * self.kv)


@dataclass
class HeadParts:
    """A trained head's passes, in ms. kind: "eagle" | "medusa"; layer: EAGLE's fc +
    decoder layer over n pairs after the context's entries, [[n, ms], ...] (empty for
    Medusa); logits: the target's LM head over n features [[n, ms], ...]; blocks:
    Medusa's residual blocks of every head over one feature (0 for EAGLE); n_heads:
    Medusa's heads (the LM head's rows in its one pass)."""

    kind: str
    layer: list[list[float]]
    logits: list[list[float]]
    blocks: float = 0.0
    n_heads: int = 0


HEAD_METHODS = ("eagle", "medusa")


@dataclass
class CostParts:
    """Every measured part, in ms (see the module docstring)."""

    format: str
    key: dict[str, Any]
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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "CostParts":
        doc = dict(doc)
        doc["target_layers"] = LayerParts(**doc["target_layers"])
        if doc.get("draft_layers") is not None:
            doc["draft_layers"] = LayerParts(**doc["draft_layers"])
        if doc.get("head") is not None:
            doc["head"] = HeadParts(**doc["head"])
        return cls(**doc)


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
    """Predicted seconds of replayed rounds for one config."""

    def __init__(self, parts: CostParts, config: "DecodeConfig", n_layers: int) -> None:
        self.parts, self.config = parts, config
        self.method = config.method
        self.n_layers = n_layers

    def target(self, tokens: int) -> float:
        return interpolate(self.parts.target_curve, tokens)

    def _ratio(self, tokens: int) -> float:
        """A T-token pass's cost relative to a one-token pass (tree levels)."""
        return self.target(tokens) / self.target(1)

    def _draft_pass(self, tokens: int, exit_layer: int | None, exits_reached: int) -> float:
        return self._bare_pass(tokens, exit_layer, exits_reached) * \
            self.parts.draft_factor.get(self.method, 1.0)

    def _bare_pass(self, tokens: int, exit_layer: int | None, exits_reached: int) -> float:
        parts, config = self.parts, self.config
        if self.method == "draft_model":
            assert parts.draft_curve is not None
            return interpolate(parts.draft_curve, tokens)
        if self.method == "layer_skip":
            one = parts.target_layers.skip_pass(len(config.attn_skip), len(config.mlp_skip))
            return one * self._ratio(tokens)
        if self.method == "sorted_exit":
            layers = parts.draft_layers if parts.draft_layers is not None else parts.target_layers
            depth = config.exits[-1]
            one = layers.exit_pass(exit_layer if exit_layer is not None else depth,
                                   exits_reached, depth)
            return one * self._ratio(tokens)
        return 0.0

    def _exits_reached(self, exit_layer: int | None) -> int:
        if exit_layer is None:
            return len(self.config.exits)
        return list(self.config.exits).index(exit_layer) + 1 if exit_layer in self.config.exits \
            else len(self.config.exits)

    def draft_seconds(self, r: ReplayRound) -> float:
        if r.drafted == 0 and not r.passes:
            return 0.0
        if self.method == "ngram":
            return self.parts.ngram_lookup / 1000
        if self.method in HEAD_METHODS:
            return self._head_seconds(r) / 1000
        total = 0.0
        if self.config.is_tree:
            if r.catch_up and self.method == "sorted_exit":
                total += self._stack_catch_up(r.catch_up)
            for i, tokens in enumerate(r.passes):
                fed = tokens + (r.catch_up if i == 0 and self.method == "draft_model" else 0)
                total += self._draft_pass(fed, None, len(self.config.exits) or 1)
            total += self.parts.tree_node * r.drafted
            return total / 1000
        for i, tokens in enumerate(r.passes):
            exit_layer = r.exits[i] if i < len(r.exits) else None
            fed = tokens if self.method == "draft_model" else 1
            total += self._draft_pass(fed, exit_layer, self._exits_reached(exit_layer))
        return total / 1000

    def _head_parts(self) -> HeadParts:
        head = self.parts.head
        if head is None or head.kind != self.method:
            raise AutotuneError(f"the replay cost parts have no {self.method} head passes "
                                f"(they were measured without a trained {self.method} "
                                "--draft): delete them to measure again")
        return head

    def _head_seconds(self, r: ReplayRound) -> float:
        """ms of a trained head's drafting in round r (module docstring)."""
        head = self._head_parts()
        factor = self.parts.draft_factor.get(self.method, 1.0)
        choose = self.parts.target_layers.choose
        tree = self.config.is_tree
        nodes = self.parts.tree_node * r.drafted if tree else 0.0
        if self.method == "medusa":
            one = head.blocks + interpolate(head.logits, head.n_heads)
            return one * factor + (nodes if tree else choose * r.drafted * factor)
        total = 0.0
        for i, tokens in enumerate(r.passes):
            if tree:
                # The root pass catches up and scores the pending token; a level's pass
                # scores every node it feeds.
                fed = tokens + r.catch_up if i == 0 else tokens
                total += interpolate(head.layer, fed) + interpolate(head.logits, 1 if i == 0
                                                                    else tokens)
            else:
                total += interpolate(head.layer, tokens) + interpolate(head.logits, 1) + choose
        return total * factor + nodes

    def _stack_catch_up(self, tokens: int) -> float:
        """Tokens run through the whole draft stack without a head (S2D's own cache)."""
        layers = self.parts.draft_layers or self.parts.target_layers
        one = max(layers.base - layers.head, 0.0) + layers.layers * (layers.attn + layers.mlp)
        return one * self._ratio(tokens)

    def round_seconds(self, r: ReplayRound) -> tuple[float, float, float]:
        """(draft, verify, other) predicted seconds of one round."""
        verify = self.target(r.verified)
        if self.config.is_tree:
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

def _median_ms(run: Callable[[], None], clock: Callable[[], float],
               repeats: int = PART_REPEATS) -> float:
    run()                                  # warm-up
    times = []
    for _ in range(repeats):
        start = clock()
        run()
        times.append(clock() - start)
    return 1000 * statistics.median(times)


def _layer_parts(model: "LoadedModel", clock: Callable[[], float], context: int = 128
                 ) -> LayerParts:
    import torch

    from autotune.decoding.drafters.base import TokenChooser

    forward = model.forward
    n = forward.n_layers
    ids = torch.randint(forward.vocab_size, (1, context + 1),
                        generator=torch.Generator().manual_seed(0)).to(model.device)
    cache = forward.new_cache(1, context + 1)
    with torch.inference_mode():
        forward.forward(ids[:, :context], cache)
        every = range(n)

        def one(attn: Any = (), mlp: Any = ()) -> Callable[[], None]:
            def run() -> None:
                cache.crop(context)
                forward.forward(ids[:, context:], cache, attn_skip=attn, mlp_skip=mlp,
                                last_only=True)
            return run

        full = _median_ms(one(), clock)
        no_attn = _median_ms(one(every, ()), clock)
        no_mlp = _median_ms(one((), every), clock)
        none = _median_ms(one(every, every), clock)
        step = forward.begin(ids[:, context:], cache, start=context)
        hidden = step.hidden.clone()

        def head() -> None:
            step.hidden = hidden
            forward.logits(step, last_only=True)

        def fill() -> None:
            step.hidden = hidden
            forward.fill_kv(step, 0, n)

        head_ms = _median_ms(head, clock)
        kv_ms = _median_ms(fill, clock) / n
        logits = forward.logits(step, last_only=True)[:, -1]
        chooser = TokenChooser(0.0, 1.0, forward.vocab_size, None)
        choose_ms = _median_ms(lambda: chooser(logits), clock)
    attn = max(full - no_attn, 0.0) / n
    mlp = max(full - no_mlp, 0.0) / n
    return LayerParts(layers=n, base=none, attn=attn, mlp=mlp, kv=kv_ms, head=head_ms,
                      choose=choose_ms)


def _decoder_generations(target: "LoadedModel", config: "DecodeConfig",
                         refs: list["Reference"], max_new: int, clock: Callable[[], float],
                         draft: "LoadedModel | None" = None) -> list[Any]:
    """The real decoder's generations of `config` on the references' prompts (after a
    warm-up)."""
    from autotune.decoding.decoder import SpeculativeDecoder

    decoder = SpeculativeDecoder(target, config, draft)
    decoder.generate(refs[0].prompt, min(8, max_new), clock)        # warm-up
    return [decoder.generate(ref.prompt, max_new, clock) for ref in refs]


def _decoder_rounds(target: "LoadedModel", config: "DecodeConfig", refs: list["Reference"],
                    max_new: int, clock: Callable[[], float],
                    draft: "LoadedModel | None" = None) -> list[Any]:
    """The real decoder's rounds of `config` on the references' prompts (after a warm-up)."""
    return [r for g in _decoder_generations(target, config, refs, max_new, clock, draft)
            for r in g.rounds]


def isotonic(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence (pool adjacent violators): a pass over more
    tokens never costs less, so a dip in a noisy curve is noise."""
    blocks: list[list[float]] = []           # [sum, count]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out += [s / c] * int(c)
    return out


def pass_curve(model: "LoadedModel", sizes: tuple[int, ...], context: int,
               last_only: bool, clock: Callable[[], float], repeats: int = 5
               ) -> list[list[float]]:
    """[[n, ms], ...]: one forward over n new tokens after `context` cached tokens (all
    logits, as a verify pass; or the last only, as a draft step), sizes visited
    round-robin `repeats` times after a warm-up, the median per size, made monotone."""
    import torch

    forward = model.forward
    largest = max(sizes)
    limit = forward.cos.shape[0] if hasattr(forward, "cos") else None
    if limit is not None:
        context = max(1, min(context, limit - largest))
    ids = torch.randint(forward.vocab_size, (1, context + largest),
                        generator=torch.Generator().manual_seed(0)).to(model.device)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    with torch.inference_mode():
        cache = forward.new_cache(1, context + largest)
        forward.forward(ids[:, :context], cache)

        def run(n: int) -> float:
            cache.crop(context)
            start = clock()
            forward.forward(ids[:, context:context + n], cache, start=context,
                            last_only=last_only)
            return clock() - start

        for n in (sizes[0], largest):
            run(n)
        for _ in range(repeats):
            for n in sizes:
                times[n].append(run(n))
    medians = isotonic([1000 * statistics.median(times[n]) for n in sizes])
    return [[n, ms] for n, ms in zip(sizes, medians)]


def _timed_curve(run: Callable[[int], Any], sizes: tuple[int, ...], clock: Callable[[], float],
                 repeats: int = 5) -> list[list[float]]:
    """[[n, ms], ...] of run(n), sizes visited round-robin `repeats` times after a
    warm-up, the median per size, made monotone (as `pass_curve` times a forward)."""
    def timed(n: int) -> float:
        start = clock()
        run(n)
        return clock() - start

    for n in (sizes[0], max(sizes)):
        timed(n)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            times[n].append(timed(n))
    medians = isotonic([1000 * statistics.median(times[n]) for n in sizes])
    return [[n, ms] for n, ms in zip(sizes, medians)]


def _head_parts(target: "LoadedModel", draft: "LoadedModel", clock: Callable[[], float],
                context: int) -> HeadParts:
    """A trained head's passes (HeadParts) over random features and tokens: a pass's
    time does not depend on the values."""
    import torch

    from autotune.replay.heads import _eagle_pass

    head = draft.forward           # HeadForward
    forward = target.forward
    largest = max(DRAFT_SIZES)
    context = max(1, min(context, forward.cos.shape[0] - largest))
    generator = torch.Generator().manual_seed(0)
    features = torch.randn((1, context + largest, forward.embed.shape[1]),
                           generator=generator).to(target.device, target.dtype)
    ids = torch.randint(forward.vocab_size, (1, context + largest),
                        generator=generator).to(target.device)
    with torch.inference_mode():
        logits = _timed_curve(lambda n: forward.head_logits(features[:, :n]), DRAFT_SIZES,
                              clock)
        if head.kind == "medusa":
            blocks = _median_ms(lambda: head.head(features[:, :1]), clock)
            return HeadParts("medusa", [], logits, blocks, head.head.n_heads)
        layer_forward, fc = head.layer_forward, head.fc_weight
        cache = layer_forward.new_cache(1, context + largest)
        _eagle_pass(layer_forward, fc, cache, features[:, :context], ids[:, :context])

        def layer(n: int) -> None:
            cache.crop(context)
            _eagle_pass(layer_forward, fc, cache, features[:, context:context + n],
                        ids[:, context:context + n])

        return HeadParts("eagle", _timed_curve(layer, DRAFT_SIZES, clock), logits)


def measure_parts(target: "LoadedModel", draft: "LoadedModel | None",
                  refs: list["Reference"], max_new: int, key: dict[str, Any]) -> CostParts:
    """Measure every part on this machine now (about 10-30 s for a small model)."""
    from autotune.decoding.config import DecodeConfig
    from autotune.measure.measurement import Clock

    clock = Clock(target.device)
    sample = refs[: min(2, len(refs))]
    # The passes are timed after as many cached tokens as a typical round sees.
    context = int(statistics.median(len(r.prompt) + len(r.tokens) // 2 for r in refs))
    curve = pass_curve(target, CURVE_SIZES, context, False, clock)
    ar = _decoder_rounds(target, DecodeConfig(), sample, max_new, clock)
    # The decoder's own one-token verify pass on these prompts, against the curve's:
    # the curve is scaled by it (what the loop's pass costs beyond a bare forward).
    ar_verify = 1000 * statistics.median(r.verify_s for r in ar)
    scale = ar_verify / curve[0][1] if curve[0][1] > 0 else 1.0
    curve = [[n, ms * scale] for n, ms in curve]
    ar_other = 1000 * statistics.median(r.draft_s + r.other_s for r in ar)
    ngram = _decoder_rounds(target, DecodeConfig(method="ngram", k=4, ngram_min=1,
                                                 ngram_max=3), sample, max_new, clock)
    drafted = [r for r in ngram if r.drafted] or ngram
    # Passes over 2+ tokens inside the loop, against the curve: the curve's n >= 2 part
    # is scaled by what the decoder's own multi-token verify passes took.
    multi = [r for r in ngram if r.verified >= 2]
    if multi:
        factor = (sum(1000 * r.verify_s for r in multi)
                  / sum(interpolate(curve, r.verified) for r in multi))
        curve = [[n, ms * (factor if n >= 2 else 1.0)] for n, ms in curve]
        curve = [[n, ms] for (n, _), ms in zip(curve, isotonic([ms for _, ms in curve]))]
    spec_other = 1000 * statistics.median(r.other_s for r in drafted)
    lookup = 1000 * statistics.median(r.draft_s for r in ngram)
    layers = _layer_parts(target, clock, context) if target.forward.supports_layers else None
    tree_node = tree_other = 0.0
    tree_verify = 1.0
    if layers is not None:
        n = target.n_layers
        tree = DecodeConfig(method="layer_skip", attn_skip=tuple(range(n // 2, n)),
                            tree_width=3, tree_depth=3)
        rounds = _decoder_rounds(target, tree, sample[:1], min(max_new, 24), clock)
        one = layers.skip_pass(len(tree.attn_skip), 0)
        residual = []
        for r in rounds:
            feeds = [1] + [min(3, r.drafted)] * (r.draft_depth - 1)
            modelled = sum(one * interpolate(curve, f) / interpolate(curve, 1) for f in feeds)
            residual.append((1000 * r.draft_s - modelled) / max(r.drafted, 1))
        tree_node = max(statistics.median(residual), 0.0)
        tree_other = max(statistics.median((1000 * r.other_s - spec_other) / max(r.drafted, 1)
                                           for r in rounds), 0.0)
        tree_verify = (sum(1000 * r.verify_s for r in rounds)
                       / sum(interpolate(curve, r.verified) for r in rounds))
    else:
        layers = LayerParts(target.n_layers, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    draft_curve = draft_layers = None
    head = None
    if draft is not None and draft.trained_kind is not None:
        # A trained head has no stack and no forward of its own: its passes instead.
        head = _head_parts(target, draft, clock, context)
    elif draft is not None:
        dclock = Clock(draft.device)
        draft_layers = (_layer_parts(draft, dclock, context)
                        if draft.forward.supports_layers else None)
        choose = draft_layers.choose if draft_layers is not None else layers.choose
        # A draft step: a last-only pass over the tokens fed, then picking a token.
        draft_curve = [[n, ms + choose]
                       for n, ms in pass_curve(draft, DRAFT_SIZES, context, True, dclock)]
    parts = CostParts(FORMAT, key, curve, ar_other, spec_other, lookup, tree_node,
                      tree_other, tree_verify, layers, draft_curve, draft_layers, {}, head)
    parts.draft_factor = _draft_factors(parts, target, draft, sample, max_new, clock)
    return parts


def _calibration_configs(target: "LoadedModel", draft: "LoadedModel | None"
                         ) -> dict[str, "DecodeConfig"]:
    """One chain config per drafting method these models can run, to time in the loop."""
    from autotune.decoding.config import DecodeConfig

    configs: dict[str, DecodeConfig] = {}
    trained = draft.trained_kind if draft is not None else None
    if trained is not None:
        # A trained head serves its own method only (the decoder refuses the others).
        configs[trained] = DecodeConfig(method=trained, k=4)
    elif draft is not None:
        configs["draft_model"] = DecodeConfig(method="draft_model", k=4)
    if target.forward.supports_layers:
        n = target.n_layers
        configs["layer_skip"] = DecodeConfig(method="layer_skip", k=4,
                                             attn_skip=tuple(range(n // 2, n - 1, 2)))
    stack = draft if draft is not None and trained is None else target
    if stack.forward.supports_layers:
        n = stack.n_layers
        exits = tuple(sorted({max(1, n // 3), max(2, 2 * n // 3), n}))
        configs["sorted_exit"] = DecodeConfig(method="sorted_exit", k=4, exits=exits,
                                              thresholds=(0.8, 0.5)[: len(exits) - 1])
    return configs


def _draft_factors(parts: CostParts, target: "LoadedModel", draft: "LoadedModel | None",
                   sample: list["Reference"], max_new: int, clock: Callable[[], float]
                   ) -> dict[str, float]:
    """Per method: the decoder's measured drafting time ÷ the bare parts' prediction for
    the same rounds (same drafted counts and exits)."""
    from autotune.decoding.decoder import SpeculativeDecoder

    factors: dict[str, float] = {}
    for method, config in _calibration_configs(target, draft).items():
        try:
            SpeculativeDecoder(target, config, draft)
        except Exception:  # noqa: BLE001 - a method these models cannot run: no factor
            continue
        generations = _decoder_generations(target, config, sample, max_new, clock, draft)
        model = CostModel(parts, config, target.n_layers)
        modelled = measured = 0.0
        for generation in generations:
            for r, passes in zip(generation.rounds, _chain_passes(method, generation)):
                if not r.drafted:
                    continue
                replayed = ReplayRound(r.drafted, r.accepted, r.emitted, r.verified,
                                       r.draft_depth, r.confidences, passes=passes,
                                       exits=list(r.exit_layers))
                modelled += model.draft_seconds(replayed)
                measured += r.draft_s
        if modelled > 0:
            factors[method] = measured / modelled
    return factors


def _chain_passes(method: str, generation: Any) -> list[list[int]]:
    """Tokens fed per draft pass of each chain round of a real generation: EAGLE's
    first pass catches up as in the replay (`heads.EagleSource`: the whole prompt in
    the first round, then 1 + the last round's accepted); one token each otherwise."""
    if method != "eagle":
        return [[1] * r.drafted for r in generation.rounds]
    cache = OwnCache(seen=1 - generation.prompt_len, keeps_drafts=False)
    out, g = [], 1
    for r in generation.rounds:
        out.append(cache.chain(g, r.drafted, r.accepted))
        g += r.emitted
    return out


def parts_key(target: "LoadedModel", draft: "LoadedModel | None") -> dict[str, Any]:
    import torch

    from autotune.frozen import hardware_record
    from autotune.models.fingerprint import model_fingerprint

    hardware = hardware_record(target.device)
    key = {"target": model_fingerprint(target),
           "draft": model_fingerprint(draft) if draft is not None else None,
           "device": str(target.device), "dtype": str(target.dtype),
           "threads": torch.get_num_threads(),
           "cpu": hardware.get("cpu"), "device_name": hardware.get("device_name")}
    # A trained head's parts are its own passes, not a draft model's: the key says which
    # drafter (added only then, so the keys of files measured without one still match).
    if draft is not None and draft.trained_kind is not None:
        key["drafter"] = draft.trained_kind
    return key


def load_or_measure_parts(path: Path, target: "LoadedModel", draft: "LoadedModel | None",
                          refs: list["Reference"], max_new: int) -> CostParts:
    """The parts stored at `path` when measured for these models on this machine, else
    measured now and stored (atomically)."""
    context = int(statistics.median(len(r.prompt) + len(r.tokens) // 2 for r in refs))
    key = {**parts_key(target, draft), "context": context, "max_new_tokens": max_new}
    if path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("key") == key:
                return CostParts.from_json(doc)
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            pass
        print(f"autotune: {path.name} was measured for other models or another machine, or "
              "is unreadable; measuring the replay cost parts again", file=sys.stderr)
    print("autotune: measuring the replay cost model's parts (target passes, sublayers, "
          "the decoder loop)", file=sys.stderr, flush=True)
    parts = measure_parts(target, draft, refs, max_new, key)
    try:
        write_atomically(path, json.dumps(parts.to_json(), indent=1) + "\n")
    except OSError as exc:
        print(f"autotune: warning: {path} not written ({exc})", file=sys.stderr)
    return parts
