"""Measuring the replay cost model's parts (`CostParts`, replay/costs.py) and keeping
them: `load_or_measure_parts` reads the cache's file when it was measured for these
models on this machine at this effort or above, else measures them now and stores them.

Parts (`measure_parts`, all timed as `autotune.measure.timing` times: its `Clock`, an
untimed warm-up, the median of several runs, on this process's threads):
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
- a trained head's passes (`HeadParts`, with a trained `--draft`), measured by its
  method (`DraftCost.measure`): EAGLE's fc + decoder layer by tokens fed, the target's
  LM head by rows scored, Medusa's residual blocks;
- per drafting method, the decoder's drafting time against the parts' prediction for the
  same rounds (passes inside the loop run slower than back to back), on the chain config
  each method names (`DraftCost.calibration_config`);
- parts only one method's drafting has, timed by that method in the decoder loop
  (`DraftCost.loop_parts`), kept by the names it gives them in `method_parts`.

The n-gram chain and layer-skip tree runs above are instruments: real decoder rounds
that time the loop's shared parts, whatever method a config later uses.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from autotune.common.monotone import isotonic
from autotune.common.files import write_atomically
from autotune.schema.methods import all_methods, find_method
from autotune.measure.timing import Clock, forward_times, median_ms, time_call, time_points
from autotune.replay.costs import (
    FORMAT,
    CostModel,
    CostParts,
    LayerParts,
    PartsKey,
    interpolate,
    parts_key,
    stored_parts,
)
from autotune.replay.draft_cost import HeadParts
from autotune.replay.effort import EFFORTS, FULL, PartsEffort
from autotune.replay.simulate import ReplayRound

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig
    from autotune.models.loading import LoadedModel
    from autotune.replay.reference import Reference

CURVE_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128)
DRAFT_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
PART_REPEATS = 7       # timed runs of one part (`time_call`)
CURVE_REPEATS = 5      # timed runs of each size of a curve (`time_points`)


def _layer_parts(model: "LoadedModel", clock: Callable[[], float], context: int = 128,
                 repeats: int = PART_REPEATS) -> LayerParts:
    import torch

    from autotune.decoding.drafters.base import TokenChooser

    forward = model.forward
    n = forward.n_layers
    ids = torch.randint(forward.vocab_size, (1, context + 1),
                        generator=torch.Generator().manual_seed(0)).to(model.device)
    # The decode cache: on the static forward its passes are the captured ones the
    # decoder's draft passes replay.
    cache = forward.decode_cache(context + 1)
    with torch.inference_mode():
        forward.forward(ids[:, :context], cache)
        every = range(n)

        def one(attn: Any = (), mlp: Any = ()) -> Callable[[], None]:
            def run() -> None:
                cache.crop(context)
                forward.forward(ids[:, context:], cache, attn_skip=attn, mlp_skip=mlp,
                                last_only=True)
            return run

        full = time_call(one(), clock, repeats)
        no_attn = time_call(one(every, ()), clock, repeats)
        no_mlp = time_call(one((), every), clock, repeats)
        none = time_call(one(every, every), clock, repeats)
        step = forward.begin(ids[:, context:], cache, start=context)
        hidden = step.hidden.clone()

        def head() -> None:
            step.hidden = hidden
            forward.logits(step, last_only=True)

        def fill() -> None:
            step.hidden = hidden
            forward.fill_kv(step, 0, n)

        head_ms = time_call(head, clock, repeats)
        kv_ms = time_call(fill, clock, repeats) / n
        logits = forward.logits(step, last_only=True)[:, -1]
        chooser = TokenChooser(0.0, 1.0, forward.vocab_size, None)
        choose_ms = time_call(lambda: chooser(logits), clock, repeats)
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


def _monotone_curve(times: dict[int, list[float]]) -> list[list[float]]:
    """[[n, ms], ...] from timed samples {n: [seconds, ...]} (n increasing): the median
    per size, made monotone."""
    medians = isotonic([median_ms(samples) for samples in times.values()])
    return [[n, ms] for n, ms in zip(times, medians)]


def pass_curve(model: "LoadedModel", sizes: tuple[int, ...], context: int,
               last_only: bool, clock: Callable[[], float], repeats: int = CURVE_REPEATS
               ) -> list[list[float]]:
    """[[n, ms], ...]: one forward over n new tokens after `context` cached tokens (all
    logits, as a verify pass; or the last only, as a draft step), timed by
    `timing.forward_times` (the median of `repeats` per size), made monotone."""
    forward = model.forward
    limit = forward.cos.shape[0] if hasattr(forward, "cos") else None
    if limit is not None:
        context = max(1, min(context, limit - max(sizes)))
    return _monotone_curve(forward_times(forward, forward.vocab_size, sizes, context, clock,
                                         model.device, repeats, last_only=last_only))


@dataclass
class HeadInputs:
    """What a trained head's passes are timed on (`DraftCost.measure`): random features
    [1, context + largest, H] in the target's dtype and ids [1, context + largest] (a
    pass's time does not depend on the values), the `context` entries a timed pass
    follows, and the target's LM head over n of the features, [[n, ms], ...] (every
    trained head's drafts are scored by it)."""

    features: Any
    ids: Any
    context: int
    logits: list[list[float]]


