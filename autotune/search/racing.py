"""Racing the finalists: measure the held-out sample in looks, drop a finalist once it is
clearly behind, stop once the answer is decided or the time budget is spent.

The measured sample is a random permutation's prefix of the held-out pool, so after any
look the prompts measured so far are themselves a simple random sample of the pool and
the prediction-powered estimate is valid at every look. Looking repeatedly would break a
plain 90% interval (each look is another chance to be fooled), so the error is **spent
over the looks** (Lan and DeMets' alpha-spending, with the power family
`alpha * t**3`, t the share of the planned sample measured): look k spends
`spent(t_k) - spent(t_{k-1})` (`look_level`: the look's level, one minus that). Early
looks spend little (they stop a race only on a clear result); the last one spends the
most. A rerun that resumes a race spends only what is left.

Several finalists race for one answer, and any of them shown faster would be it, so
the look's error is shared among them too (`arm_levels`: Bonferroni over the arms still
running in a group): with m arms, each interval at look k is taken at level
`1 - share_k / m`. By Bonferroni over the looks and the arms, every interval a group
ever showed holds at once with probability at least 90%, so a group whose every arm is
no faster than the baseline answers "speculate" at most 5% of the time (the intervals
are two-sided), as far as each interval holds its level (docs/statistics.md has the
figures, `tests/test_race_fwer.py` the test). Each engine's group answers for itself
(`next_look_by_group`), so the error is controlled within each group.

At each look (F-race style, Birattari et al. 2002, with intervals in place of its rank
test): a finalist whose upper bound lies below the leader's lower bound (the leader: the
highest lower bound) is dropped. The race stops when one finalist is left and its
interval lies above 1 (speculate, or do not speculate when it cannot reach
1 + min_gain), when every finalist's interval lies below 1 + min_gain (nothing worth
having), when the sample is measured, or when the next look would overrun the budget.

A race under a time budget may grow its sample (`grown_sample`): after measuring the
look that would be its last, and before judging it, the pace measured so far says how
many more of the pool's prompts the time left holds; where that is a look's worth, the
planned sample grows to them (the pool's sampling order extends a prefix), the look just
measured becomes an interim one, and the spending follows the new plan (a look spends
only what the new plan's share leaves, never more than alpha in all). The decision
rests on time alone, never on the figures, so the error control stands (issue 59: a
race that ended its sample with 80 s of the budget left).

Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FIRST_LOOK", "LOOK_PROMPTS", "SPENDING", "Look", "arm_levels", "grown_sample",
           "look_level",
           "look_sizes", "next_look", "next_look_by_group", "overruns", "spent"]

SPENDING = ("alpha * t^3 over the looks (Lan-DeMets power family; Bonferroni across looks "
            "and across the arms still racing in a group)")
# The first look comes after this many prompts (fewer say too little to act on), the
# next ones every LOOK_PROMPTS (the cross-fitted estimate needs four).
FIRST_LOOK = 8
LOOK_PROMPTS = 4


def look_sizes(planned: int) -> list[int]:
    """Prompts measured at each look of a sample of `planned` prompts (the last look is
    the whole sample)."""
    if planned <= FIRST_LOOK:
        return [planned]
    sizes = list(range(FIRST_LOOK, planned, LOOK_PROMPTS))
    return [*sizes, planned]


def spent(alpha: float, fraction: float) -> float:
    """The error spent by the time `fraction` of the planned sample is measured."""
    return alpha * min(max(fraction, 0.0), 1.0) ** 3


def look_level(alpha: float, already: float, measured: int, planned: int) -> float:
    """The interval level of the look at `measured` of `planned` prompts, after
    `already` was spent: one minus this look's share of the error (the last look
    spends whatever is left)."""
    share = (alpha - already if measured >= planned
             else max(spent(alpha, measured / planned) - already, 0.0))
    return 1.0 - max(share, 1e-6)


def arm_levels(level: float, active: list[str], groups: dict[str, str]) -> dict[str, float]:
    """Each active arm's interval level at a look of family `level`: the look's error
    `1 - level` split evenly (Bonferroni) over the arms still racing in the arm's group
    (`groups`: arm -> group; an arm not in it is in the group ""). Dropped arms spend
    nothing more: their intervals stay as their last look showed them."""
    sizes: dict[str, int] = {}
    for arm in active:
        sizes[groups.get(arm, "")] = sizes.get(groups.get(arm, ""), 0) + 1
    return {arm: 1.0 - (1.0 - level) / sizes[groups.get(arm, "")] for arm in active}


@dataclass(frozen=True)
class Look:
    """What one look decided: the arms to keep measuring, the arms dropped now, and
    why the race stops here (None: it goes on)."""

    keep: list[str]
    dropped: list[str]
    stop: str | None


def next_look(intervals: dict[str, tuple[float, float] | None], last: bool,
              min_gain: float) -> Look:
    """The decision after a look from each active arm's interval at the look's level.

    `last`: the sample is measured (or the budget spent), so the race stops whatever
    the intervals say. An arm without an interval (too few prompts) is kept."""
    known = {arm: ci for arm, ci in intervals.items() if ci is not None}
    dropped: list[str] = []
    if known:
        leader_low = max(ci[0] for ci in known.values())
        dropped = [arm for arm, ci in known.items() if ci[1] < leader_low]
    keep = [arm for arm in intervals if arm not in dropped]
    stop = "sample" if last else None
    if len(keep) == 1 and known.get(keep[0]) is not None and known[keep[0]][0] > 1.0:
        stop = "decided"
    elif known and len(known) == len(intervals) and all(
            ci[1] < 1.0 + min_gain for arm, ci in known.items() if arm in keep):
        stop = "decided"
    return Look(keep, dropped, stop)


def next_look_by_group(intervals: dict[str, tuple[float, float] | None],
                       groups: dict[str, str], last: bool, min_gain: float) -> Look:
    """`next_look` for arms that compete in separate groups (each engine's finalists for
    that engine's answer, `--target all`): an arm is dropped only against its own group's
    leader, a group decided at this look stops being measured (its arms leave `keep`
    without being dropped), and the race stops once every group is decided (or
    `last`). Arms not in `groups` form one group of their own."""
    by_group: dict[str, dict[str, tuple[float, float] | None]] = {}
    for arm, interval in intervals.items():
        by_group.setdefault(groups.get(arm, ""), {})[arm] = interval
    looks = [next_look(members, last, min_gain) for members in by_group.values()]
    # Several groups: a group decided at this look is settled, its arms measured no
    # more while the others race on (its figures stay as this look showed them). One
    # group: `next_look` as it is (the race stops when it is decided).
    keep = [arm for look in looks
            if len(looks) == 1 or look.stop != "decided" for arm in look.keep]
    dropped = [arm for look in looks for arm in look.dropped]
    if last:
        stop: str | None = "sample"
    elif looks and all(look.stop == "decided" for look in looks):
        stop = "decided"
    else:
        stop = None
    # In `intervals`' order, as `next_look` keeps them.
    return Look([arm for arm in intervals if arm in keep],
                [arm for arm in intervals if arm in dropped], stop)


def overruns(elapsed_s: float, prompts_done: int, next_prompts: int,
             budget_s: float | None) -> bool:
    """Whether the next look, measuring `next_prompts` more prompts at the pace of the
    `prompts_done` this run measured in `elapsed_s`, would pass `budget_s` (None: no
    budget). Per prompt, not per look: a last look shorter than the first (8 -> 11 of
    a sample of 11) fits where a look "as long as the first" would not, and the race's
    time is not left unused (issue 59: 77 s of a 600 s budget were)."""
    if budget_s is None:
        return False
    if prompts_done == 0:
        return elapsed_s >= budget_s
    return elapsed_s + elapsed_s / prompts_done * next_prompts > budget_s


# The share of the time left a grown sample is planned to fill: the pace of the looks so
# far (the first one's warm-up included) is an estimate, and a plan that overruns is
# cut before its last look, which then spends less than alpha.
GROWTH_MARGIN = 0.85


def grown_sample(planned: int, measured: int, available: int, elapsed_s: float,
                 prompts_done: int, budget_s: float | None) -> int:
    """The planned sample after a look that measured `measured` prompts: `planned`, or
    more (up to `available`, the pool) where the time left of `budget_s`, at the pace of
    the `prompts_done` this run measured in `elapsed_s`, holds at least LOOK_PROMPTS
    prompts beyond the plan, or all the pool has left where that is fewer. Only a look
    that reached the plan's end grows it."""
    if budget_s is None or prompts_done == 0 or measured < planned or available <= planned:
        return planned
    fits = int(GROWTH_MARGIN * (budget_s - elapsed_s) / (elapsed_s / prompts_done))
    if fits < min(LOOK_PROMPTS, available - planned):
        return planned
    return min(available, measured + fits)
