"""The one place that times anything.

`measure` runs a candidate DecodeConfig and the autoregressive baseline over the same
prompts in the same process, interleaved prompt by prompt (alternating which goes
first, so slow drifts of a shared machine hit both alike), after an untimed warm-up of
both. Time is `perf_counter` behind a device synchronisation (`Clock`). Latency is per
generated token of the decode phase (the first token comes from the prefill, which is
reported apart), tokens counted as actually generated. Speedup is the median over
prompts of baseline latency / candidate latency: each ratio is taken between runs made
seconds apart, which is as close as a noisy machine allows.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

from autotune.decoding.config import DecodeConfig
from autotune.decoding.decoder import Generation, SpeculativeDecoder
from autotune.models.loading import LoadedModel
from autotune.workloads import Prompt, encode_prompt

WARMUP_TOKENS = 8


class Clock:
    """`perf_counter` after the device has finished its queued work."""

    def __init__(self, device: torch.device) -> None:
        self._sync = torch.cuda.synchronize if device.type == "cuda" else None

    def __call__(self) -> float:
        if self._sync is not None:
            self._sync()
        return time.perf_counter()


@dataclass
class PromptRun:
    """Both decoders' runs on one prompt."""

    prompt_id: str
    category: str
    baseline: Generation
    candidate: Generation

    @staticmethod
    def per_token(gen: Generation) -> float | None:
        decoded = len(gen.tokens) - 1
        return gen.decode_s / decoded if decoded > 0 else None


@dataclass
class Measurement:
    """Everything one `measure` call saw; `summary()` is the JSON of `autotune measure`."""

    config: DecodeConfig
    model: str
    draft: str | None
    device: str
    dtype: str
    max_new_tokens: int
    runs: list[PromptRun]
    weights_bytes: int
    peak_memory_bytes: int
    memory_kind: str                 # how peak memory was taken (see `measure`)

    def summary(self) -> dict[str, Any]:
        cand = [r.candidate for r in self.runs]
        base = [r.baseline for r in self.runs]
        rounds = [t for g in cand for t in g.rounds]
        drafted = sum(t.drafted for t in rounds)
        accepted = sum(t.accepted for t in rounds)
        draft_s = sum(t.draft_s for t in rounds)
        verify_s = sum(t.verify_s for t in rounds)
        # Leviathan's α: of the draft tokens the verifier reached (all up to and
        # including the first rejection), the share accepted. For a tree, a level is
        # one "token": the walk reaches min(depth, accepted + 1) levels.
        reached = sum(min(t.draft_depth, t.accepted + 1) for t in rounds)
        base_rounds = [t for g in base for t in g.rounds]
        base_ms = _ms_per_token(base)
        per_token = [(PromptRun.per_token(r.baseline), PromptRun.per_token(r.candidate))
                     for r in self.runs]
        ratios = [b / c for b, c in per_token if b and c]
        mismatched = [r.prompt_id for r in self.runs if r.baseline.tokens != r.candidate.tokens]
        return {
            "config": self.config.to_dict(),
            "model": self.model,
            "draft": self.draft,
            "device": self.device,
            "dtype": self.dtype,
            "prompts": len(self.runs),
            "max_new_tokens": self.max_new_tokens,
            "tokens_generated": sum(len(g.tokens) for g in cand),
            "latency_ms_per_token": _ms_per_token(cand),
            "baseline_latency_ms_per_token": _ms_per_token(base),
            "speedup": statistics.median(ratios) if ratios else None,
            "prefill_ms": 1000 * statistics.fmean(g.prefill_s for g in cand),
            "baseline_prefill_ms": 1000 * statistics.fmean(g.prefill_s for g in base),
            "rounds": len(rounds),
            "mean_accepted_tokens": (accepted + len(rounds)) / len(rounds) if rounds else None,
            "acceptance_rate": accepted / drafted if drafted else None,
            "pos_acc": position_acceptance(rounds),
            "depth_acceptance": depth_acceptance(rounds),
            # Tokens in the target's verify pass per round, the pending one included
            # (a chain: drafted + 1; a tree: its nodes + the root).
            "mean_verified_tokens": (statistics.fmean(t.verified for t in rounds)
                                     if rounds else None),
            "draft_time_share": draft_s / (draft_s + verify_s) if rounds else None,
            "acceptance_alpha": accepted / reached if reached else None,
            "mean_drafted_tokens": drafted / len(rounds) if rounds else None,
            # Leviathan's c: one drafted token's cost in units of one AR target step.
            "cost_ratio": (1000 * draft_s / drafted / base_ms) if drafted and base_ms else None,
            **_time_split("", cand, rounds),
            **_time_split("baseline_", base, base_rounds),
            "peak_memory_mb": self.peak_memory_bytes / 2**20,
            "memory_kind": self.memory_kind,
            "lossless": (not mismatched) if self.config.greedy else None,
            "mismatched_prompts": mismatched if self.config.greedy else [],
        }

    def traces(self) -> list[dict[str, Any]]:
        """Per prompt, per round: the candidate's full trace (for replay and plots)."""
        return [{"prompt_id": r.prompt_id, "category": r.category,
                 "prompt_len": r.candidate.prompt_len, "tokens": r.candidate.tokens,
                 "prefill_s": r.candidate.prefill_s, "decode_s": r.candidate.decode_s,
                 "baseline_decode_s": r.baseline.decode_s,
                 "baseline_tokens": len(r.baseline.tokens),
                 "rounds": [asdict(t) for t in r.candidate.rounds]} for r in self.runs]


