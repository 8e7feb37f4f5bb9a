"""The lossless tiers' judge: is a speculative run's output the AR run's, and if not, is
the difference one the dtype's rounding explains (DESIGN.md principle 10)?

`classify(ar, spec)` compares two greedy Generations of one prompt:

- REAL first where either run's own passes are wrong (tier b at every position): each
  recorded row (the top-K logits of the pass that chose a token) sits beside the same
  ids' logits in a clean pass teacher-forced over the run's own output after its clock
  stopped (`decoding/numerics.py`). Both computed the same mathematical logits, so a
  per-logit difference over `NOISE_ULPS` ulps (at the row's magnitude) is a pass that
  computed something else: a wrong rotary position, mask or KV entry, even where the
  emitted token stayed its own row's argmax. Every position is checked, after a
  divergence too (each run is checked against its own output).
- EXACT: the same tokens.
- NEAR_TIE: at the first differing position p the prefixes are equal, so both runs'
  passes computed the same mathematical logits there, and only rounding separates them.
  AR chose a, the speculative run b. AR's gap logit(a) - logit(b) and the speculative
  pass's logit(b) - logit(a) add up to at most the two logits' differences between the
  passes, so it is a near-tie iff their sum is within bound = ULPS (twice the noise)
  ulps of the dtype at the logits' magnitude (floored at 1 so a tie near 0 keeps a
  usable bound).
- REAL otherwise: a sum over the bound, a token missing from a pass's top K (not
  provably within), an emitted token that was not its pass's argmax (tier a), any
  difference in float32 (which must be exact), or a run without recorded numerics.

What the bounds are, measured (`bench/near_ties.py --prompts 6 --tokens 24 --dtypes
bfloat16`, SmolLM2-135M on a 2-core CPU, Spec-Bench prompts): one-token vs one 8-token
pass over the same tokens differ by at most 5.0 ulps (median 3.5) over each row's top 16;
AR's recorded rows against its clean teacher-forced pass, and greedy AR decoded in
chunks of 5 (`measure/near_tie_baseline.py`) against its own, by at most 10 ulps (these
two read as the largest per-logit difference in ulps of each logit's own magnitude, an
upper bound of the row-magnitude figure `drift` reads). The teacher pass's shape (the
whole output in one pass from position 0) is further from a one-token pass than a
verify pass is, so NOISE_ULPS (16) is wider than ULPS's per-pass share (6). The planted
verify bugs of tests/test_planted_bugs.py move rows by 23 ulps or more.

Torch-free: it reads `TokenNumerics` (plain lists).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.decoding.decoder import Generation
    from autotune.decoding.numerics import TokenNumerics

__all__ = ["EPS", "NOISE_ULPS", "ULPS", "Divergence", "Kind", "bound", "classify", "drift",
           "tier_label", "ulp"]

# Machine epsilon (the spacing just above 1) of each float dtype torch names.
EPS: dict[str, float] = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10,
                         "float32": 2.0 ** -23, "float64": 2.0 ** -52}
# The largest per-logit difference, in ulps of the dtype at the row's magnitude, that
# rounding puts between a run's recorded rows and its clean teacher-forced pass (a
# prefill-shaped pass over the whole output): measured up to 10 ulps in bfloat16 on the
# default model (module doc), so 16. float16 is not measured against the teacher pass
# yet: three times its 1-token vs 8-token noise (16 ulps) rounded, 48.
NOISE_ULPS: dict[str, float] = {"bfloat16": 16.0, "float16": 48.0}
# How far a near-tie's two gaps may add up: at most the two logits' differences between
# two decode-shaped passes (AR's one-token, a k-token verify pass), each measured up to
# 5 ulps in bfloat16 and 16 in float16 (1-token vs 8-token pass): twice that, rounded.
ULPS: dict[str, float] = {"bfloat16": 12.0, "float16": 32.0}


class Kind(str, Enum):
    """A prompt's verdict; the value is what JSON and the finalist rows carry."""

    EXACT = "exact"
    NEAR_TIE = "near_tie"
    REAL = "real"


@dataclass(frozen=True)
class Divergence:
    """One prompt's verdict. position: the first differing token (None when EXACT);
    ar_token / spec_token: what each run emitted there; ar_gap / spec_gap: in AR's
    pass logit(a) - logit(b), in the speculative pass logit(b) - logit(a) (None where
    a token is missing from the top K); bound: the allowance they were held to; why:
    a REAL verdict's reason in words."""

    kind: Kind
    position: int | None = None
    ar_token: int | None = None
    spec_token: int | None = None
    ar_gap: float | None = None
    spec_gap: float | None = None
    bound: float | None = None
    why: str = ""
    # Tier b at every position: the widest per-logit difference (ulps) between a run's
    # recorded rows and its clean teacher-forced pass, where it made the verdict REAL.
    drift_ulps: float | None = None

    def gaps_in_ulps(self, dtype: str, magnitude: float) -> tuple[float | None, float | None]:
        unit = ulp(dtype, magnitude)
        return (None if self.ar_gap is None else self.ar_gap / unit,
                None if self.spec_gap is None else self.spec_gap / unit)


