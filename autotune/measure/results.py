"""What a measurement saw: each prompt's two runs (`PromptRun`: the baseline's and the
candidate's `Generation`), the whole of one arm (`Measurement`), and the figures read
off them (`Measurement.record()`: a `MeasurementSummary`; the lossless verdicts; the
acceptance by position and depth).

`measurement.py` makes them (it is the one place that times); the search, the replay
tier (which predicts a `Measurement`), the batch schedule and the report's figures read
them. Times and tokens here were measured elsewhere: nothing in this module reads a clock.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import Generation
from autotune.measure import divergence, paired
from autotune.measure.near_tie_baseline import far_above
from autotune.records.summary import MeasurementSummary

__all__ = ["LosslessVerdicts", "Measurement", "PromptRun", "depth_acceptance",
           "lossless_tier", "lossless_verdicts", "position_acceptance"]


@dataclass
class PromptRun:
    """Both decoders' runs on one prompt."""

    prompt_id: str
    category: str
    baseline: Generation
    candidate: Generation

    def pair(self) -> paired.PromptPair:
        """The figures the paired statistic reads (decode time and decoded tokens)."""
        return paired.PromptPair(
            self.prompt_id, self.category, self.baseline.decode_s,
            self.baseline.decoded, self.candidate.decode_s,
            self.candidate.decoded, rounds=len(self.candidate.rounds),
            emitted=sum(t.emitted for t in self.candidate.rounds))

    def verdict(self) -> divergence.Divergence:
        """The candidate's output against the baseline's (greedy runs): exact, a near-tie
        the dtype's rounding explains, or a real divergence (measure/divergence.py)."""
        return divergence.classify(self.baseline, self.candidate)