def head_inputs(target: "LoadedModel", clock: Callable[[], float], context: int
                ) -> HeadInputs:
    """Inputs for timing a trained head over `target`, and the LM head's curve."""
    import torch

    forward = target.forward
    largest = max(DRAFT_SIZES)
    context = max(1, min(context, forward.cos.shape[0] - largest))
    generator = torch.Generator().manual_seed(0)
    features = torch.randn((1, context + largest, forward.embed.shape[1]),
                           generator=generator).to(target.device, target.dtype)
    ids = torch.randint(forward.vocab_size, (1, context + largest),
                        generator=generator).to(target.device)
    with torch.inference_mode():
        logits = head_curve(lambda n: forward.head_logits(features[:, :n]), clock,
                            target.device)
    return HeadInputs(features, ids, context, logits)


def head_curve(run: Callable[[int], Any], clock: Callable[[], float], device: Any,
               reset: Callable[[int], Any] | None = None) -> list[list[float]]:
    """[[n, ms], ...] of run(n) for n in DRAFT_SIZES (a trained head's pass over n
    tokens), timed by `time_points` (`reset(n)` untimed before each), made monotone."""
    return _monotone_curve(time_points(run, DRAFT_SIZES, clock, device, CURVE_REPEATS,
                                       reset=reset))


def _trained_parts(target: "LoadedModel", draft: "LoadedModel", clock: Callable[[], float],
                   context: int) -> HeadParts | None:
    """The trained --draft's own passes, measured by its method (`DraftCost.measure`);
    None where its method measures none of its own."""
    spec = find_method(draft.trained_kind)
    cost = spec.draft_cost_class() if spec is not None else None
    return cost.measure(target, draft, clock, context) if cost is not None else None


