"""Measurement at batch size B: throughput of a config against batched AR at the same B.

The prompts are cut into batches of B in workload order (a workload is interleaved by
category, so a batch mixes categories); a last batch short of B is left out, since a
smaller batch measures another batch size. Every batch decodes twice in the same
process, interleaved: batched AR (no drafter, the same loop) and the candidate, the
order alternating from batch to batch so a drifting machine hits both arms alike, after
an untimed warm-up of both on the first batch.

A batch is the unit of the paired statistics (autotune.measure.paired): its AR and candidate
decode seconds and decoded tokens over all rows make one pair, so the speedup is the
ratio of output tokens/s, with a bootstrap interval over batches. Timing is the
decoder's clock (`measure.Clock`: perf_counter after a device sync).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

import torch

from autotune.common.errors import AutotuneError
from autotune.decoding.batched import BatchedDecoder, BatchGeneration
from autotune.schema.config import DecodeConfig
from autotune.measure import paired
from autotune.measure.measurement import WARMUP_TOKENS, Clock
from autotune.measure.results import PromptRun, lossless_verdicts
from autotune.records.summary import MeasurementSummary
from autotune.models.loading import LoadedModel
from autotune.workloads.prompts import Prompt, encode_prompt


@dataclass
class BatchRun:
    """Both arms' runs on one batch of prompts."""

    prompts: list[Prompt]
    baseline: BatchGeneration
    candidate: BatchGeneration

    @property
    def batch_id(self) -> str:
        return "+".join(p.prompt_id for p in self.prompts)

    def pair(self) -> paired.PromptPair:
        rounds = [t for g in self.candidate.rows for t in g.rounds]
        return paired.PromptPair(
            self.batch_id, "batch", self.baseline.decode_s, self.baseline.decoded,
            self.candidate.decode_s, self.candidate.decoded, rounds=len(rounds),
            emitted=sum(t.emitted for t in rounds))


@dataclass
class BatchMeasurement:
    """What `measure_batched` saw; `summary()` is `autotune measure --batch-size`'s JSON."""

    config: DecodeConfig
    batch_size: int
    max_new_tokens: int
    runs: list[BatchRun]
    unused_prompts: int

    def record(self) -> MeasurementSummary:
        """`summary()` as the typed record."""
        return MeasurementSummary.from_json(self.summary())

    def summary(self) -> dict[str, Any]:
        pairs = [r.pair() for r in self.runs]
        ci = paired.interval(pairs)
        cand_s = sum(r.candidate.decode_s for r in self.runs)
        base_s = sum(r.baseline.decode_s for r in self.runs)
        cand_tokens = sum(r.candidate.decoded for r in self.runs)
        base_tokens = sum(r.baseline.decoded for r in self.runs)
        rows = [(p, c, b) for r in self.runs
                for p, c, b in zip(r.prompts, r.candidate.rows, r.baseline.rows)]
        # τ per row: each row's tokens per round (a round is one verify pass it was in).
        row_tau = [sum(t.emitted for t in c.rounds) / len(c.rounds) for _, c, _ in rows
                   if c.rounds]
        # A row's per-token latency: the time from the batch's decode start until the row
        # finished, over the tokens it decoded (what one request of the batch sees).
        latency = [c.decode_s / c.decoded for _, c, _ in rows if c.decoded]
        base_latency = [b.decode_s / b.decoded for _, _, b in rows if b.decoded]
        # Each row against its batched-AR row: exact, a near-tie the dtype's rounding
        # explains, or real (measure/divergence.py); `lossless` fails on a real one.
        verdicts = lossless_verdicts([PromptRun(p.prompt_id, p.category, b, c)
                                      for p, c, b in rows], self.config.greedy)
        drafted = sum(t.drafted for _, c, _ in rows for t in c.rounds)
        accepted = sum(t.accepted for _, c, _ in rows for t in c.rounds)
        return {
            "config": self.config.to_dict(),
            "batch_size": self.batch_size,
            "batches": len(self.runs),
            "prompts": len(rows),
            "unused_prompts": self.unused_prompts,
            "max_new_tokens": self.max_new_tokens,
            "tokens_per_s": cand_tokens / cand_s if cand_s > 0 else None,
            "ar_tokens_per_s": base_tokens / base_s if base_s > 0 else None,
            "speedup": paired.speedup(pairs),
            "speedup_ci90": list(ci) if ci else None,
            "latency_ms_per_token": 1000 * statistics.fmean(latency) if latency else None,
            "baseline_latency_ms_per_token": (1000 * statistics.fmean(base_latency)
                                              if base_latency else None),
            "mean_accepted_tokens": paired.tau(pairs),
            "tau_per_row": row_tau,
            "acceptance_rate": accepted / drafted if drafted else None,
            "verify_passes": sum(len(r.candidate.rounds) for r in self.runs),
            "mean_verify_width": (statistics.fmean(x.width for r in self.runs
                                                   for x in r.candidate.rounds)
                                  if any(r.candidate.rounds for r in self.runs) else None),
            **verdicts.to_json(),
        }


def batches_of(prompts: list[Prompt], batch_size: int) -> tuple[list[list[Prompt]], int]:
    """Consecutive batches of `batch_size` prompts and the number left over."""
    if batch_size < 1:
        raise AutotuneError("--batch-size must be at least 1")
    if len(prompts) < batch_size:
        raise AutotuneError(f"--batch-size {batch_size} needs at least {batch_size} prompts; "
                            f"the workload has {len(prompts)}")
    n = len(prompts) // batch_size
    return [prompts[i * batch_size:(i + 1) * batch_size] for i in range(n)], \
        len(prompts) - n * batch_size


def measure_batched(target: LoadedModel, config: DecodeConfig, prompts: list[Prompt],
                    batch_size: int, max_new_tokens: int, seed: int = 0,
                    draft: LoadedModel | None = None,
                    on_batch: Callable[[int, BatchRun], None] | None = None
                    ) -> BatchMeasurement:
    """Decode `prompts` in batches of `batch_size` with batched AR and with `config`,
    interleaved (see the module doc)."""
    batches, unused = batches_of(prompts, batch_size)
    baseline = BatchedDecoder(target, DecodeConfig(temperature=config.temperature,
                                                   top_p=config.top_p, engine=config.engine))
    candidate = BatchedDecoder(target, config, draft)
    clock = Clock(target.device)
    encoded = [[encode_prompt(target.tokenizer, p) for p in batch] for batch in batches]

    def generator(index: int) -> torch.Generator | None:
        return None if config.greedy else torch.Generator().manual_seed(seed + index)

    for decoder in (baseline, candidate):         # untimed warm-up
        decoder.generate(encoded[0], min(WARMUP_TOKENS, max_new_tokens), clock, generator(0))
    runs: list[BatchRun] = []
    for index, (batch, ids) in enumerate(zip(batches, encoded)):
        first, second = (baseline, candidate) if index % 2 == 0 else (candidate, baseline)
        categories = [p.category for p in batch]
        outs = {id(d): d.generate(ids, max_new_tokens, clock, generator(index),
                                  categories=categories)
                for d in (first, second)}
        run = BatchRun(batch, outs[id(baseline)], outs[id(candidate)])
        runs.append(run)
        if on_batch is not None:
            on_batch(index, run)
    return BatchMeasurement(config, batch_size, max_new_tokens, runs, unused)