@dataclass
class Measurement:
    """Everything one `measure` call saw; `record()` its figures, `summary()` their JSON
    (what `autotune measure --json` prints)."""

    config: DecodeConfig
    model: str
    draft: str | None
    device: str
    dtype: str
    max_new_tokens: int
    runs: list[PromptRun]
    weights_bytes: int | None
    peak_memory_bytes: int | None    # None: the engine's memory is not measured
    memory_kind: str                 # how peak memory was taken (see `measure`)
    measured_by: str = "autotune"    # the backend (engine) that ran both arms
    measured_by_label: str = "autotune's decoder"
    token_exact: bool = True         # the backend's (`Backend.token_exact`)
    # Greedy low precision, our decoder: AR against itself decoded in chunks, runs per
    # verdict kind over the prompts (measure/near_tie_baseline.py); None elsewhere.
    near_tie_baseline: dict[str, int] | None = None
    # Our decoder on static forwards: how their passes ran ("cuda graphs", "eager",
    # "eager (capture failed: ...)"; per model where they differ), and the graphs
    # captured during this arm's and the baseline's timed runs (0: none was timed).
    # None: no static forward ran (an engine, or the plain eager forward).
    graphs: str | None = None
    graph_captures_timed: int | None = None

    def summary(self) -> dict[str, Any]:
        """The JSON of `autotune measure --json` (`record().to_json()`)."""
        return self.record().to_json()

    def record(self) -> MeasurementSummary:
        """Every figure of this measurement as a typed record."""
        cand = [r.candidate for r in self.runs]
        base = [r.baseline for r in self.runs]
        rounds = [t for g in cand for t in g.rounds]
        drafted = sum(t.drafted for t in rounds)
        accepted = sum(t.accepted for t in rounds)
        # An engine that reports totals only (no rounds): its totals.
        totals = [g.draft_totals for g in cand if g.draft_totals is not None]
        if totals and not rounds:
            drafted, accepted = (sum(t[0] for t in totals), sum(t[1] for t in totals))
        # An engine's rounds carry no draft / verify times: those figures are None.
        timed_parts = all(g.timed_parts for g in cand)
        draft_s = sum(t.draft_s for t in rounds)
        verify_s = sum(t.verify_s for t in rounds)
        # Leviathan's α: of the draft tokens the verifier reached (all up to and
        # including the first rejection), the share accepted. For a tree, a level is
        # one "token": the walk reaches min(depth, accepted + 1) levels.
        reached = sum(min(t.draft_depth, t.accepted + 1) for t in rounds)
        base_rounds = [t for g in base for t in g.rounds]
        base_ms = _ms_per_token(base)
        pairs = [r.pair() for r in self.runs]
        ci = paired.interval(pairs)
        verdicts = lossless_verdicts(self.runs, self.config.greedy, self.near_tie_baseline)
        return MeasurementSummary(**{
            "config": self.config.to_dict(),
            "model": self.model,
            "draft": self.draft,
            "measured_by": self.measured_by,
            "measured_by_label": self.measured_by_label,
            "device": self.device,
            "dtype": self.dtype,
            "prompts": len({r.prompt_id for r in self.runs}),
            "runs": len(self.runs),
            "max_new_tokens": self.max_new_tokens,
            "tokens_generated": sum(len(g.tokens) for g in cand),
            "latency_ms_per_token": _ms_per_token(cand),
            "baseline_latency_ms_per_token": _ms_per_token(base),
            "speedup": paired.speedup(pairs),
            "speedup_ci90": list(ci) if ci else None,
            "prefill_ms": 1000 * statistics.fmean(g.prefill_s for g in cand),
            "baseline_prefill_ms": 1000 * statistics.fmean(g.prefill_s for g in base),
            "rounds": len(rounds),
            # τ: tokens appended per round, counted after the EOS / length cut.
            "mean_accepted_tokens": paired.tau(pairs),
            "acceptance_rate": accepted / drafted if drafted else None,
            "drafted_tokens": drafted,
            "accepted_tokens": accepted,
            # The engine's own decode clock (llama-server's timings), where it has one.
            **_engine_clock(cand, base),
            "pos_acc": position_acceptance(rounds),
            "depth_acceptance": depth_acceptance(rounds),
            # Tokens in the target's verify pass per round, the pending one included
            # (a chain: drafted + 1; a tree: its nodes + the root).
            "mean_verified_tokens": (statistics.fmean(t.verified for t in rounds)
                                     if rounds else None),
            "draft_time_share": (draft_s / (draft_s + verify_s)
                                 if rounds and timed_parts else None),
            "acceptance_alpha": accepted / reached if reached else None,
            "mean_drafted_tokens": drafted / len(rounds) if rounds else None,
            # Leviathan's c: one drafted token's cost in units of one AR target step.
            "cost_ratio": ((1000 * draft_s / drafted / base_ms)
                           if drafted and base_ms and timed_parts else None),
            **_time_split("", cand, rounds),
            **_time_split("baseline_", base, base_rounds),
            "peak_memory_mb": (self.peak_memory_bytes / 2**20
                               if self.peak_memory_bytes is not None else None),
            "memory_kind": self.memory_kind,
            # Greedy: no real divergence from AR (near-ties the dtype explains allowed).
            **verdicts.to_json(),
            # Whether `lossless` judges the config (see Backend.token_exact); False: the
            # engine's own numerics may differ, reported but not held against it.
            "lossless_binding": self.token_exact,
            "graphs": self.graphs,
            "graph_captures_timed": self.graph_captures_timed,
            "by_category": paired.by_category(pairs),
        })

    def traces(self) -> list[dict[str, Any]]:
        """Per prompt, per round: the candidate's full trace (for replay and plots)."""
        return [{"prompt_id": r.prompt_id, "category": r.category,
                 "prompt_len": r.candidate.prompt_len, "tokens": r.candidate.tokens,
                 "prefill_s": r.candidate.prefill_s, "decode_s": r.candidate.decode_s,
                 "baseline_decode_s": r.baseline.decode_s,
                 "baseline_tokens": len(r.baseline.tokens),
                 "rounds": [asdict(t) for t in r.candidate.rounds]} for r in self.runs]


@dataclass(frozen=True)
class LosslessVerdicts:
    """The lossless figures of a summary (`lossless_verdicts`), written into it by
    `to_json` (the near-tie baseline's two keys first, where there is one)."""

    lossless: bool | None
    lossless_tier: str | None
    mismatched_prompts: list[str]
    near_tie_prompts: list[str]
    divergences: dict[str, int] | None
    near_tie_baseline: dict[str, int] | None = None
    near_ties_far_above: bool | None = None

    def to_json(self) -> dict[str, Any]:
        baseline = ({"near_tie_baseline": self.near_tie_baseline,
                     "near_ties_far_above": self.near_ties_far_above}
                    if self.near_tie_baseline is not None else {})
        return {**baseline, "lossless": self.lossless, "lossless_tier": self.lossless_tier,
                "mismatched_prompts": self.mismatched_prompts,
                "near_tie_prompts": self.near_tie_prompts, "divergences": self.divergences}


