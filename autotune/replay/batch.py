"""Replay at batch size B: the batched decoder's throughput predicted without decoding.

Acceptance is per row and exact as at batch size 1 (each row of the batched decoder
drafts and verifies exactly as the single-row decoder does), so the per-prompt replayed
rounds of `Replayer.replay` carry over unchanged. What changes with B is the cost of a
round: one target pass over the active rows, each as wide as the round's longest draft
plus one, read from the batch profile (`profile.batch_forward_profile`: ms per B x
tokens per row), plus each active row's own drafting and bookkeeping (the batched
decoder drafts row by row, so those add up as at batch size 1). Rows leave the batch
as their output ends, as in the decoder.

The profile is a bare forward; the single-row cost model's target curve is the same
forward as the decoder loop runs it. Each tokens-per-row column is scaled by their
ratio at B = 1, so at B = 1 this predicts exactly what the single-row replay predicts.
"""

from __future__ import annotations

from typing import Any

from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import Generation
from autotune.measure import paired
from autotune.replay.costs import interpolate


class BatchCost:
    """ms of one batched verify pass over b rows x n tokens per row, from a batch profile
    scaled to the single-row loop's curve (module doc)."""

    def __init__(self, batch_points: list[dict[str, Any]], loop_curve: list[list[float]]
                 ) -> None:
        self.by_batch: dict[int, list[list[float]]] = {}
        for point in batch_points:
            self.by_batch.setdefault(int(point["batch_size"]), []).append(
                [float(point["tokens"]), float(point["ms"])])
        if 1 not in self.by_batch:
            raise ValueError("a batch profile needs batch size 1 to scale from")
        self.loop_curve = loop_curve

    def _bare(self, b: int, n: float) -> float:
        sizes = sorted(self.by_batch)
        if b in self.by_batch:
            return interpolate(self.by_batch[b], n)
        # Linear in b between the profiled sizes (straight on past the largest).
        lower = max((s for s in sizes if s < b), default=sizes[0])
        upper = min((s for s in sizes if s > b), default=None)
        if upper is None:
            if len(sizes) < 2:
                return interpolate(self.by_batch[lower], n) * b / lower
            lower, upper = sizes[-2], sizes[-1]
        y0, y1 = interpolate(self.by_batch[lower], n), interpolate(self.by_batch[upper], n)
        return y0 + (y1 - y0) * (b - lower) / (upper - lower)

    def ms(self, b: int, n: int) -> float:
        bare_one = self._bare(1, n)
        scale = interpolate(self.loop_curve, n) / bare_one if bare_one > 0 else 1.0
        return self._bare(b, n) * scale


def _batch_seconds(rows: list[Generation], cost: BatchCost) -> float:
    """Decode seconds of one batch whose rows replay `rows`' rounds together."""
    total = 0.0
    for i in range(max(len(g.rounds) for g in rows)):
        active = [g.rounds[i] for g in rows if i < len(g.rounds)]
        width = 1 + max(r.drafted for r in active)
        total += cost.ms(len(active), width) / 1000
        total += sum(r.draft_s + r.other_s for r in active)
    return total


def predict_batched(replayer: Any, cost: BatchCost, config: DecodeConfig, batch_size: int
                    ) -> dict[str, Any]:
    """The predicted `measure --batch-size` figures of `config` at `batch_size`: the
    replayer's prompts in consecutive batches (a short last batch left out, as measured),
    each paired with batched AR at the same B."""
    measurement = replayer.replay(config)
    runs = measurement.runs
    n = len(runs) // batch_size
    pairs = []
    for i in range(n):
        group = runs[i * batch_size:(i + 1) * batch_size]
        cand = [r.candidate for r in group]
        base = [r.baseline for r in group]
        rounds = [t for g in cand for t in g.rounds]
        pairs.append(paired.PromptPair(
            "+".join(r.prompt_id for r in group), "batch",
            _batch_seconds(base, cost), sum(g.decoded for g in base),
            _batch_seconds(cand, cost), sum(g.decoded for g in cand),
            rounds=len(rounds), emitted=sum(t.emitted for t in rounds)))
    cand_s = sum(p.candidate_s for p in pairs)
    base_s = sum(p.baseline_s for p in pairs)
    return {"batch_size": batch_size, "batches": n, "speedup": paired.speedup(pairs),
            "tokens_per_s": sum(p.candidate_tokens for p in pairs) / cand_s if cand_s else None,
            "ar_tokens_per_s": sum(p.baseline_tokens for p in pairs) / base_s if base_s else None,
            "mean_accepted_tokens": paired.tau(pairs), "fidelity": "replay"}
