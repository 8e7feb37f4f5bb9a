"""`--time-budget`: a search sized to the machine it runs on, in wall-clock time.

The work of a search is counts (`--screen`, `--trials`, the engines' screens, the held-out
pool and its measured sample); what they cost is the machine's business: the same
counts took 8.4 minutes at 26.6 ms/token AR and 26 at 54 (issue 51). With a budget:

1. the budget's clock starts when the search is planned (`SearchPlan.budget_started`,
   right after the command's arguments are read; never the process's start, which a
   search run inside a longer process, a test or a bench, would find long past);
2. after the models load, a short AR decode through the decoder is timed (the
   machine's AR pace today, its loop included: `measure.profile.
   ar_decode_seconds_per_token`); an engine's start-up is priced in seconds as this
   machine measured it (`backends.startup`), not in AR tokens;
3. after the hardware profile, the screen's references are decoded and the replay
   tier's cost parts measured (`Budget.screen_setup`): as fixed time, since no deadline
   can cut them, the parts at a lesser effort (`replay.effort`) where the full one would
   take more than PARTS_SHARE of the time left, and no screen at all where even the
   least would take more than SCREEN_SETUP_MAX of it (a 600 s budget at 352 ms/token
   spent 597 s there before, its first config uncut);
4. then the engines' races in themselves are admitted, cheapest first, only where they
   fit beside autotune's own stages at their FLOORS (`Budget.admit_engine_races`; a
   dropped one is named with the seconds it needs), and `size_counts` sizes the screen,
   the measured trials and the engines' screens to the time left, each flag's count an
   upper bound, none below its floor: the search's counts shrink by a factor f, the
   held-out ones by √f (they decide the answer, so they give way more slowly);
5. each stage then runs to a deadline (`Budget.stop_at`): its share of the time left, in
   proportion to its estimated cost against the stages still to run. A stage that ends
   early leaves its time to the next; one that reaches its deadline stops with what it
   has finished (the study runner starts no trial its median trial would carry past it);
6. the held-out pool and its measured sample are sized when validation starts
   (`Budget.size_held_out`), at the pace the stages so far kept against their estimates
   (`Budget.pace`); the race gets what is left before the run folder's reserve.

The decision rules never change with the budget: a race that runs out of time says
"undecided", never a verdict at a weaker level. A rerun with a larger budget extends the
stored screen and trials (as a larger `--trials` does) and validates on a larger sample.
Every estimate is in AR tokens (the cost of one AR decode step here), so the constants
below hold across machines; a test drives `Budget` with a fake clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, Union

from autotune.backends.base import EngineCost
from autotune.common.errors import AutotuneError
from autotune.replay.effort import FULL, PartsEffort, parts_effort
from autotune.search.racing import FIRST_LOOK

__all__ = ["DEFAULT_TIME_BUDGET", "Budget", "Counts", "NoBudget", "Shape", "TimeBudget",
           "parse_duration", "size_counts", "stage_seconds"]

# The main job's default budget (README command 1 promises it).
DEFAULT_TIME_BUDGET = "10m"

# Each stage's cost in AR tokens per unit of work, from the main job at 26.6 ms/token
# (commit 292d7a0, docs/benchmarks.md): the screen 165 s for 220 configs on 24 prompts x
# 32 tokens (its references decoded first), 6 measured trials 92 s on 8 prompts, five
# engines' screens of 100 configs 30 s, a pool of 80 prompts 71 s, a race of 8 arms on 16
# prompts 113 s. Each estimate came within 8% of its stage there.
REFERENCE_TOKENS = 1.0        # per screen prompt x new token (the references)
SCREEN_TOKENS = 0.035         # per screened config x screen prompt x new token
TRIAL_TOKENS = 2.4            # per measured trial x search prompt x new token (AR too)
ENGINE_TOKENS = 0.003         # per engine config x screen prompt x new token
POOL_TOKENS = 1.1             # per pool prompt x new token (reference and tables)
RACE_TOKENS = 1.1             # per measured prompt x arm x repeat x new token

# The least each count is cut to (a flag's own smaller value stands), the floors a
# decision needs (issue 59): a screen of 30 holds the documented defaults and a first
# random sweep; 2 trials, AR and one config (autotune's own group races at least
# SPECULATIVE_FLOOR finalists: where the trials could not run them, the screen's best,
# `search.screen_finalists`); a measured sample of the race's first look (8 prompts: the
# cross-fitted estimate's least), from a pool twice its size.
FLOORS = {"screen": 30, "trials": 2, "engine_screen": 20, "pool": 2 * FIRST_LOOK,
          "measured": FIRST_LOOK}
# Autotune's own finalists a race always measures.
SPECULATIVE_FLOOR = 2

# The hardware profile (the report's forward cost for 1..128 tokens, measured once per
# run folder before the study): about 270 AR tokens (7 s at 25.9 ms/token, the README's
# run). It is left out of a budget it would take more than PROFILE_SHARE of (230 s of a
# 240 s budget on a machine loaded to 1.1 s/token): `autotune profile` takes it alone.
PROFILE_TOKENS = 270.0
PROFILE_SHARE = 0.05

# What the run folder, report and exports are left at the end: at least this, or this
# share of the budget.
RESERVE_S = 10.0
RESERVE_SHARE = 0.02

# The screen's references and cost parts, measured before the sizing: the parts may
# take this share of the time left (at a lesser effort to fit it); the screen is left
# out when even the least effort and the references would take more than the second.
PARTS_SHARE = 0.2
SCREEN_SETUP_MAX = 0.5

# `--target ENGINE` that runs here: its cost profile, measured in the engine before the
# sizing when the cache has none (issue 60: its screen then ranks at the engine's own
# prices), may take this share of the time left; else the screen keeps our decoder's
# prices. vLLM's compiled CPU build, four engines started cold, took 375 s on 2 cores
# (more than a 10-minute budget holds; a run with a longer one measures it once).
TARGET_PRICES_SHARE = 0.25

# The stages the budget shares out, in the order they run: the last, the engines'
# races in themselves (`autotune.search.engine_races`).
STAGES = ("screen", "trials", "engines", "pool", "race", "engine_races")
# A stage's pace (actual over estimated seconds) is believed within these bounds.
PACE_BOUNDS = (0.5, 4.0)

_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float | None) -> float | None:
    """`--time-budget`'s value in seconds: `600`, `90s`, `10m`, `1.5h`; None, `none` or
    `off`: no budget. Anything else, or a duration that is not positive, is one
    AutotuneError line."""
    if text is None:
        return None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        spec = str(text).strip().lower()
        if spec in ("none", "off"):
            return None
        unit = next((u for u in sorted(_UNITS, key=len, reverse=True) if spec.endswith(u)), "")
        try:
            seconds = float(spec[: len(spec) - len(unit)]) * _UNITS.get(unit, 1.0)
        except ValueError:
            raise AutotuneError(f"--time-budget {text!r} is not a duration: give e.g. 10m, "
                                "600s, 1.5h, or none") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise AutotuneError(f"--time-budget {text!r} must be a positive duration (or none)")
    return seconds


@dataclass(frozen=True)
class Counts:
    """A search's work in counts (each an upper bound from its flag)."""

    screen: int             # configs the main replay screen replays
    trials: int             # measured trials, the AR baseline included
    engine_screen: int      # configs each engine's screen replays
    pool: int               # held-out prompts the replay tier predicts
    measured: int           # of them, prompts the race measures