def _ms_per_token(gens: list[Generation]) -> float | None:
    decoded = sum(len(g.tokens) - 1 for g in gens)
    return 1000 * sum(g.decode_s for g in gens) / decoded if decoded else None


def _time_split(prefix: str, gens: list[Generation], rounds: list) -> dict[str, float | None]:
    """Decode time per generated token split into drafting, the target's verify
    forward and the rest of the loop (`<prefix>draft_ms_per_token`, ...)."""
    decoded = sum(len(g.tokens) - 1 for g in gens)
    out: dict[str, float | None] = {}
    for part in ("draft", "verify", "other"):
        total = sum(getattr(t, f"{part}_s") for t in rounds)
        out[f"{prefix}{part}_ms_per_token"] = 1000 * total / decoded if decoded else None
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


def measure(target: LoadedModel, config: DecodeConfig, prompts: list[Prompt],
            max_new_tokens: int, seed: int = 0, draft: LoadedModel | None = None,
            on_prompt: Callable[[int, PromptRun, "Measurement"], None] | None = None
            ) -> Measurement:
    """Time `config` against the AR baseline on `prompts`, interleaved.

    `on_prompt(index, run, so_far)` is called after each prompt with the Measurement of
    the prompts done so far, so a pruner sees a metric computed as the final one is.

    Peak memory: on CUDA, the allocator's peak over the candidate's runs; on CPU, where
    no allocator keeps such a count, the bytes of the weights read plus the largest KV
    caches a candidate run allocated (both exact; the caches are preallocated).
    """
    candidate = SpeculativeDecoder(target, config, draft)
    baseline = SpeculativeDecoder(target, DecodeConfig(temperature=config.temperature,
                                                       top_p=config.top_p), draft)
    clock = Clock(target.device)
    cuda = target.device.type == "cuda"
    encoded = [encode_prompt(target.tokenizer, p) for p in prompts]

    def generator(index: int) -> torch.Generator:
        return torch.Generator(device=target.device).manual_seed(seed + index)

    # Warm-up: first calls pay for allocator growth, kernel selection and lazy imports.
    for decoder in (baseline, candidate):
        decoder.generate(encoded[0], min(WARMUP_TOKENS, max_new_tokens), clock, generator(0))

    weights = target.forward.nbytes() + (draft.forward.nbytes() if draft is not None else 0)

    def result(runs: list[PromptRun], peak: int) -> Measurement:
        return Measurement(
            config=config, model=target.name,
            draft=draft.name if draft is not None else None, device=str(target.device),
            dtype=str(target.dtype).removeprefix("torch."), max_new_tokens=max_new_tokens,
            runs=runs, weights_bytes=weights, peak_memory_bytes=peak,
            memory_kind="cuda_max_allocated" if cuda else "weights_plus_kv_cache")

    peak = 0
    runs: list[PromptRun] = []
    for index, (prompt, ids) in enumerate(zip(prompts, encoded)):
        results: dict[str, Generation] = {}
        order = ("baseline", "candidate") if index % 2 == 0 else ("candidate", "baseline")
        for name in order:
            if cuda and name == "candidate":
                torch.cuda.reset_peak_memory_stats(target.device)
            decoder = baseline if name == "baseline" else candidate
            results[name] = decoder.generate(ids, max_new_tokens, clock, generator(index))
            if name == "candidate":
                peak = max(peak, torch.cuda.max_memory_allocated(target.device) if cuda
                           else weights + results[name].cache_bytes)
        run = PromptRun(prompt.prompt_id, prompt.category, results["baseline"],
                        results["candidate"])
        runs.append(run)
        if on_prompt is not None:
            on_prompt(index, run, result(list(runs), peak))
    return result(runs, peak)
