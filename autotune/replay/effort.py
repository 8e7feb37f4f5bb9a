"""How hard the replay tier's cost parts are measured (`parts.measure_parts`).

At full effort the parts take about `PARTS_TOKENS` AR tokens per new token (37 s of
the main job at 26.6 ms/token and 32 new tokens, docs/benchmarks.md); on a machine ten
times slower that alone ran past a 10-minute `--time-budget` (issue 51). Under a budget
the parts are measured at the highest level whose estimate fits their share of the time
left: fewer timed repeats per part (the median of 3 still drops an outlier), one sample
prompt for the decoder-loop runs instead of two, and shorter decodes. No torch here:
the budget's arithmetic reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EFFORTS", "FULL", "PARTS_TOKENS", "PartsEffort", "parts_effort"]

# The parts at full effort, in AR tokens per new token (see above).
PARTS_TOKENS = 44.0


@dataclass(frozen=True)
class PartsEffort:
    """One level of the cost parts' measurement."""

    name: str
    part_repeats: int      # timed runs of one part (`time_call`)
    curve_repeats: int     # timed runs of each size of a curve (`time_points`)
    prompts: int           # sample prompts the decoder-loop runs decode
    max_new_cap: int | None  # tokens those runs decode at most (None: the search's)
    share: float           # its estimated cost against FULL's (the decodes dominate)

    def max_new(self, max_new: int) -> int:
        return max_new if self.max_new_cap is None else min(max_new, self.max_new_cap)

    def seconds(self, max_new: int, ar_s: float) -> float:
        """Its estimated seconds at `ar_s` seconds per AR token."""
        return PARTS_TOKENS * max_new * self.share * ar_s

    def describe(self) -> str:
        return (f"{self.part_repeats} of {FULL.part_repeats} repeats a part, "
                f"{self.prompts} of {FULL.prompts} sample prompts"
                + (f", decodes of at most {self.max_new_cap} tokens"
                   if self.max_new_cap is not None else ""))


FULL = PartsEffort("full", part_repeats=7, curve_repeats=5, prompts=2, max_new_cap=None,
                   share=1.0)
# Cheaper levels, dearest first. Their shares are estimates (half the decodes and two
# thirds of the timed runs; a quarter and a half); the time they take is counted anyway.
EFFORTS = (FULL,
           PartsEffort("reduced", part_repeats=4, curve_repeats=3, prompts=1,
                       max_new_cap=None, share=0.6),
           PartsEffort("least", part_repeats=3, curve_repeats=2, prompts=1, max_new_cap=16,
                       share=0.35))


def parts_effort(allowed_s: float, max_new: int, ar_s: float) -> PartsEffort:
    """The dearest level estimated to fit `allowed_s` seconds (the least when none
    does)."""
    return next((e for e in EFFORTS if e.seconds(max_new, ar_s) <= allowed_s), EFFORTS[-1])