def lossless_verdicts(runs: Sequence[PromptRun], greedy: bool,
                      near_tie_baseline: dict[str, int] | None = None) -> LosslessVerdicts:
    """The lossless figures of a summary: `lossless` (greedy: no prompt diverged from AR
    beyond a near-tie, no emitted token off its pass's argmax; sampling: None),
    `lossless_tier` ("exact" where float32 must match token for token, "near-tie
    (bfloat16)" where our decoder recorded the passes' numerics), `mismatched_prompts`
    (the prompts with a real divergence: what makes `lossless` False),
    `near_tie_prompts` (those that differ at a near-tie only) and `divergences` (runs
    per verdict: {"exact", "near_tie", "real"}). Each prompt is named once, however
    many of its repeats diverged. Where `near_tie_baseline` (AR against itself in
    chunks, runs per kind) is given, it is reported beside them, and
    `near_ties_far_above` says whether this config's near-tie prompts are far above its
    near-ties (`near_tie_baseline.far_above`): a suspect, not a verdict."""
    if not greedy:
        return LosslessVerdicts(None, None, [], [], None)
    kinds = [(r.prompt_id, r.verdict().kind) for r in runs]
    named = {kind: list(dict.fromkeys(pid for pid, k in kinds if k is kind))
             for kind in divergence.Kind}
    far = None
    if near_tie_baseline is not None:
        far = far_above(len(named[divergence.Kind.NEAR_TIE]), near_tie_baseline["near_tie"],
                        sum(near_tie_baseline.values()))
    return LosslessVerdicts(
        lossless=not named[divergence.Kind.REAL], lossless_tier=lossless_tier(runs),
        mismatched_prompts=named[divergence.Kind.REAL],
        near_tie_prompts=named[divergence.Kind.NEAR_TIE],
        divergences={kind.value: sum(1 for _, k in kinds if k is kind)
                     for kind in divergence.Kind},
        near_tie_baseline=near_tie_baseline, near_ties_far_above=far)


def lossless_tier(runs: Sequence[PromptRun]) -> str:
    """What `lossless` means for `runs`: "near-tie (bfloat16)" where our decoder recorded
    the passes' numerics (greedy low precision), else "exact"."""
    dtypes = [g.numerics.dtype for r in runs for g in (r.candidate, r.baseline)
              if g.numerics is not None]
    return divergence.tier_label(dtypes[0]) if dtypes else "exact"


def _engine_clock(cand: list[Generation], base: list[Generation]) -> dict[str, float | None]:
    """The engine's own decode time per token for both arms and their ratio (baseline
    over candidate), where every generation carries it; {} otherwise."""
    if not cand or any(g.engine_decode_s is None for g in cand + base):
        return {}
    ms = {}
    for name, gens in (("engine", cand), ("engine_baseline", base)):
        decoded = sum(g.decoded for g in gens)
        ms[name] = (1000 * sum(g.engine_decode_s or 0.0 for g in gens) / decoded
                    if decoded else None)
    ratio = (ms["engine_baseline"] / ms["engine"]
             if ms["engine"] and ms["engine_baseline"] else None)
    return {"engine_latency_ms_per_token": ms["engine"],
            "engine_baseline_latency_ms_per_token": ms["engine_baseline"],
            "engine_speedup": ratio}


def _ms_per_token(gens: list[Generation]) -> float | None:
    decoded = sum(g.decoded for g in gens)
    return 1000 * sum(g.decode_s for g in gens) / decoded if decoded else None


def _time_split(prefix: str, gens: list[Generation], rounds: list) -> dict[str, float | None]:
    """Decode time per generated token split into drafting, the target's verify
    forward and the rest of the loop (`<prefix>draft_ms_per_token`, ...); None for an
    engine, whose rounds carry no such times."""
    decoded = sum(g.decoded for g in gens)
    timed = all(g.timed_parts for g in gens)
    out: dict[str, float | None] = {}
    for part in ("draft", "verify", "other"):
        total = sum(getattr(t, f"{part}_s") for t in rounds)
        out[f"{prefix}{part}_ms_per_token"] = (1000 * total / decoded
                                               if decoded and timed else None)
    return out


def position_acceptance(rounds: list) -> list[float]:
    """PosS's position-wise acceptance: entry i-1 is P(A_i | A_{i-1}), the chance the
    i-th draft token (a tree: a node at depth i) is accepted given the one before it
    was (and the draft went that deep)."""
    longest = max((t.draft_depth for t in rounds), default=0)
    out = []
    for i in range(1, longest + 1):
        reached = sum(1 for t in rounds if t.draft_depth >= i and t.accepted >= i - 1)
        if reached == 0:
            break
        out.append(sum(1 for t in rounds if t.accepted >= i) / reached)
    return out


def depth_acceptance(rounds: list) -> list[float]:
    """Acceptance by depth: entry d-1 is the share of rounds whose accepted path
    reached depth d, among the rounds that drafted at least d levels."""
    longest = max((t.draft_depth for t in rounds), default=0)
    out = []
    for d in range(1, longest + 1):
        drafted = [t for t in rounds if t.draft_depth >= d]
        out.append(sum(1 for t in drafted if t.accepted >= d) / len(drafted))
    return out