@dataclass(frozen=True)
class Shape:
    """What the stages' costs scale with besides the counts."""

    max_new_tokens: int
    search_prompts: int
    screen_prompts: int
    engines: int            # engines answered besides autotune's own (`--target all`)
    arms: int               # the race's arms, the AR baseline included
    repeats: int            # passes over the measured held-out prompts
    stages: frozenset[str]  # which of STAGES this search runs
    # The screen's references are decoded already (`Budget.screen_setup`): its estimate
    # is its configs alone.
    screen_prepared: bool = False
    # Where the race measures (our decoder, or the --target engine's backend).
    race_cost: EngineCost = EngineCost()
    # Each engine raced again in itself (`--target all`), and the arms of each race
    # (its finalists and its AR).
    engine_races: tuple[EngineCost, ...] = ()
    engine_race_arms: int = 0
    # The engines' cost profiles still to measure here before their screens, in seconds
    # (issue 60, `search.engine_prices.profile_seconds`; 0 where the cache holds them).
    engine_profiles_s: float = 0.0


def stage_seconds(counts: Counts, shape: Shape, ar_s: float) -> dict[str, float]:
    """Each stage's estimated seconds at `ar_s` seconds per AR token (0 for a stage this
    search does not run)."""
    t = shape.max_new_tokens
    references = 0.0 if shape.screen_prepared else REFERENCE_TOKENS
    tokens = {
        "screen": shape.screen_prompts * t * (references + counts.screen * SCREEN_TOKENS),
        "trials": counts.trials * shape.search_prompts * t * TRIAL_TOKENS,
        "engines": shape.engines * counts.engine_screen * shape.screen_prompts * t
        * ENGINE_TOKENS,
        "pool": counts.pool * t * POOL_TOKENS,
        "race": _race_tokens(counts.measured, shape.arms, shape, shape.race_cost),
        "engine_races": sum(_race_tokens(counts.measured, shape.engine_race_arms, shape, cost)
                            for cost in shape.engine_races),
    }
    seconds = {stage: value * ar_s for stage, value in tokens.items()}
    seconds["engines"] += shape.engine_profiles_s
    # The races' engines start in seconds measured where known, not in tokens.
    seconds["race"] += shape.arms * shape.race_cost.start_seconds(ar_s)
    seconds["engine_races"] += sum(shape.engine_race_arms * cost.start_seconds(ar_s)
                                   for cost in shape.engine_races)
    return {stage: (seconds[stage] if stage in shape.stages else 0.0) for stage in STAGES}


