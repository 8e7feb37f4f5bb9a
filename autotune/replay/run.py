"""Replaying configs over one workload: references + sources + cost model -> the same
summary a measurement prints, marked `"fidelity": "replay"`.

`Replayer` is made once per search (or `measure --replay`): it decodes or loads the
reference continuations, loads or measures the cost parts, and then predicts any number
of configs in milliseconds each (a new skip mask or exit set costs one pass per prompt
for its table; K, policies and tree shapes over an existing table cost nothing but the
round simulation). Predicted rounds are handed to `measure.Measurement` as generations
whose times are the cost model's, so every key (speedup and its interval, τ, α,
position acceptance, the time split) is computed by the code that computes measured
ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from autotune.common.errors import AutotuneError
from autotune.common.memory import release_freed_memory
from autotune.schema.config import DecodeConfig
from autotune.decoding.compatibility import check_decodable
from autotune.decoding.decoder import Generation, RoundTrace
from autotune.decoding.drafter_choice import pick_drafter
from autotune.schema.label import describe
from autotune.schema.methods import get_method
from autotune.measure.results import Measurement, PromptRun
from autotune.models.loading import LoadedModel
from autotune.replay import replay_refusal
from autotune.backends.profile import EngineProfile
from autotune.replay.costs import CostModel, CostParts
from autotune.replay.engine_prices import EngineCostModel, price_note, prices_for
from autotune.replay.parts import load_or_measure_parts
from autotune.replay.effort import FULL, PartsEffort
from autotune.replay.reference import Reference, reference_set
from autotune.replay.simulate import ReplayRound, simulate
from autotune.replay.sources import ReplaySource
from autotune.workloads.prompts import Prompt

FIDELITY = "replay"


def _check_draft_cost(config: DecodeConfig, r: ReplayRound, draft_s: float,
                      cost: CostModel | EngineCostModel) -> None:
    """The replay tier's guard: a round's predicted drafting may not cost less than the
    target's measured passes over the layers its draft passes run (a draft through every
    layer costs a target pass). A prediction below it is impossible on any hardware and
    would rank a slower-than-AR config first, so it stops the replay, naming the config."""
    floor = cost.draft_floor_seconds(r)
    if draft_s < floor * (1 - 1e-9):
        raise AutotuneError(
            f"replay cost model: {describe(config.to_dict())} priced a round's drafting at "
            f"{1000 * draft_s:.3g} ms, below the {1000 * floor:.3g} ms its passes' "
            "layers cost in the target's measured pass")


class Replayer:
    """Predicts configs on `prompts` for `target` (and `draft`) without decoding them."""

    def __init__(self, target: LoadedModel, draft: LoadedModel | None,
                 prompts: Sequence[Prompt], max_new_tokens: int,
                 parts_path: Path, reference_dir: Path | None = None,
                 parts: CostParts | None = None, parts_effort: PartsEffort = FULL) -> None:
        """`parts`: cost parts measured already (another Replayer's, on the same models
        and machine); None loads them from `parts_path` or measures them there, at
        `parts_effort` (a `--time-budget` may ask for less than full)."""
        self.target, self.draft = target, draft
        self.max_new_tokens = max_new_tokens
        self.references: list[Reference] = reference_set(target, prompts, max_new_tokens,
                                                         reference_dir)
        self.parts: CostParts = parts if parts is not None else load_or_measure_parts(
            parts_path, target, draft, self.references, max_new_tokens, parts_effort)
        self._sources: dict[tuple[str, str | None], ReplaySource] = {}
        # Engines' own cost profiles, measured in them (`backends.profile`): a config
        # for an engine with one is priced at that engine's costs, its baseline too.
        self.engine_profiles: dict[str, EngineProfile] = {}

    def can_replay(self, config: DecodeConfig) -> str | None:
        """None, or why `config` cannot be replayed (one line)."""
        return replay_refusal(config)

    def _source(self, config: DecodeConfig, category: str | None = None) -> ReplaySource:
        """The method's source over the draft that drafts a prompt of `category` (one
        per member of a per-category folder: `drafter` picks it, `routed` per prompt)."""
        draft = self.draft
        if get_method(config.method).uses_draft:
            draft = pick_drafter(self.draft, config.drafter, category)
        key = (config.method, draft.name if draft is not None else None)
        if key not in self._sources:
            factory = get_method(config.method).replay_factory()
            self._sources[key] = factory(self.target, draft)
        return self._sources[key]

    def _generation(self, ref: Reference, traces: list[RoundTrace], prefill_s: float
                    ) -> Generation:
        return Generation(prompt_len=len(ref.prompt), tokens=list(ref.tokens),
                          prefill_s=prefill_s, decode_s=sum(t.draft_s + t.verify_s + t.other_s
                                                            for t in traces),
                          rounds=traces, cache_bytes=0)

    def replay(self, config: DecodeConfig) -> Measurement:
        """The predicted Measurement of `config` (every prompt once)."""
        reason = self.can_replay(config)
        if reason is not None:
            raise AutotuneError(reason)
        # The decoder's own checks: a valid config, a draft where needed, layer access,
        # layer indices inside the stack, a tree-capable forward.
        check_decodable(self.target, config, self.draft)
        self._prepare(config)
        cost: CostModel | EngineCostModel = CostModel(self.parts, config,
                                                      self.target.n_layers)
        baseline_cost = CostModel(self.parts, DecodeConfig(), self.target.n_layers)
        ar_round = baseline_cost.ar_round_seconds()
        profile = prices_for(self.engine_profiles, config)
        if profile is not None:
            cost = EngineCostModel(profile, config, baseline_cost)
            ar_round = cost.ar_round_seconds()
        runs = [self._predicted_run(config, ref, cost, ar_round) for ref in self.references]
        # A screen replays hundreds of configs: what each one's tables and passes freed
        # goes back to the OS, or RSS grows with the configs screened (issue 51).
        release_freed_memory()
        return self._measurement(config, runs)

    def _prepare(self, config: DecodeConfig) -> None:
        """One prepare per source, over every prompt it drafts: its tables are made in
        one batch (only `drafter=routed` with a per-category folder has several
        sources)."""
        by_source: dict[int, tuple[ReplaySource, list[Reference]]] = {}
        for ref in self.references:
            source = self._source(config, ref.category)
            by_source.setdefault(id(source), (source, []))[1].append(ref)
        for source, refs in by_source.values():
            source.prepare(config, refs)

    def _predicted_run(self, config: DecodeConfig, ref: Reference,
                       cost: CostModel | EngineCostModel,
                       ar_round: tuple[float, float]) -> PromptRun:
        """`ref`'s simulated rounds priced by the cost model, paired with the AR
        baseline's (one target step per reference token after the first)."""
        source = self._source(config, ref.category)
        rounds = simulate(source.track(config, ref), config, ref, self.max_new_tokens)
        traces = []
        for r in rounds:
            draft_s, verify_s, other_s = cost.round_seconds(r)
            _check_draft_cost(config, r, draft_s, cost)
            traces.append(RoundTrace(
                drafted=r.drafted, accepted=r.accepted, emitted=r.emitted,
                confidences=r.confidences, draft_s=draft_s, verify_s=verify_s,
                verified=r.verified, other_s=other_s, exit_layers=r.exits,
                draft_depth=r.depth))
        prefill = cost.prefill_seconds(len(ref.prompt))
        ar_verify, ar_other = ar_round
        base = [RoundTrace(0, 0, 1, [], 0.0, ar_verify, 1, ar_other)
                for _ in range(len(ref.tokens) - 1)]
        return PromptRun(ref.prompt_id, ref.category, self._generation(ref, base, prefill),
                         self._generation(ref, traces, prefill))

    def _measurement(self, config: DecodeConfig, runs: list[PromptRun]) -> Measurement:
        """The prediction as a Measurement: memory is the weights the config reads (the
        draft's only where its method runs over it), not measured."""
        spec = get_method(config.method)
        weights = self.target.forward.nbytes() + (
            self.draft.forward.nbytes() if self.draft is not None and spec.uses_draft else 0)
        return Measurement(
            config=config, model=self.target.name,
            draft=self.draft.name if self.draft is not None else None,
            device=str(self.target.device), dtype=str(self.target.dtype).removeprefix("torch."),
            max_new_tokens=self.max_new_tokens, runs=runs, weights_bytes=weights,
            peak_memory_bytes=weights, memory_kind="replay (weights only, not measured)")

    def summary(self, config: DecodeConfig) -> dict[str, Any]:
        """`autotune measure`'s keys for the prediction, plus `fidelity`, `replay_exact`
        (whether τ is exact for this config) and `replay_notes` (what is approximate)."""
        out = self.replay(config).summary()
        exact, notes = self._source(config).fidelity(config)
        priced = price_note(self.engine_profiles, config)
        if priced is not None:
            notes = [*notes, priced]
        out.update(fidelity=FIDELITY, replay_exact=exact, replay_notes=notes,
                   lossless=None, mismatched_prompts=[])
        return out