def measure_parts(target: "LoadedModel", draft: "LoadedModel | None",
                  refs: list["Reference"], max_new: int, key: PartsKey,
                  effort: PartsEffort = FULL) -> CostParts:
    """Measure every part on this machine now (about 10-30 s for a small model at full
    `effort`; a lesser one times fewer repeats on fewer, shorter decodes)."""
    from autotune.schema.config import DecodeConfig

    clock = Clock(target.device)
    sample = refs[: min(effort.prompts, len(refs))]
    max_new = effort.max_new(max_new)
    # The passes are timed after as many cached tokens as a typical round sees.
    context = int(statistics.median(len(r.prompt) + len(r.tokens) // 2 for r in refs))
    curve = pass_curve(target, CURVE_SIZES, context, False, clock, effort.curve_repeats)
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
    method_parts = _method_loop_parts(target, sample, max_new, clock)
    layers = (_layer_parts(target, clock, context, effort.part_repeats)
              if target.forward.supports_layers else None)
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
        head = _trained_parts(target, draft, clock, context)
    elif draft is not None:
        dclock = Clock(draft.device)
        draft_layers = (_layer_parts(draft, dclock, context, effort.part_repeats)
                        if draft.forward.supports_layers else None)
        choose = draft_layers.choose if draft_layers is not None else layers.choose
        # A draft step: a last-only pass over the tokens fed, then picking a token.
        draft_curve = [[n, ms + choose]
                       for n, ms in pass_curve(draft, DRAFT_SIZES, context, True, dclock,
                                               effort.curve_repeats)]
    parts = CostParts(FORMAT, key, curve, ar_other, spec_other, lookup, tree_node,
                      tree_other, tree_verify, layers, draft_curve, draft_layers, {}, head,
                      method_parts, effort.name)
    parts.draft_factor = _draft_factors(parts, target, draft, sample, max_new, clock)
    return parts


def _method_loop_parts(target: "LoadedModel", sample: list["Reference"], max_new: int,
                       clock: Callable[[], float]) -> dict[str, float]:
    """Every method's own parts timed in the decoder loop (`DraftCost.loop_parts`), for
    the methods whose optional package is installed here, in registry order."""
    def rounds(config: "DecodeConfig") -> list[Any]:
        return _decoder_rounds(target, config, sample, max_new, clock)

    found: dict[str, float] = {}
    for spec in all_methods():
        cost = spec.draft_cost_class() if spec.available() else None
        if cost is not None:
            found.update(cost.loop_parts(rounds))
    return found


def _calibration_configs(target: "LoadedModel", draft: "LoadedModel | None"
                         ) -> dict[str, "DecodeConfig"]:
    """One chain config per drafting method these models can run, to time in the loop
    (each method's `DraftCost.calibration_config`), in registry order."""
    configs: dict[str, "DecodeConfig"] = {}
    for spec in all_methods():
        cost = spec.draft_cost_class()
        config = cost.calibration_config(target, draft) if cost is not None else None
        if config is not None:
            configs[spec.name] = config
    return configs


def _draft_factors(parts: CostParts, target: "LoadedModel", draft: "LoadedModel | None",
                   sample: list["Reference"], max_new: int, clock: Callable[[], float]
                   ) -> dict[str, float]:
    """Per method: the decoder's measured drafting time ÷ the bare parts' prediction for
    the same rounds (same drafted counts and exits)."""
    from autotune.decoding.compatibility import check_decodable

    factors: dict[str, float] = {}
    for method, config in _calibration_configs(target, draft).items():
        try:
            check_decodable(target, config, draft)
        except Exception:  # noqa: BLE001 - a method these models cannot run: no factor
            continue
        generations = _decoder_generations(target, config, sample, max_new, clock, draft)
        model = CostModel(parts, config, target.n_layers)
        chain_passes = model.drafting.chain_passes
        modelled = measured = 0.0
        for generation in generations:
            for r, passes in zip(generation.rounds, chain_passes(generation)):
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


def _rank(effort: str) -> int:
    """0 for full effort, larger for lesser ones (an unknown name: the least)."""
    names = [e.name for e in EFFORTS]
    return names.index(effort) if effort in names else len(names)


def load_or_measure_parts(path: Path, target: "LoadedModel", draft: "LoadedModel | None",
                          refs: list["Reference"], max_new: int,
                          effort: PartsEffort = FULL) -> CostParts:
    """The parts stored at `path` when measured for these models on this machine at
    `effort` or above, else measured now at `effort` and stored (atomically): a rerun
    with a larger `--time-budget` measures the parts a lesser one cut again."""
    context = int(statistics.median(len(r.prompt) + len(r.tokens) // 2 for r in refs))
    key = PartsKey(**parts_key(target, draft), context=context, max_new_tokens=max_new)
    if path.is_file():
        stored = stored_parts(path, key)
        if stored is not None and _rank(stored.effort) <= _rank(effort.name):
            return stored
        if stored is not None:
            print(f"autotune: {path.name} was measured at {stored.effort} effort; this run "
                  f"has time for {effort.name}: measuring the replay cost parts again",
                  file=sys.stderr)
        else:
            print(f"autotune: {path.name} was measured for other models or another "
                  "machine, or is unreadable; measuring the replay cost parts again",
                  file=sys.stderr)
    lesser = "" if effort == FULL else f", at {effort.name} effort ({effort.describe()})"
    print("autotune: measuring the replay cost model's parts (target passes, sublayers, "
          f"the decoder loop{lesser})", file=sys.stderr, flush=True)
    parts = measure_parts(target, draft, refs, max_new, key, effort)
    try:
        write_atomically(path, json.dumps(parts.to_json(), indent=1) + "\n")
    except OSError as exc:
        print(f"autotune: warning: {path} not written ({exc})", file=sys.stderr)
    return parts
