"""One error rate across a race's finalists (issue 59): when no arm is faster than the
AR baseline, a race answers "speculate" at most 5% of the time, whatever the number of
arms it races.

A simulation of whole races through the real look logic (`finalists._take_look`: the
looks' error spending, its Bonferroni share per arm, each arm's interval and
`racing.next_look_by_group`'s drops and stops) and the real `finalists.judge`, on the
race's data: prompts of varying length (most decode the full `max_new_tokens`), paired
per-prompt times, per-prompt speedups log-normal with a 12% spread, timing noise of 3%
per run and a heavy tail of it (one run in ten, baseline's or candidate's, slower by
a factor exp(Exp(0.2)): a shared machine's hiccups), every arm's population speedup
exactly 1.0, the arms independent of each other (the worst case for a union bound),
the baseline's runs shared. Seeded: the same figures on every machine, seconds in all.

On this data the rule before issue 59 (every arm at the look's level, a percentile
bootstrap, "speculate" for any interval above 1.0) answered "speculate" in the share of
races docs/statistics.md states (well above 5% with 2, 4 and 8 arms). Where the tail is
in the speedup itself (one prompt in ten on which speculation is systematically slower,
an interval's lower bound misses 1.5-2 times as often as its level says:
docs/statistics.md), the rate with 2 arms is about 6%.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from autotune.search import finalists, racing
from autotune.search.finalists import FinalistEntry

PLANNED = 16                    # the default --validation-prompts
SPREAD = 0.12
NOISE = 0.03
HICCUP_SHARE, HICCUP_SCALE = 0.1, 0.2
RACES = 200


def _rows(rng: np.random.Generator, arms: int) -> dict[str, list[list[Any]]]:
    """Per arm, `PLANNED` measured rows (`finalist_figures.ROW_FIELDS`) against one
    shared baseline run per prompt; every arm's population speedup is 1.0
    (E[1 / speedup] = 1 for a log-normal speedup of mean log s^2 / 2, and the hiccups
    strike either side alike)."""
    tokens = np.where(rng.random(PLANNED) < 0.6, 64, rng.integers(8, 65, size=PLANNED))
    base = tokens * 0.03 * np.exp(rng.normal(0.0, 0.10, PLANNED))

    def run(seconds: np.ndarray) -> np.ndarray:
        hiccup = (rng.random(PLANNED) < HICCUP_SHARE) * rng.exponential(HICCUP_SCALE, PLANNED)
        return seconds * (1 + NOISE * rng.normal(size=PLANNED)) * np.exp(hiccup)

    base_s = run(base)
    rows: dict[str, list[list[Any]]] = {}
    for arm in range(arms):
        speedup = np.exp(SPREAD ** 2 / 2 + SPREAD * rng.normal(size=PLANNED))
        cand_s = run(base / speedup)
        rows[f"trial{arm}"] = [[f"p{i}", "c", float(base_s[i]), int(tokens[i]) - 1,
                                float(cand_s[i]), int(tokens[i]) - 1, 0, 0, 0, 0, 1]
                               for i in range(PLANNED)]
    return rows


def race(rows: dict[str, list[list[Any]]], min_gain: float = finalists.DEFAULT_MIN_GAIN,
         first_plan: int = PLANNED) -> str:
    """One race over `rows`, look by look as `finalists._run_race` runs it (a look
    measures the sample's next prompts), judged as `finalists._record` judges it. A
    `first_plan` below PLANNED is a sample grown, at the end of its first plan, to
    PLANNED (`racing.grown_sample`: the time left held more)."""
    arms = list(rows)
    setup = SimpleNamespace(prompts=[None] * PLANNED, repeats=1, min_gain=min_gain,
                            alpha=0.1, predicted={}, groups={arm: "autotune" for arm in arms},
                            configs={arm: SimpleNamespace(greedy=True) for arm in arms})
    state = SimpleNamespace(rows={arm: [] for arm in arms}, looks=[], active=list(arms),
                            measured=0, planned=first_plan, alpha_spent=0.0, shown={},
                            facts=None, stopped=None)
    while state.stopped is None and state.active:
        size = next((s for s in racing.look_sizes(state.planned) if s > state.measured),
                    None)
        if size is None:
            break
        for arm in state.active:
            state.rows[arm] = rows[arm][:size]
        state.measured = size
        if size == state.planned:
            state.planned = PLANNED
        finalists._take_look(setup, state, size)
    entries = [FinalistEntry(trial=int(arm.removeprefix("trial")), label=arm, role="search",
                             preset=None, params={}, search={},
                             figures=state.shown[arm]) for arm in arms]
    return finalists.judge(entries, min_gain).decision


@pytest.mark.parametrize("arms", [2, 4, 8])
def test_no_arm_faster_means_speculate_at_most_five_percent_of_races(arms: int) -> None:
    rng = np.random.default_rng(59_000 + arms)
    false = sum(race(_rows(rng, arms)) == finalists.SPECULATE for _ in range(RACES))
    assert false / RACES <= 0.05, f"{arms} arms: false speculate in {false}/{RACES} races"


def test_a_sample_grown_after_its_first_look_keeps_the_rate() -> None:
    """A race planned on 8 prompts and grown to 16 after measuring them (the time left
    held more: `racing.grown_sample`) spends its error over the grown plan: no more
    false "speculate" than the races planned on 16 from the start."""
    rng = np.random.default_rng(59_100)
    false = sum(race(_rows(rng, 2), first_plan=8) == finalists.SPECULATE
                for _ in range(RACES))
    assert false / RACES <= 0.05, f"grown samples: false speculate in {false}/{RACES}"


def test_an_arm_truly_faster_is_still_found() -> None:
    """Not a rule that never speculates: one arm 25% faster among three at 1.0 wins
    most races (the union bound's price is power, not the answer)."""
    rng = np.random.default_rng(7)
    wins = 0
    for _ in range(60):
        rows = _rows(rng, 4)
        rows["trial0"] = [[*row[:4], row[4] / 1.25, *row[5:]] for row in rows["trial0"]]
        wins += race(rows) == finalists.SPECULATE
    assert wins / 60 >= 0.7