def _race_tokens(measured: int, arms: int, shape: Shape, cost: EngineCost) -> float:
    """A race's decoding in AR tokens: its prompts decoded in each arm at the engine's
    cost per token (its engines' start-up apart: `EngineCost.start_seconds`)."""
    return arms * measured * shape.repeats * shape.max_new_tokens * RACE_TOKENS * cost.token_ratio


def race_seconds(measured: int, arms: int, shape: Shape, cost: EngineCost,
                 ar_s: float) -> float:
    """A race's estimated seconds: its `arms` engines started, then `measured` prompts
    decoded in each."""
    return arms * cost.start_seconds(ar_s) + _race_tokens(measured, arms, shape, cost) * ar_s


def _scaled(caps: Counts, f: float) -> Counts:
    """`caps` cut by f (the search's counts) and √f (the held-out ones), never below
    their floors nor above the caps; the sample never larger than the pool."""
    def cut(name: str, factor: float) -> int:
        cap = getattr(caps, name)
        return min(cap, max(FLOORS[name], round(cap * factor)))

    root = math.sqrt(f)
    pool = cut("pool", root)
    return Counts(screen=cut("screen", f), trials=cut("trials", f),
                  engine_screen=cut("engine_screen", f), pool=pool,
                  measured=min(cut("measured", root), pool))


def size_counts(caps: Counts, shape: Shape, ar_s: float, seconds: float) -> Counts:
    """The largest counts within `caps` whose stages are estimated to fit `seconds`
    (all at their floors when even those do not)."""
    def fits(counts: Counts) -> bool:
        return sum(stage_seconds(counts, shape, ar_s).values()) <= seconds

    if fits(caps):
        return caps
    low, high = 0.0, 1.0
    for _ in range(40):                  # the counts are integers: 40 halvings settle f
        middle = (low + high) / 2
        if fits(_scaled(caps, middle)):
            low = middle
        else:
            high = middle
    return _scaled(caps, low)


