"""Measuring an engine's cost profile (`backends/profile.EngineProfile`) in the engine.

Through the engine's own backend (the runners a race measures with), on one prompt at
the workload's context made of a piece of a search prompt repeated, so that the engine's
n-gram lookup finds a draft at every step and the model, continuing the repetition,
accepts it: each step then verifies up to k + 1 tokens. Decoded at several k (the
engine's space's range) and once without speculation, each decode gives a point (the
tokens a step verified on average, the ms a step took), counted by the engine itself:
its rounds where it reports them (transformers' `update_candidate_strategy` calls,
vLLM's per-step draft counts), else its totals (llama-server's `timings.draft_n` and
`draft_n_accepted`: steps = tokens decoded - tokens accepted). A step's time is the
decode time the race measures (the client's clock) over the steps. The configs are
decoded interleaved, as a measurement interleaves its arms (all started, then rounds
that decode each once), and each speculative step is priced against the AR step of its
own round, so a machine whose speed drifts during the profile shifts both alike.

From the points: the AR step (`ar_ms`); a line through the speculative points, whose
value at one verified token less the AR step is what a speculative step costs beyond its
pass (drafting and bookkeeping); the verify curve, each point's step less that, the AR
step at one token, made monotone. Where the engine lets the lookup be timed apart
(transformers: its `PromptLookupCandidateGenerator.get_candidates`), that is
`draft_ms` and the rest `spec_overhead_ms`; elsewhere the lookup runs inside the
engine's step (vLLM's proposer, llama.cpp's `common_speculative_gen_draft`) and is in
`spec_overhead_ms`, which the profile's notes say.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.common.monotone import isotonic
from autotune.backends.profile import (FORMAT, EngineProfile, ProfileKey, ProfilePoint,
                                       drafter_of)

if TYPE_CHECKING:
    from autotune.backends.base import Backend
    from autotune.decoding.decoder import Generation
    from autotune.schema.config import DecodeConfig

__all__ = ["fit_profile", "measure_profile", "profile_config", "profile_runs",
           "profile_ks", "repeated_prompt"]

def profile_ks(engine: str) -> tuple[int, ...]:
    """The drafts per step profiled in `engine` (its registry record's)."""
    from autotune.backends.registry import BACKEND_RECORDS

    record = BACKEND_RECORDS.get(engine)
    return record.profile_ks if record is not None else (1, 4, 10)


# Tokens decoded per profiled config: at least this, and three steps' worth at k.
LEAST_TOKENS = 32
STEPS_PER_POINT = 3
# A repeated piece is at least this long and longer than the largest k (a draft copies
# the tokens after the match: the piece holds them).
LEAST_PIECE = 24


def profile_config(engine: str, k: int) -> "DecodeConfig":
    """The n-gram config profiled at `k` in `engine` (its default lookup, k drafts)."""
    from autotune.schema.config import config_from_mapping

    from autotune.backends.registry import BACKEND_RECORDS

    record = BACKEND_RECORDS.get(engine)
    values: dict[str, Any] = (dict(record.profile_lookup) if record is not None
                              else {"method": "ngram", "ngram_min": 1, "ngram_max": 2})
    return config_from_mapping({**values, "engine": engine, "k": k}).validate()


def profile_runs(engine: str) -> int:
    """Configs a profile of `engine` decodes (each an engine instance started)."""
    return 1 + len(profile_ks(engine))


def repeated_prompt(ids: Sequence[int], context: int, k_max: int) -> list[int]:
    """`context` tokens (at least two pieces) made of the first tokens of `ids`
    repeated: a piece longer than `k_max` drafts and at least LEAST_PIECE."""
    piece = list(ids[: max(LEAST_PIECE, k_max + 8)])
    if not piece:
        raise ValueError("no prompt tokens to profile the engine on")
    length = max(context, 2 * len(piece))
    return (piece * (length // len(piece) + 1))[:length]


def _steps(generation: "Generation") -> tuple[int, float]:
    """(steps, tokens verified in all) of a decode, as the engine counted them."""
    decoded = generation.decoded
    rounds = list(generation.rounds)
    # An engine whose first pass also verified a draft (transformers) reports that
    # round too: it is the prefill's, not a decode step.
    while rounds and sum(r.emitted for r in rounds) > decoded:
        rounds = rounds[1:]
    if rounds:
        steps = len(rounds)
        return steps, float(sum(r.verified for r in rounds))
    if generation.draft_totals is not None:
        drafted, accepted = generation.draft_totals
        steps = max(decoded - accepted, 1)
        return steps, float(steps + drafted)
    return max(decoded, 1), float(max(decoded, 1))


@contextlib.contextmanager
def _lookup_timer(engine: str) -> Iterator[list[float]]:
    """Seconds of each n-gram lookup the engine runs while inside, where it can be timed
    apart (transformers' prompt lookup); nothing recorded elsewhere."""
    seen: list[float] = []
    if engine != "hf":
        yield seen
        return
    from transformers.generation import candidate_generator as hf_candidates
    cls = hf_candidates.PromptLookupCandidateGenerator
    original = cls.get_candidates

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            seen.append(time.perf_counter() - began)

    cls.get_candidates = timed                      # type: ignore[method-assign]
    try:
        yield seen
    finally:
        cls.get_candidates = original               # type: ignore[method-assign]


@dataclass
class _Runs:
    """One profiled config's timed decodes: per decode its steps, tokens verified per
    step, ms per step; and its drafts in all."""

    k: int
    steps: list[int] = field(default_factory=list)
    verified: list[float] = field(default_factory=list)
    per_step: list[float] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0

    def add(self, generation: "Generation") -> None:
        n, v = _steps(generation)
        self.steps.append(n)
        self.verified.append(v / n)
        self.per_step.append(1000 * generation.decode_s / n)
        d, a = _drafts(generation)
        self.drafted, self.accepted = self.drafted + d, self.accepted + a

    def point(self, ar: "_Runs") -> ProfilePoint:
        """Its step priced against the AR decodes of the same rounds: the median of its
        step over the round's AR step, times the median AR step (a machine whose speed
        drifts during the profile shifts both alike)."""
        ratio = statistics.median(s / a for s, a in zip(self.per_step, ar.per_step))
        return ProfilePoint(k=self.k, steps=int(statistics.median(self.steps)),
                            verified=statistics.median(self.verified),
                            step_ms=ratio * statistics.median(ar.per_step))

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 1.0


def _interleaved(backend: "Backend", configs: list[tuple[int, "DecodeConfig"]],
                 prompt: list[int], repeats: int, engine: str
                 ) -> tuple[list[_Runs], list[float]]:
    """Every config's decodes, interleaved: all runners started, each warmed up, then
    `repeats` rounds each decoding every config once (the AR config first), as a
    measurement interleaves its arms; and the lookups timed apart (`_lookup_timer`)."""
    runners = []
    try:
        for _, config in configs:
            runners.append(backend.runner(config))
        runs = [_Runs(k) for k, _ in configs]
        lookups: list[float] = []
        for runner, (k, _) in zip(runners, configs):
            runner.generate(prompt, 8, time.perf_counter)               # warm-up
        for _ in range(repeats):
            for runner, (k, _), record in zip(runners, configs, runs):
                tokens = max(LEAST_TOKENS, STEPS_PER_POINT * (k + 1))
                with _lookup_timer(engine if k else "") as seen:
                    record.add(runner.generate(prompt, tokens, time.perf_counter))
                lookups += seen
        return runs, lookups
    finally:
        for runner in runners:
            runner.close()


def _drafts(generation: "Generation") -> tuple[int, int]:
    """(drafted, accepted) draft tokens of a decode, as the engine counted them."""
    if generation.draft_totals is not None:
        return generation.draft_totals
    return (sum(r.drafted for r in generation.rounds),
            sum(r.accepted for r in generation.rounds))


def _line_at_one(points: list[ProfilePoint]) -> float:
    """The least-squares line of step ms on tokens verified, at one token."""
    xs = [p.verified for p in points]
    ys = [p.step_ms for p in points]
    if len(points) < 2 or max(xs) - min(xs) < 1e-9:
        return min(ys)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
             / sum((x - mx) ** 2 for x in xs))
    return my + slope * (1.0 - mx)


def fit_profile(key: ProfileKey, ar: ProfilePoint, spec: list[ProfilePoint],
                drafter: str, lookup_ms: float | None, measured_s: float,
                notes: Sequence[str] = (), overhead_on_misses: bool = True
                ) -> EngineProfile:
    """The profile from its measured points (see the module docstring); `lookup_ms`:
    the drafter's lookup per step where timed apart, else None."""
    # A step verifying more tokens never costs less than the AR step, so what a
    # speculative step adds is at most its least excess over the AR step (noise on a
    # loaded machine can tilt the line).
    least = min((p.step_ms - ar.step_ms for p in spec), default=0.0)
    beyond = (min(max(_line_at_one(spec) - ar.step_ms, 0.0), max(least, 0.0))
              if spec else 0.0)
    ordered = sorted(spec, key=lambda p: p.verified)
    raw = [ar.step_ms] + [max(p.step_ms - beyond, ar.step_ms) for p in ordered]
    curve = [[1.0, ms] if i == 0 else [ordered[i - 1].verified, ms]
             for i, ms in enumerate(isotonic(raw))]
    draft = min(lookup_ms, beyond) if lookup_ms is not None else 0.0
    out = list(notes)
    if lookup_ms is None:
        out.append("the lookup runs inside the engine's step: its cost is in "
                   "spec_overhead_ms")
    return EngineProfile(format=FORMAT, key=key, ar_ms=ar.step_ms, verify_curve=curve,
                         draft_ms={drafter: draft}, spec_overhead_ms=beyond - draft,
                         measured_s=measured_s, points=[ar, *spec], notes=out,
                         overhead_on_misses=overhead_on_misses)


def measure_profile(backend: "Backend", key: ProfileKey, ids: Sequence[int],
                    repeats: int = 3, log: Callable[[str], None] | None = None
                    ) -> EngineProfile:
    """`key.engine`'s profile measured now through `backend` on a prompt of
    `key.context` tokens made of `ids` repeated: a search prompt's text as token ids,
    without its chat template (a template's end of turn would end the decode)."""
    from autotune.schema.config import DecodeConfig

    began = time.perf_counter()
    engine = key.engine
    ks = profile_ks(engine)
    prompt = repeated_prompt(ids, key.context, max(ks))
    configs = [(0, DecodeConfig(engine=engine))] + [(k, profile_config(engine, k))
                                                    for k in ks]
    runs, lookups = _interleaved(backend, configs, prompt, repeats, engine)
    ar = runs[0].point(runs[0])
    spec = [r.point(runs[0]) for r in runs[1:]]
    low = [f"k={r.k}: {r.acceptance:.0%}" for r in runs[1:] if r.acceptance < 0.5]
    if log is not None:
        for r, point in zip(runs[1:], spec):
            log(f"{engine} k={r.k}: {point.step_ms:.2f} ms a step verifying "
                f"{point.verified:.2f} tokens on average ({r.acceptance:.0%} of drafts "
                f"accepted; AR {ar.step_ms:.2f} ms)")
    notes: list[str] = []
    if low:
        notes.append("drafts accepted less than half the time on the repeated prompt ("
                     + ", ".join(low) + ")")
    drafter = drafter_of(profile_config(engine, ks[0]))
    lookup_ms = 1000 * statistics.median(lookups) if lookups else None
    from autotune.backends.registry import BACKEND_RECORDS

    record = BACKEND_RECORDS.get(engine)
    return fit_profile(key, ar, spec, drafter, lookup_ms, time.perf_counter() - began, notes,
                       overhead_on_misses=record is None or record.spec_overhead_on_misses)