def ulp(dtype: str, x: float) -> float:
    """The spacing of `dtype` at magnitude |x| (at least 1): eps * 2**floor(log2 |x|)."""
    magnitude = max(abs(x), 1.0)
    return EPS[dtype] * 2.0 ** math.floor(math.log2(magnitude))


def bound(dtype: str, logit_a: float, logit_b: float, ulps: float | None = None) -> float:
    """How far a near-tie's two gaps may add up in `dtype`: `ulps` (default: the dtype's
    `ULPS`) ulps at the two logits' magnitude."""
    return (ULPS[dtype] if ulps is None else ulps) * ulp(dtype, max(abs(logit_a),
                                                                    abs(logit_b)))


def drift(numerics: TokenNumerics) -> tuple[int, float] | None:
    """(position, ulps) of the widest per-logit difference between the recorded rows and
    the clean teacher-forced pass, in ulps of the dtype at the row's magnitude (its
    largest |logit|: rounding in the hidden state moves a row's logits alike, not in
    proportion to each one); None where no teacher pass ran (an engine's numerics, a
    hand-made record)."""
    if not numerics.teacher or numerics.dtype not in NOISE_ULPS:
        return None
    worst = (0, 0.0)
    for i, (row, clean) in enumerate(zip(numerics.values, numerics.teacher)):
        unit = ulp(numerics.dtype, max(abs(x) for x in row + clean))
        d = max(abs(x - y) for x, y in zip(row, clean)) / unit
        if d > worst[1]:
            worst = (i, d)
    return worst


def tier_label(dtype: str) -> str:
    """What `lossless` means at `dtype`: "exact" in float32, "near-tie (bfloat16)"."""
    return "exact" if dtype in ("float32", "float64") else f"near-tie ({dtype})"


def _drifted(gen: Generation, who: str) -> Divergence | None:
    """A REAL verdict where `gen`'s recorded rows leave its teacher-forced pass by more
    than the dtype's noise (tier b at every position), else None."""
    nums = gen.numerics
    worst = drift(nums) if nums is not None else None
    if nums is None or worst is None or worst[1] <= NOISE_ULPS[nums.dtype]:
        return None
    p, ulps = worst
    return Divergence(Kind.REAL, position=p, drift_ulps=ulps,
                      why=f"the {who} run's pass at position {p} is {ulps:.1f} ulps off a "
                          f"clean teacher-forced pass (noise {NOISE_ULPS[nums.dtype]:g})")


def classify(ar: Generation, spec: Generation, ulps: float | None = None) -> Divergence:
    """The speculative run `spec` against the AR run `ar` of the same prompt (both
    greedy, from the same target); `ulps` overrides the dtype's `ULPS` (the flip sum)."""
    nums = spec.numerics
    if nums is not None and nums.argmax_violations:
        return Divergence(Kind.REAL, why=f"{nums.argmax_violations} emitted token(s) "
                                         "not the argmax of the pass that verified them")
    for gen, who in ((spec, "speculative"), (ar, "AR")):
        wrong = _drifted(gen, who)
        if wrong is not None:
            return wrong
    if ar.tokens == spec.tokens:
        return Divergence(Kind.EXACT)
    p = next((i for i, (a, b) in enumerate(zip(ar.tokens, spec.tokens)) if a != b), None)
    if p is None:
        return Divergence(Kind.REAL, why="one output is a prefix of the other")
    a, b = ar.tokens[p], spec.tokens[p]
    seen = Divergence(Kind.REAL, position=p, ar_token=a, spec_token=b)
    base = ar.numerics
    if base is None or nums is None:
        return replace(seen, why="no recorded numerics (float32 or an engine): must be exact")
    if base.dtype != nums.dtype or base.dtype not in ULPS:
        return replace(seen, why=f"a difference in {nums.dtype}")
    if len(base) <= p or len(nums) <= p:
        return replace(seen, why="numerics shorter than the output")
    ar_a, ar_b = base.logit(p, a), base.logit(p, b)
    sp_a, sp_b = nums.logit(p, a), nums.logit(p, b)
    ar_gap = ar_a - ar_b if ar_a is not None and ar_b is not None else None
    spec_gap = sp_b - sp_a if sp_a is not None and sp_b is not None else None
    if ar_gap is None or spec_gap is None or ar_a is None or ar_b is None:
        return replace(seen, ar_gap=ar_gap, spec_gap=spec_gap,
                     why="a token outside a pass's top K: not provably a near-tie")
    allowed = bound(base.dtype, ar_a, ar_b, ulps)
    near = ar_gap + spec_gap <= allowed
    return Divergence(Kind.NEAR_TIE if near else Kind.REAL, position=p, ar_token=a,
                      spec_token=b, ar_gap=ar_gap, spec_gap=spec_gap, bound=allowed,
                      why="" if near else "gaps adding up past the dtype's rounding")