class Budget:
    """One search's time budget: sizing, each stage's deadline, and what it cut."""

    def __init__(self, seconds: float, started: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.started = started
        self.clock = clock
        self.reserve = max(RESERVE_S, RESERVE_SHARE * seconds)
        self.ar_s: float | None = None
        self.caps: Counts | None = None
        self.counts: Counts | None = None
        self.shape: Shape | None = None
        # The shape with every engine's race, the dropped ones too: what a budget that
        # runs every count in full would hold (`full_seconds`).
        self.full_shape: Shape | None = None
        self.fixed_s = 0.0               # what ran before the sizing (loading, profile)
        self._open: dict[str, float] = {}        # stage -> when it started
        self._took: dict[str, float] = {}        # stage -> seconds it took
        self._estimated: dict[str, float] = {}   # stage -> its estimate when it started
        self.stopped: list[str] = []     # "the screen after 80 of 95 configs", ...
        # Engine -> why its race in itself was dropped at planning (`admit_engine_races`).
        self.dropped: dict[str, str] = {}
        self.trimmed: list[str] = []     # work done at less than full, not in the counts

    def left(self) -> float:
        """Seconds left for the stages, the reserve for the run folder set aside."""
        return self.seconds - (self.clock() - self.started) - self.reserve

    def screen_setup(self, screen_prompts: int, max_new_tokens: int, ar_s: float
                     ) -> PartsEffort | None:
        """The effort to measure the screen's cost parts at, now, before the sizing:
        the dearest whose estimate fits PARTS_SHARE of the time left; None (the screen
        left out, said in `stopped`) when the references and the least effort would
        take more than SCREEN_SETUP_MAX of it."""
        if not ar_s > 0:
            raise AutotuneError(f"the machine's speed measured {ar_s!r} s per token")
        left = max(self.left(), 0.0)
        effort = parts_effort(PARTS_SHARE * left, max_new_tokens, ar_s)
        need = (REFERENCE_TOKENS * screen_prompts * max_new_tokens * ar_s
                + effort.seconds(max_new_tokens, ar_s))
        if need > SCREEN_SETUP_MAX * left:
            self.stopped.append(f"the screen before it began (its references and cost "
                                f"parts need about {need:.0f} s of the {left:.0f} s left)")
            return None
        return effort

    def profile_fits(self, ar_s: float) -> bool:
        """Whether the hardware profile's estimate fits PROFILE_SHARE of the budget
        (else it is left out, said in `stopped`)."""
        need = PROFILE_TOKENS * ar_s
        if need <= PROFILE_SHARE * self.seconds:
            return True
        self.stopped.append(f"the hardware profile before it began (it needs about "
                            f"{need:.0f} s; `autotune profile` takes it alone)")
        return False

    def target_prices_fit(self, engine: str, need_s: float) -> bool:
        """Whether the --target engine's cost profile, estimated at `need_s`, fits
        TARGET_PRICES_SHARE of the time left (else said in `trimmed`)."""
        left = max(self.left(), 0.0)
        if need_s <= TARGET_PRICES_SHARE * left:
            return True
        more = need_s / TARGET_PRICES_SHARE - left + self.seconds
        self.trimmed.append(f"{engine}'s own cost profile (about {need_s:.0f} s of the "
                            f"{left:.0f} s left; its screen priced at autotune's decoder's "
                            f"costs; a --time-budget of {more:.0f} s measures it once, and "
                            "later runs reuse it)")
        return False

    def parts_measured_at(self, effort: PartsEffort) -> None:
        """The screen's cost parts were measured at `effort` (said when not full)."""
        if effort != FULL:
            self.trimmed.append(f"the replay cost parts at {effort.name} effort "
                                f"({effort.describe()})")

    def plan(self, caps: Counts, shape: Shape, ar_s: float) -> Counts:
        """Size the counts to the time left (`size_counts`) and return them."""
        if not ar_s > 0:
            raise AutotuneError(f"the machine's speed measured {ar_s!r} s per token")
        self.caps, self.shape, self.ar_s = caps, shape, ar_s
        self.fixed_s = self.clock() - self.started
        self.counts = size_counts(caps, shape, ar_s, max(self.left(), 0.0))
        return self.counts

    def pace(self) -> float:
        """How the finished stages' time compares with their estimates (1: as
        estimated), within PACE_BOUNDS; 1 before any."""
        estimated = sum(self._estimated[s] for s in self._took if self._estimated.get(s))
        if estimated <= 0:
            return 1.0
        took = sum(self._took[s] for s in self._took if self._estimated.get(s))
        return min(max(took / estimated, PACE_BOUNDS[0]), PACE_BOUNDS[1])

    def _estimates(self) -> dict[str, float]:
        assert self.counts is not None and self.shape is not None and self.ar_s is not None
        return stage_seconds(self.counts, self.shape, self.ar_s)

    def stop_at(self, stage: str) -> float:
        """Start `stage` now; its deadline on the budget's clock: its share of the time
        left, against the estimated cost of the stages still to run."""
        estimates = self._estimates()
        later = STAGES[STAGES.index(stage):]
        total = sum(estimates[s] for s in later)
        now = self.clock()
        self._open[stage] = now
        self._estimated[stage] = estimates[stage]
        share = self.left() * (estimates[stage] / total if total > 0 else 1.0)
        return now + max(share, 0.0)

    def done(self, stage: str) -> None:
        """`stage` has ended (it teaches `pace` how far the estimates are off)."""
        if stage in self._open:
            self._took[stage] = self.clock() - self._open.pop(stage)

    def profiles_measured(self) -> None:
        """The engines' profiles are measured: the `engines` stage's estimate holds its
        screens alone from here (their time is spent, not still to come)."""
        if self.shape is not None:
            self.shape = replace(self.shape, engine_profiles_s=0.0)

    def took(self, stage: str) -> float | None:
        """The seconds `stage` took, once it has ended (None before)."""
        return self._took.get(stage)

    def stopped_at(self, line: str) -> None:
        """A stage stopped at its share of the budget; `line` says where, for the
        summary ("the screen after 80 of 95 configs")."""
        self.stopped.append(line)

    def forget_stops(self, prefix: str) -> None:
        """Drop the summary's stop lines that start with `prefix`: a stage resumed in
        the time left says where it stopped in the end, not where its share did."""
        self.stopped = [line for line in self.stopped if not line.startswith(prefix)]

    def size_held_out(self, pool_cap: int, measured_cap: int,
                      at_least: tuple[int, int] = (0, 0)) -> tuple[int, int]:
        """(pool, measured) for the validation starting now: the largest within the
        caps whose pool and race fit the time left at the pace kept so far, never below
        `at_least` (what an earlier run of this study validated on: a rerun extends, it
        does not shrink)."""
        assert self.counts is not None and self.shape is not None and self.ar_s is not None
        caps = replace(self.counts, pool=pool_cap, measured=measured_cap)
        shape = replace(self.shape, stages=frozenset({"pool", "race"})
                        | (self.shape.stages & {"engine_races"}))
        sized = size_counts(caps, shape, self.ar_s * self.pace(), max(self.left(), 0.0))
        pool = min(pool_cap, max(sized.pool, at_least[0]))
        measured = min(measured_cap, pool, max(sized.measured, at_least[1]))
        self.counts = replace(self.counts, pool=pool, measured=measured)
        self.caps = replace(self.caps or caps, pool=pool_cap, measured=measured_cap)
        return pool, measured

    def race_arms(self, least: int) -> int:
        """The most arms (the AR baseline included) the race can measure on its sample
        in the time left now, at the pace kept, the engines' races after it set aside;
        never fewer than `least` (the floor a decision needs is kept, and overruns)."""
        assert self.ar_s is not None and self.counts is not None and self.shape is not None
        ar_s = self.ar_s * self.pace()
        later = stage_seconds(self.counts, self.shape, ar_s)["engine_races"]
        per_arm = race_seconds(self.counts.measured, 1, self.shape, self.shape.race_cost,
                               ar_s)
        if per_arm <= 0:
            return max(least, self.shape.arms)
        return max(least, int((self.left() - later) // per_arm))

    def admit_engine_races(self, caps: Counts, shape: Shape, ar_s: float,
                           engines: dict[str, EngineCost]) -> list[str]:
        """The engines whose races in themselves this budget holds, cheapest first,
        after autotune's own stages at their floors (they come first: an answer from
        our decoder needs them, an engine's race only confirms it in the engine); each
        race priced at the floor's measured sample with its engines' start-up as this
        machine measured it. One not admitted is named in `dropped` with what it needs
        and `engine_race_seconds` gives it nothing."""
        floors = Counts(**{name: min(getattr(caps, name), least)
                           for name, least in FLOORS.items()})
        own_shape = replace(shape, stages=shape.stages - {"engine_races"}, engine_races=())
        room = max(self.left(), 0.0) - sum(stage_seconds(floors, own_shape, ar_s).values())
        costs = {engine: race_seconds(floors.measured, shape.engine_race_arms, shape, cost,
                                      ar_s) for engine, cost in engines.items()}
        admitted: list[str] = []
        for engine in sorted(engines, key=costs.__getitem__):
            cost = engines[engine]
            if costs[engine] <= room:
                admitted.append(engine)
                room -= costs[engine]
                continue
            start = cost.start_seconds(ar_s)
            basis = "measured here" if cost.start_s is not None else "not yet measured here"
            self.dropped[engine] = (
                f"{engine}'s race in itself needs about {costs[engine]:.0f} s "
                f"({shape.engine_race_arms} engines started at {start:.0f} s each, "
                f"{basis}, and {floors.measured} prompts each), "
                f"{max(room, 0.0):.0f} s are left after autotune's own stages at their floors")
        return [engine for engine in engines if engine in admitted]

    def engine_race_seconds(self, deadline: float, cost: EngineCost, arms: int,
                            later: tuple[EngineCost, ...] = ()) -> float:
        """One engine's race in itself, starting now, of the `engine_races` stage that
        ends at `deadline`: its share of what is left, in proportion to its estimate
        against the engines after it (`later`; a vLLM race, its engines' start-up
        counted, takes more than an HF one), or 0 (skipped) when that share cannot hold
        its `arms` engines' start-up and its first look at the pace kept so far (a race's
        first look always runs once begun: one that did not fit overran a 600 s budget
        by 28 s, issue 59)."""
        assert self.ar_s is not None and self.counts is not None and self.shape is not None
        ar_s, shape, measured = self.ar_s, self.shape, self.counts.measured
        total = (race_seconds(measured, arms, shape, cost, ar_s)
                 + sum(race_seconds(measured, arms, shape, c, ar_s) for c in later))
        own = race_seconds(measured, arms, shape, cost, ar_s)
        share = max(deadline - self.clock(), 0.0) * (own / total if total > 0
                                                      else 1.0 / (1 + len(later)))
        return share if share > self.first_look_seconds(cost, arms) else 0.0

    def first_look_seconds(self, cost: EngineCost, arms: int) -> float:
        """A race's `arms` engines started and its first look measured, at the pace
        kept: the least a race in an engine needs once begun."""
        assert self.ar_s is not None and self.counts is not None and self.shape is not None
        return race_seconds(min(FIRST_LOOK, self.counts.measured), arms, self.shape, cost,
                            self.ar_s * self.pace())

    def full_seconds(self) -> float:
        """The budget every count in full would take here, at the pace kept."""
        assert self.caps is not None and self.shape is not None and self.ar_s is not None
        shape = self.full_shape or self.shape
        stages = sum(stage_seconds(self.caps, shape, self.ar_s).values())
        return self.fixed_s + stages * self.pace() + self.reserve

    def cuts(self) -> list[str]:
        """What was cut to fit, as "--screen 220 -> 90"."""
        if self.caps is None or self.counts is None:
            return []
        names = (("screen", "--screen"), ("trials", "trials"),
                 ("engine_screen", "engines' screens"), ("pool", "held-out pool"),
                 ("measured", "measured held-out prompts"))
        stages = self.shape.stages if self.shape is not None else frozenset(STAGES)
        needs = {"screen": "screen", "trials": "trials", "engine_screen": "engines",
                 "pool": "pool", "measured": "race"}
        return [f"{label} {getattr(self.caps, name)} -> {getattr(self.counts, name)}"
                for name, label in names
                if needs[name] in stages
                and getattr(self.counts, name) < getattr(self.caps, name)] + self.trimmed

    def summary(self) -> list[str]:
        """The summary's lines: the budget, what was cut to fit and what stopped at its
        share, and what a larger budget would add."""
        if self.ar_s is None:
            return []
        used = self.clock() - self.started
        lines = [f"time budget {_duration(self.seconds)}: {used:.0f} s used "
                 f"({used / self.seconds:.0%}); AR {1000 * self.ar_s:.1f} ms/token "
                 "measured here at the start"]
        cuts, stopped = self.cuts(), [*self.stopped, *self.dropped]
        if cuts:
            lines.append("cut to fit: " + ", ".join(cuts))
        if self.stopped:
            lines.append("stopped at their share of the budget: " + "; ".join(self.stopped))
        if self.dropped:
            lines.append("dropped at planning: " + "; ".join(self.dropped.values()))
        full = self.full_seconds()
        if (cuts or stopped) and full > self.seconds:
            lines.append(f"a larger budget screens, measures and validates more: about "
                         f"--time-budget {_duration(full, up=True)} runs "
                         "every count in full here; a rerun with it extends this one")
        elif cuts or stopped:
            # Counts were cut or stopped on the pace measured as the stages ran, yet the
            # estimate of every count in full at the pace kept overall fits this budget:
            # naming a budget no larger than this one would send the user round again.
            lines.append("a larger budget screens, measures and validates more: counts "
                         "were cut or stopped at the pace measured as the stages ran, "
                         "though the estimate of every count in full at the pace kept "
                         f"overall ({_duration(full, up=True)}) fits this budget; a rerun "
                         "with a larger --time-budget extends this one")
        else:
            lines.append("nothing was cut to fit")
        return lines


class NoBudget:
    """The budget of a run without `--time-budget`: nothing is sized, no stage has a
    deadline, nothing is said. It stands where a `Budget` would, so the pipeline's stages
    never ask whether there is one; it is falsy, so `if budget:` reads "with a
    --time-budget" where the sizing (`pipeline.fitting`) must tell them apart."""

    def __init__(self) -> None:
        self.clock: Callable[[], float] = time.monotonic

    def __bool__(self) -> Literal[False]:
        return False

    def stop_at(self, stage: str) -> None:
        """No deadline (a study's or screen's `stop_at` left as None)."""
        return None

    def done(self, stage: str) -> None:
        """Nothing to learn a pace for."""

    def stopped_at(self, line: str) -> None:
        """No stage stops at a share of a budget."""

    def forget_stops(self, prefix: str) -> None:
        """No stop lines to forget."""

    def summary(self) -> list[str]:
        """No budget lines in the summary."""
        return []


# What a run holds: its `--time-budget`, or the stand-in without one.
TimeBudget = Union[Budget, NoBudget]


def _duration(seconds: float, up: bool = False) -> str:
    """600 -> "10m"; 90 -> "90s"; with `up`, rounded up to a whole minute."""
    if up:
        return f"{math.ceil(seconds / 60)}m"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
