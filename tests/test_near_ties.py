"""The low-precision lossless tier (DESIGN.md principle 10): the near-tie classifier on
planted logits, the recorder's argmax check, the finalist rows' verdict codes, and the
broken-verifier power test in bfloat16 on a tiny random Llama (a wrong token accepted
is caught as a real divergence, tier a, not forgiven as a near-tie)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from tiny import llama_model, one_thread, tiny_loaded  # noqa: F401  (autouse fixture)

import autotune.decoding.decoder as decoder_module
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import Generation
from autotune.decoding.numerics import NumericsRecorder, TokenNumerics, records
from autotune.measure.divergence import (
    EPS,
    NOISE_ULPS,
    ULPS,
    Kind,
    bound,
    classify,
    drift,
    tier_label,
    ulp,
)
from autotune.measure.near_tie_baseline import far_above
from autotune.measure.measurement import measure
from autotune.models.loading import LoadedModel
from autotune.search.finalist_figures import figures
from autotune.workloads.prompts import Prompt

BF16 = "bfloat16"
ULP_16 = EPS[BF16] * 16          # bf16's spacing for logits in [16, 32): 0.125


def _gen(tokens: list[int], rows: list[dict[int, float]] | None, dtype: str = BF16,
         violations: int = 0) -> Generation:
    """A Generation whose token i was chosen by a pass with the logits rows[i]
    ({token: logit}, the row's top K)."""
    numerics = None
    if rows is not None:
        ordered = [sorted(r.items(), key=lambda kv: -kv[1]) for r in rows]
        numerics = TokenNumerics(dtype=dtype, values=[[v for _, v in r] for r in ordered],
                                 ids=[[t for t, _ in r] for r in ordered],
                                 argmax_violations=violations)
    return Generation(prompt_len=3, tokens=tokens, prefill_s=0.0, decode_s=0.0, rounds=[],
                      cache_bytes=0, numerics=numerics)


# AR chose 7 at position 1 (logit 20.0 against 8's 19.875: one ulp apart); the
# speculative pass rounded the other way (8 at 20.0, 7 at 19.875) and went on its own way.
SAME = {5: 18.0, 6: 10.0}
AR = _gen([5, 7, 9], [SAME, {7: 20.0, 8: 20.0 - ULP_16, 1: 3.0}, {9: 17.0, 2: 1.0}])
SPEC = _gen([5, 8, 4], [SAME, {8: 20.0, 7: 20.0 - ULP_16, 1: 3.0}, {4: 17.0, 2: 1.0}])


def test_ulp_is_the_dtype_spacing_at_the_magnitude() -> None:
    assert ulp(BF16, 20.0) == ULP_16 and ulp(BF16, -20.0) == ULP_16
    assert ulp(BF16, 1.5) == EPS[BF16] and ulp(BF16, 0.01) == EPS[BF16]   # floored at 1
    assert ulp("float16", 20.0) == 2.0 ** -10 * 16
    assert bound(BF16, 20.0, 19.9) == ULPS[BF16] * ULP_16
    assert tier_label("float32") == "exact" and tier_label(BF16) == "near-tie (bfloat16)"


def test_same_tokens_are_exact() -> None:
    assert classify(AR, AR).kind is Kind.EXACT


def test_a_flip_inside_the_rounding_is_a_near_tie() -> None:
    verdict = classify(AR, SPEC)
    assert verdict.kind is Kind.NEAR_TIE
    assert (verdict.position, verdict.ar_token, verdict.spec_token) == (1, 7, 8)
    assert verdict.ar_gap == pytest.approx(ULP_16) and verdict.spec_gap == pytest.approx(ULP_16)


def test_a_large_gap_in_either_pass_is_real() -> None:
    wide = (ULPS[BF16] + 1) * ULP_16
    far_in_ar = _gen([5, 7, 9], [SAME, {7: 20.0, 8: 20.0 - wide}, {9: 17.0}])
    assert classify(far_in_ar, SPEC).kind is Kind.REAL
    far_in_spec = _gen([5, 8, 4], [SAME, {8: 20.0, 7: 20.0 - wide}, {4: 17.0}])
    verdict = classify(AR, far_in_spec)
    assert verdict.kind is Kind.REAL and verdict.spec_gap == pytest.approx(wide)


def test_two_gaps_are_held_to_their_sum() -> None:
    """Each gap within the bound alone, but together wider than two passes' rounding
    can put apart: a flip only the sum of both differences explains is real."""
    each = 0.6 * ULPS[BF16] * ULP_16
    ar = _gen([5, 7, 9], [SAME, {7: 20.0, 8: 20.0 - each}, {9: 17.0}])
    spec = _gen([5, 8, 4], [SAME, {8: 20.0, 7: 20.0 - each}, {4: 17.0}])
    verdict = classify(ar, spec)
    assert verdict.kind is Kind.REAL and "adding up" in verdict.why
    within = 0.4 * ULPS[BF16] * ULP_16
    ar = _gen([5, 7, 9], [SAME, {7: 20.0, 8: 20.0 - within}, {9: 17.0}])
    spec = _gen([5, 8, 4], [SAME, {8: 20.0, 7: 20.0 - within}, {4: 17.0}])
    assert classify(ar, spec).kind is Kind.NEAR_TIE


def _taught(gen: Generation, off: dict[int, float]) -> Generation:
    """`gen` with a teacher-forced pass equal to its recorded rows but for position i's
    logits, `off[i]` higher (tier b at every position reads the difference)."""
    assert gen.numerics is not None
    teacher = [[v + off.get(i, 0.0) for v in row] for i, row in enumerate(gen.numerics.values)]
    return dataclasses.replace(gen, numerics=dataclasses.replace(gen.numerics, teacher=teacher))


def test_a_pass_off_its_teacher_forced_logits_is_real_at_any_position() -> None:
    """Position 2 comes after the near-tie at 1, where nothing was compared before: a
    row further than the noise from the clean pass makes the prompt real."""
    beyond = (NOISE_ULPS[BF16] + 1) * ULP_16          # row 2's logits sit at 17.0
    verdict = classify(_taught(AR, {}), _taught(SPEC, {2: beyond}))
    assert verdict.kind is Kind.REAL and verdict.position == 2
    assert verdict.drift_ulps == pytest.approx(NOISE_ULPS[BF16] + 1)
    assert "speculative" in verdict.why
    # The same in AR's own run (its passes are checked too), and on exact outputs.
    assert "AR run" in classify(_taught(AR, {2: beyond}), _taught(AR, {})).why
    # Within the noise: the near-tie stands.
    inside = (NOISE_ULPS[BF16] - 1) * ULP_16
    assert classify(_taught(AR, {1: inside}), _taught(SPEC, {2: inside})).kind is Kind.NEAR_TIE
    assert drift(_taught(SPEC, {2: inside}).numerics) == (2, pytest.approx(NOISE_ULPS[BF16] - 1))
    assert drift(SPEC.numerics) is None                 # no teacher pass: nothing to read


def test_far_above_reads_a_count_against_the_baselines_rate() -> None:
    assert not far_above(10, 5, 40)                     # twice, but within its spread
    assert far_above(22, 5, 40) and far_above(6, 0, 8)
    assert not far_above(3, 0, 8)                       # a baseline of 0 is no certainty
    assert not far_above(4, 4, 8) and not far_above(0, 0, 0)


def test_a_token_missing_from_a_top_k_is_real() -> None:
    # The speculative token is not among AR's top K at the divergence: no proof.
    ar = _gen([5, 7, 9], [SAME, {7: 20.0, 1: 19.99}, {9: 17.0}])
    verdict = classify(ar, SPEC)
    assert verdict.kind is Kind.REAL and verdict.ar_gap is None and "top K" in verdict.why


def test_any_difference_in_float32_is_real() -> None:
    # float32 records no numerics: a difference must not happen at all.
    assert classify(_gen([5, 7], None, "float32"), _gen([5, 8], None, "float32")).kind is Kind.REAL
    assert classify(_gen([5, 7], None), _gen([5, 7], None)).kind is Kind.EXACT
    # Even planted float32 logits one ulp apart do not make a near-tie.
    f32 = dict(dtype="float32")
    ar = _gen([5, 7, 9], [SAME, {7: 20.0, 8: 19.999}, {9: 1.0}], **f32)
    spec = _gen([5, 8, 9], [SAME, {8: 20.0, 7: 19.999}, {9: 1.0}], **f32)
    assert classify(ar, spec).kind is Kind.REAL


def test_an_argmax_violation_is_real_even_at_a_tie() -> None:
    broken = dataclasses.replace(SPEC, numerics=dataclasses.replace(SPEC.numerics,
                                                                    argmax_violations=1))
    assert classify(AR, broken).kind is Kind.REAL
    assert classify(AR, dataclasses.replace(AR, numerics=broken.numerics)).kind is Kind.REAL


def test_the_recorder_keeps_the_top_k_and_counts_tokens_off_the_argmax() -> None:
    rows = torch.tensor([[0.0, 3.0, 1.0, 3.0], [5.0, 1.0, 2.0, 0.0]], dtype=torch.bfloat16)
    recorder = NumericsRecorder(torch.bfloat16, top_k=2)
    recorder.add(rows[:1], [3])              # a tie at the maximum: an argmax too
    recorder.add(rows[1:], [2])              # 2.0 < 5.0: not the argmax
    out = recorder.finish()
    assert out.dtype == BF16 and out.argmax_violations == 1
    assert out.values == [[3.0, 3.0], [5.0, 2.0]] and out.ids[1] == [0, 2]
    assert out.logit(1, 2) == 2.0 and out.logit(1, 3) is None
    assert records(torch.bfloat16, True) and records(torch.float16, True)
    assert not records(torch.float32, True) and not records(torch.bfloat16, False)


def _row(pid: str, code: int) -> list[Any]:
    return [pid, "code", 1.0, 10, 0.5, 10, 4, 10, 8, 6, code]


def test_finalist_rows_carry_the_verdict_and_old_rows_still_read() -> None:
    rows = [_row("a", 1), _row("b", 2), _row("c", 0), _row("b", 1)]
    out = figures(rows, None, 1, 0.9, greedy=True, token_exact=True)
    assert out.lossless is False and out.mismatched_prompts == ["c"]
    assert out.near_tie_prompts == ["b"]
    assert out.divergences == {"exact": 2, "near_tie": 1, "real": 1}
    # Rows written before the codes: 1 same tokens, 0 differed (a failure then, and now).
    old = figures([_row("a", 1), _row("b", 0)], None, 1, 0.9, greedy=True, token_exact=True)
    assert old.lossless is False and old.mismatched_prompts == ["b"]
    assert figures([_row("a", 2)], None, 1, 0.9, True, True).lossless is True


# ------------------------------------------------------------------ bf16 power test
SCALE = 2.0
PROMPTS = [Prompt("t1 t2 t3 t4 t1 t2", "code", "p0"), Prompt("t5 t6 t7 t5 t6", "code", "p1"),
           Prompt("t9 t8 t9 t8 t9", "chat", "p2")]
MAX_NEW = 10


def _bf16(seed: int, layers: int) -> LoadedModel:
    hf = llama_model(seed=seed, layers=layers, scale=SCALE).to(torch.bfloat16)
    return dataclasses.replace(tiny_loaded(hf, name=f"tiny-bf16-{seed}"), dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def target() -> LoadedModel:
    return _bf16(0, 4)


@pytest.fixture(scope="module")
def draft() -> LoadedModel:
    return _bf16(5, 2)


def test_a_broken_verifier_is_caught_in_bf16(target, draft, monkeypatch) -> None:
    """A greedy verifier that accepts one draft token past the first mismatch, on for
    p1 only: in bf16 the near-tie allowance must not forgive it. The wrong token is no
    argmax of the pass that verified it (tier a): p1 is a real divergence."""
    good = decoder_module.greedy_verify
    broken = {"on": False, "corrupted": 0}

    def accept_one_too_many(draft_tokens: torch.Tensor, target_logits: torch.Tensor):
        n, nxt = good(draft_tokens, target_logits)
        if broken["on"] and int(n[0]) < draft_tokens.shape[1]:
            broken["corrupted"] += 1
            n = n + 1
            nxt = target_logits.argmax(dim=-1).gather(1, n[:, None]).squeeze(1)
        return n, nxt

    monkeypatch.setattr(decoder_module, "greedy_verify", accept_one_too_many)

    def switch(index: int, run: Any, so_far: Any) -> None:
        broken["on"] = index == 0

    config = DecodeConfig(method="draft_model", k=3)
    result = measure(target, config, PROMPTS, MAX_NEW, draft=draft, on_prompt=switch)
    summary = result.summary()
    assert broken["corrupted"] > 0
    assert result.runs[1].candidate.numerics.argmax_violations > 0
    assert summary["lossless"] is False and summary["mismatched_prompts"] == ["p1"]
    assert summary["divergences"]["real"] == 1
    assert summary["lossless_tier"] == "near-tie (bfloat16)"

    # Control: the real verifier in bf16 is lossless (exact or near-ties only).
    monkeypatch.setattr(decoder_module, "greedy_verify", good)
    summary = measure(target, config, PROMPTS, MAX_NEW, draft=draft).summary()
    assert summary["lossless"] is True and summary["mismatched_prompts"] == []
    assert summary["divergences"]["real"] == 0
    assert sum(summary["divergences"].values()) == len(PROMPTS)


def test_batched_rows_record_and_judge_in_bf16(target) -> None:
    """The batched decoder records each row's numerics as the single-row one does, and
    its summary judges each row against its batched-AR row."""
    from autotune.measure.batched import measure_batched
    prompts = PROMPTS + [Prompt("t3 t4 t3 t4", "chat", "p3")]
    result = measure_batched(target, DecodeConfig(method="ngram", k=3, ngram_min=1,
                                                  ngram_max=2), prompts, 2, MAX_NEW)
    rows = [g for run in result.runs for g in run.candidate.rows]
    assert all(g.numerics is not None and len(g.numerics) == len(g.tokens)
               and g.numerics.argmax_violations == 0 for g in rows)
    summary = result.summary()
    assert summary["lossless"] is True and summary["lossless_tier"] == "near-tie (bfloat16)"
    assert sum(summary["divergences"].values()) == len(prompts)


def test_trial_metrics_keep_the_near_tie_counts_where_they_apply() -> None:
    from autotune.records.summary import MeasurementSummary
    counts = {"exact": 5, "near_tie": 2, "real": 0}
    kept = MeasurementSummary.from_json(
        {"lossless": True, "lossless_tier": "near-tie (bfloat16)", "divergences": counts,
         "near_tie_prompts": ["a", "b"]}).stored_json()
    assert kept["near_ties"] == 2 and kept["real_divergences"] == 0
    assert kept["near_tie_prompts"] == ["a", "b"] and "divergences" not in kept
    exact = MeasurementSummary.from_json(
        {"lossless": True, "lossless_tier": "exact",
         "divergences": {"exact": 7, "near_tie": 0, "real": 0}}).stored_json()
    assert "near_ties" not in exact


def test_measure_text_names_the_tier_and_the_near_tie_prompts() -> None:
    from autotune.cli.measure import format_summary
    text = format_summary({"config": {"method": "ngram"}, "lossless": True,
                           "lossless_tier": "near-tie (bfloat16)", "mismatched_prompts": [],
                           "near_tie_prompts": ["a", "c"],
                           "divergences": {"exact": 3, "near_tie": 2, "real": 0},
                           "by_category": {}})
    import re
    values = dict(re.split(r"\s{2,}", row, maxsplit=1) for row in text.splitlines() if row)
    assert values["lossless_tier"] == "near-tie (bfloat16)"
    assert values["divergences"] == "exact 3, near_tie 2, real 0"
    assert values["near_tie_prompts"] == "a, c" and "mismatched_prompts" not in values


def test_the_report_facts_name_the_near_ties() -> None:
    from autotune.report.panels.finalists import finalist_rows
    from autotune.report.verdict import _finalist_line
    from autotune.records.validation import ValidationRecord
    tied = {"trial": 3, "label": "ngram", "role": "search #1", "speedup": 1.3,
            "lossless": True, "near_tie_prompts": ["a", "b"], "mismatched_prompts": []}
    record = ValidationRecord.from_json(
        {"prompts": 8, "lossless_tier": "near-tie (bfloat16)", "finalists": [tied]})
    facts = record.measured_in()
    assert facts["near-ties"].startswith("trial 3: 2 of 8 prompts differ from greedy AR")
    assert "near-tie (bfloat16)" in facts["near-ties"] and "not lossless" not in facts
    assert finalist_rows(record)[0].near_ties == 2
    assert _finalist_line(record.finalists[0]).endswith(", lossless up to 2 near-ties")
