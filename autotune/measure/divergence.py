"""The lossless tiers' judge: is a speculative run's output the AR run's, and if not, is
the difference one the dtype's rounding explains (DESIGN.md principle 10)?

`classify(ar, spec)` compares two greedy Generations of one prompt:

- EXACT: the same tokens (and no tier-a violation).
- NEAR_TIE: at the first differing position p the prefixes are equal, so both runs'
  passes computed the same mathematical logits there, and only rounding separates them.
  AR chose a, the speculative run b. It is a near-tie iff in AR's pass
  logit(a) - logit(b) <= bound and in the speculative pass logit(b) - logit(a) <= bound,
  where bound = ULPS * ulp(dtype, max(|logit a|, |logit b|, 1)), the dtype's spacing at
  the logits' magnitude (floored at 1 so a tie near 0 keeps a usable bound).
- REAL: anything else: a gap over the bound, a token missing from a pass's top K (not
  provably within), an emitted token that was not its pass's argmax (tier a), any
  difference in float32 (which must be exact), or a run without recorded numerics.

What ULPS is, measured (`bench/near_ties.py`, SmolLM2-135M on a 2-core CPU, Spec-Bench
prompts, ngram / layer_skip / sorted_exit / a layer_skip tree against greedy AR; the
table is in docs/benchmarks.md):

- the noise: the largest |logit difference| between one-token passes and one 8-token
  pass over the same tokens (each row's top 16) was 5 ulps in bfloat16 (median 3, 8
  prompts) and 16 ulps in float16 (median 4, 16 prompts);
- every flip: 17 of 32 bfloat16 runs (8 prompts x 32 tokens) and 6 of 64 float16 runs
  (16 x 48) left AR's output, each at a gap of at most 3 ulps in either pass (bf16:
  AR 0-2, speculative 0-3; fp16: at most 1 and 1), AR's gap often 0 (the two logits
  round to the same value and argmax takes the lower id);
- a flip's two gaps sum to at most the two logits' own differences, so at most twice
  the noise: ULPS is that, rounded up (bf16 10, fp16 32), 3x or more the widest flip
  seen. A wrong token accepted is caught apart from the bound (tier a), and a wrong
  verify pass (a bad mask, cache or position) is expected to move logits by far more.

Torch-free: it reads `TokenNumerics` (plain lists).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.decoding.decoder import Generation

__all__ = ["EPS", "ULPS", "Divergence", "Kind", "bound", "classify", "tier_label", "ulp"]

# Machine epsilon (the spacing just above 1) of each float dtype torch names.
EPS: dict[str, float] = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10,
                         "float32": 2.0 ** -23, "float64": 2.0 ** -52}
# How many of the dtype's ulps at the logits' magnitude a near-tie may span, in each of
# the two passes: twice the largest 1-token vs multi-token logit difference measured (a
# flip's two gaps add up to at most the two logits' differences). See the module doc.
ULPS: dict[str, float] = {"bfloat16": 10.0, "float16": 32.0}


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

    def gaps_in_ulps(self, dtype: str, magnitude: float) -> tuple[float | None, float | None]:
        unit = ulp(dtype, magnitude)
        return (None if self.ar_gap is None else self.ar_gap / unit,
                None if self.spec_gap is None else self.spec_gap / unit)


def ulp(dtype: str, x: float) -> float:
    """The spacing of `dtype` at magnitude |x| (at least 1): eps * 2**floor(log2 |x|)."""
    magnitude = max(abs(x), 1.0)
    return EPS[dtype] * 2.0 ** math.floor(math.log2(magnitude))


def bound(dtype: str, logit_a: float, logit_b: float, ulps: float | None = None) -> float:
    """How far apart two logits may round in `dtype`: `ulps` (default: the dtype's
    `ULPS`) ulps at their magnitude."""
    return (ULPS[dtype] if ulps is None else ulps) * ulp(dtype, max(abs(logit_a),
                                                                    abs(logit_b)))


def tier_label(dtype: str) -> str:
    """What `lossless` means at `dtype`: "exact" in float32, "near-tie (bfloat16)"."""
    return "exact" if dtype in ("float32", "float64") else f"near-tie ({dtype})"


def classify(ar: Generation, spec: Generation, ulps: float | None = None) -> Divergence:
    """The speculative run `spec` against the AR run `ar` of the same prompt (both
    greedy, from the same target); `ulps` overrides the dtype's `ULPS`."""
    nums = spec.numerics
    if nums is not None and nums.argmax_violations:
        return Divergence(Kind.REAL, why=f"{nums.argmax_violations} emitted token(s) "
                                         "not the argmax of the pass that verified them")
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
    near = ar_gap <= allowed and spec_gap <= allowed
    return Divergence(Kind.NEAR_TIE if near else Kind.REAL, position=p, ar_token=a,
                      spec_token=b, ar_gap=ar_gap, spec_gap=spec_gap, bound=allowed,
                      why="" if near else "a gap wider than the dtype's rounding")
