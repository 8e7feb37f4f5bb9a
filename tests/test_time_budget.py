"""`--time-budget`: parsing, the sizing of a search's counts to the machine's speed, each
stage's deadline and pace on a fake clock, the held-out sample cut to fit, and a tiny
random-weight search cut to fit and extended by a rerun with a larger budget. No test
here depends on the machine's speed: the speed and the clock are given."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from test_search_cli import _journal_trials
from tiny import llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)

import autotune.measure.profile as profile
import autotune.models.loading as loading
from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.pipeline import budget as budget_module
from autotune.pipeline import fitting
from autotune.pipeline.budget import Budget, Counts, Shape, parse_duration, size_counts
from autotune.pipeline.budget import stage_seconds
from autotune.search.study import counted_trials, past_deadline
from autotune.workloads.split import resized, split_prompts

CAPS = Counts(screen=220, trials=6, engine_screen=100, pool=80, measured=16)
# The main job's shape: 32 new tokens, 8 search prompts, 24 screen prompts, 5 engines.
SHAPE = Shape(max_new_tokens=32, search_prompts=8, screen_prompts=24, engines=5, arms=9,
              repeats=1, stages=frozenset(budget_module.STAGES))


class FakeClock:
    """A clock that moves only when told to (`advance`), or by `step` per reading."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 1000.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize("text,seconds", [
    ("600", 600.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), (" 2min ", 120.0),
    (45, 45.0), ("none", None), ("OFF", None), (None, None)])
def test_durations_parse(text, seconds) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["-5", "0", "0m", "ten", "10x", "", "nan", "inf"])
def test_a_bad_duration_is_one_line(text) -> None:
    with pytest.raises(AutotuneError, match="--time-budget") as caught:
        parse_duration(text)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("value,message", [("-5", "must be a positive duration"),
                                           ("soon", "is not a duration")])
def test_a_bad_budget_is_refused_before_loading(capsys, monkeypatch, tmp_path, value,
                                                message) -> None:
    def spy(*args, **kwargs):
        raise AssertionError("load_model reached")
    monkeypatch.setattr(loading, "load_model", spy)
    assert main(["search", "--out", str(tmp_path / "r"), "--time-budget", value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autotune: error: --time-budget") and "\n" not in err
    assert message in err and not (tmp_path / "r").exists()


def test_the_estimates_match_the_main_job_they_were_taken_from() -> None:
    # 292d7a0 at 26.6 ms/token: screen 165, trials 92, engines 30, pool 71, race 113 s
    # (8 arms there).
    seconds = stage_seconds(CAPS, Shape(**{**SHAPE.__dict__, "arms": 8}), 0.0266)
    for stage, measured in (("screen", 165), ("trials", 92), ("engines", 30), ("pool", 71),
                            ("race", 113)):
        assert seconds[stage] == pytest.approx(measured, rel=0.1)
    # A stage the search does not run costs nothing.
    none = stage_seconds(CAPS, Shape(**{**SHAPE.__dict__, "stages": frozenset({"trials"})}),
                         0.0266)
    assert none["screen"] == none["race"] == 0 and none["trials"] > 0


def test_counts_are_cut_to_the_time_the_search_held_out_last() -> None:
    assert size_counts(CAPS, SHAPE, 0.0266, 600.0) == CAPS          # it fits: all of it
    slow = size_counts(CAPS, SHAPE, 0.054, 450.0)
    assert sum(stage_seconds(slow, SHAPE, 0.054).values()) <= 450.0
    assert slow.screen < CAPS.screen and slow.pool < CAPS.pool
    # The held-out counts give way more slowly than the search's (√f against f).
    assert slow.pool / CAPS.pool > slow.screen / CAPS.screen
    assert slow.measured <= slow.pool
    # More time never sizes less.
    sizes = [size_counts(CAPS, SHAPE, 0.054, s) for s in (200, 300, 450, 800, 1600)]
    for small, large in itertools.pairwise(sizes):
        assert all(getattr(small, f) <= getattr(large, f) for f in CAPS.__dict__)
    # Nothing left: every count at its floor (a flag's smaller value stands).
    least = size_counts(CAPS, SHAPE, 0.054, 0.0)
    assert least == Counts(screen=30, trials=2, engine_screen=20, pool=16, measured=8)
    small = Counts(screen=10, trials=1, engine_screen=5, pool=6, measured=3)
    assert size_counts(small, SHAPE, 1.0, 0.0) == small


def test_each_stage_gets_its_share_and_the_pace_corrects_the_estimates() -> None:
    clock = FakeClock()
    budget = Budget(600.0, started=clock.now, clock=clock)
    clock.advance(50.0)                                   # loading, speed, profile
    counts = budget.plan(CAPS, SHAPE, 0.054)
    assert counts.screen < CAPS.screen
    left = budget.left()
    assert left == pytest.approx(600.0 - 50.0 - budget.reserve)
    estimates = stage_seconds(counts, SHAPE, 0.054)
    stop = budget.stop_at("screen")
    assert stop - clock.now == pytest.approx(left * estimates["screen"]
                                             / sum(estimates.values()))
    # The screen takes twice its estimate: later estimates are read at that pace.
    clock.advance(2 * estimates["screen"])
    budget.done("screen")
    assert budget.pace() == pytest.approx(2.0)
    # The trials end early: their time goes to the stages after them.
    trial_stop = budget.stop_at("trials")
    clock.advance((trial_stop - clock.now) / 4)
    budget.done("trials")
    engines_stop = budget.stop_at("engines")
    later = budget.left() * estimates["engines"] / (
        estimates["engines"] + estimates["pool"] + estimates["race"])
    assert engines_stop - clock.now == pytest.approx(later)
    clock.advance(engines_stop - clock.now)
    budget.done("engines")
    # The held-out sizes at the pace kept: fitting what is left, within the caps.
    pool, measured = budget.size_held_out(80, 16)
    assert 16 <= pool <= 80 and 8 <= measured <= min(16, pool)
    held = stage_seconds(budget.counts, SHAPE, 0.054 * budget.pace())
    assert held["pool"] + held["race"] <= budget.left() or (pool, measured) == (16, 8)
    # A rerun never validates on fewer than before.
    assert budget.size_held_out(80, 16, at_least=(60, 12)) >= (60, 12)
    lines = budget.summary()
    assert lines[0].startswith("time budget 10m: ") and "AR 54.0 ms/token" in lines[0]
    assert any(line.startswith("cut to fit: --screen 220 -> ") for line in lines)
    larger = [line for line in lines if "a larger budget" in line]
    assert larger and "runs every count in full here" in larger[0]
    # What the whole of it would take: more than this budget at this speed and pace.
    assert budget.full_seconds() > 600.0


def test_a_budget_with_room_cuts_nothing() -> None:
    clock = FakeClock()
    budget = Budget(3600.0, started=clock.now, clock=clock)
    assert budget.plan(CAPS, SHAPE, 0.0266) == CAPS
    assert budget.cuts() == [] and "nothing was cut to fit" in budget.summary()[-1]


def test_stages_stopped_within_a_budget_the_plan_said_fits_name_no_smaller_one() -> None:
    """The main job of 2026-11-27 stopped its screen and race at their shares while the
    plan's estimate of every count in full rounded to the budget it ran under: the
    summary told the user to rerun with the same --time-budget 10m."""
    clock = FakeClock()
    budget = Budget(3600.0, started=clock.now, clock=clock)
    budget.plan(CAPS, SHAPE, 0.0266)
    budget.stopped.append("the race after 8 of 16 held-out prompts")
    assert budget.full_seconds() <= budget.seconds
    larger = [line for line in budget.summary() if "a larger budget" in line]
    assert larger and "runs every count in full here" not in larger[0]
    assert "a rerun with a larger --time-budget extends this one" in larger[0]


def test_a_trial_starts_only_when_its_median_fits_before_the_deadline() -> None:
    assert not past_deadline(None, 1e9, [5.0])
    assert not past_deadline(100.0, 99.0, []) and past_deadline(100.0, 100.0, [])
    # The median (a screen's first trial decodes its references: it is no guide).
    assert not past_deadline(100.0, 90.0, [60.0, 2.0, 3.0])
    assert past_deadline(100.0, 98.0, [60.0, 2.0, 3.0])


def test_a_cut_pool_is_a_prefix_and_its_sample_is_drawn_from_it(tmp_path) -> None:
    lines = [{"category": c, "prompt": f"{c} prompt {i}"} for c in "abc" for i in range(20)]
    workload = tmp_path / "w.jsonl"
    workload.write_text("".join(json.dumps(x) + "\n" for x in lines))
    split = split_prompts(str(workload), None, "0.5", 0, 6, held_out=12, pool=24)
    cut = resized(split, 12, 6, 0, "by --time-budget")
    assert cut.pool == split.pool[:12] and len(cut.held_out) == 6
    assert {p.prompt_id for p in cut.held_out} <= {p.prompt_id for p in cut.pool}
    assert {p.category for p in cut.held_out} == {"a", "b", "c"}      # balanced
    assert cut.search == split.search and cut.screen == split.screen
    assert cut.source.endswith("cut to a pool of 12, 6 measured, by --time-budget")
    # What split_prompts draws with those sizes, so a flag-sized run agrees.
    direct = split_prompts(str(workload), None, "0.5", 0, 6, held_out=6, pool=12)
    assert [p.prompt_id for p in direct.held_out] == [p.prompt_id for p in cut.held_out]
    assert resized(split, 24, 12, 0, "x") is split


# -- a tiny search, cut to fit and extended --------------------------------------------

LINES = [{"category": "rep", "prompt": f"a{i} b{i} c{i} a{i} b{i} c{i} a{i} b{i}"}
         for i in range(8)]
LINES += [{"category": "mix", "prompt": f"x{i} y{i} x{i} z{i} x{i} y{i}"} for i in range(8)]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    save_tiny(llama_model(seed=5, layers=4, scale=4.0), folder / "model")
    (folder / "prompts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in LINES))
    return folder


def _args(tiny_dir: Path, run: Path, budget: str) -> list[str]:
    return ["search", "--model", str(tiny_dir / "model"), "--workload",
            str(tiny_dir / "prompts.jsonl"), "--space", "ngram", "--screen", "60",
            "--trials", "6", "--max-new-tokens", "8", "--prompts", "2",
            "--validation", "0.5", "--validation-prompts", "4", "--out", str(run),
            "--study", "b", "--target", "autotune", "--time-budget", budget]


def test_a_budgeted_search_is_cut_to_fit_and_a_larger_budget_extends_it(
        tiny_dir, tmp_path, monkeypatch, capsys) -> None:
    # The machine's speed and the clock are given: 0.25 s per AR token, and a clock that
    # moves 0.2 s per reading, so the counts and deadlines follow from the code alone.
    monkeypatch.setattr(profile, "ar_seconds_per_token", lambda target: 0.25)
    monkeypatch.setattr(profile, "ar_decode_seconds_per_token", lambda target, ids: None)
    clocks: list[FakeClock] = []

    def start(plan):
        clock = FakeClock(step=0.2)
        clocks.append(clock)
        return None if plan.time_budget_s is None else Budget(plan.time_budget_s,
                                                               clock.now, clock)
    monkeypatch.setattr(fitting, "start", start)
    run = tmp_path / "run"
    # Every count in full is estimated at about 148 s here: 2 minutes cut the search's.
    assert main(_args(tiny_dir, run, "2m")) == 0
    out, err = capsys.readouterr()
    assert "the machine's speed: AR 250.0 ms/token" in err
    assert "time budget 2m: " in out and "cut to fit: --screen 60 -> " in out
    # What a larger budget adds, naming one larger than this (or saying its estimate fits).
    assert ("runs every count in full here" in out
            or "a rerun with a larger --time-budget extends this one" in out)
    cut = int(out.split("cut to fit: --screen 60 -> ")[1].split(",")[0].split()[0])
    assert 30 <= cut < 60
    screened = len(counted_trials(_journal_trials(run / "study.journal", "b.screen")))
    assert screened <= cut
    measured = len(counted_trials(_journal_trials(run / "study.journal", "b")))
    best = json.loads((run / "best.json").read_text())
    assert best["validation"]["decision"] in ("speculate", "do not speculate", "undecided")
    # A rerun with a larger budget extends what is stored, as a larger --trials does.
    assert main(_args(tiny_dir, run, "1h")) == 0
    out, _ = capsys.readouterr()
    assert "nothing was cut to fit" in out
    assert len(counted_trials(_journal_trials(run / "study.journal", "b.screen"))) > screened
    assert len(counted_trials(_journal_trials(run / "study.journal", "b"))) >= measured
    assert math.isfinite(json.loads((run / "best.json").read_text())["validation"]["speedup"])


def test_a_search_the_budget_cut_before_any_config_is_undecided_not_a_no() -> None:
    from autotune.search.finalists import DO_NOT_SPECULATE, UNDECIDED
    from autotune.records.validation import FinalistEntry, Judgement, ValidationRecord

    no = Judgement(DO_NOT_SPECULATE, None, "no speculative config completed in the search")
    measured_no = Judgement(DO_NOT_SPECULATE, None, "below 1.05")
    entry = FinalistEntry(trial=3, label="ngram k=3")
    record = ValidationRecord(statistic="s", level=0.9, prompts=0, repeats=1, finalists=[],
                              **no._asdict(), engines={"vllm": no, "hf": measured_no},
                              engine_finalists={"vllm": [], "hf": [entry]})
    budget = Budget(600.0, started=0.0, clock=FakeClock())
    assert fitting.undecided_if_cut(record, budget) is record      # nothing was stopped
    budget.stopped.append("the screen after 1 of 30 configs")
    cut = fitting.undecided_if_cut(record, budget)
    assert cut.judgement.decision == UNDECIDED and "--time-budget" in cut.judgement.reason
    assert cut.engines["vllm"].decision == UNDECIDED
    # A "no" from measured finalists stands: the budget does not weaken it.
    assert cut.engines["hf"] == measured_no
    assert fitting.undecided_if_cut(record, None) is record


# -- the screen's setup (references, cost parts): fixed time before the sizing ----------

def test_the_cost_parts_effort_fits_its_share_and_a_slow_machine_leaves_the_screen_out(
        ) -> None:
    from autotune.replay.effort import EFFORTS, FULL

    def setup(ar_s: float) -> tuple[Budget, object]:
        clock = FakeClock()
        budget = Budget(600.0, started=clock.now, clock=clock)
        clock.advance(20.0)                               # loading, speed, profile
        return budget, budget.screen_setup(24, 32, ar_s)

    # The main job's machine: the parts in full (about 37 s), nothing said of them.
    budget, effort = setup(0.0266)
    assert effort == FULL and not budget.stopped
    budget.parts_measured_at(effort)
    assert budget.trimmed == []
    # Seven times slower: full parts would take 280 s; the least level fits a fifth of
    # what is left, and the summary says what it cut.
    budget, effort = setup(0.2)
    assert effort == EFFORTS[-1] and effort.part_repeats < FULL.part_repeats
    assert effort.seconds(32, 0.2) <= budget_module.PARTS_SHARE * budget.left()
    budget.parts_measured_at(effort)
    budget.plan(CAPS, SHAPE, 0.2)
    assert budget.cuts()[-1].startswith("the replay cost parts at least effort (3 of 7 ")
    assert any("the replay cost parts at least effort" in line for line in budget.summary())
    # 352 ms/token (the machine that spent 597 s of 600 on the screen's first config):
    # references and the least parts would take most of the budget; no screen.
    budget, effort = setup(0.352)
    assert effort is None
    assert budget.stopped and budget.stopped[0].startswith("the screen before it began")


def test_the_sizing_counts_the_setup_as_fixed_time_and_drops_its_estimate() -> None:
    prepared = Shape(**{**SHAPE.__dict__, "screen_prepared": True})
    raw, done = (stage_seconds(CAPS, shape, 0.1) for shape in (SHAPE, prepared))
    references = budget_module.REFERENCE_TOKENS * 24 * 32 * 0.1
    assert raw["screen"] - done["screen"] == pytest.approx(references)
    assert {s: raw[s] for s in raw if s != "screen"} == {s: done[s] for s in done
                                                          if s != "screen"}
    clock = FakeClock()
    budget = Budget(600.0, started=clock.now, clock=clock)
    clock.advance(250.0)                                  # a slow setup, however long
    counts = budget.plan(CAPS, prepared, 0.03)
    assert budget.fixed_s == pytest.approx(250.0) and counts.screen < CAPS.screen
    assert sum(stage_seconds(counts, prepared, 0.03).values()) <= 600 - 250 - budget.reserve


def test_a_budgeted_search_measures_its_cost_parts_before_sizing_the_rest(
        tiny_dir, tmp_path, monkeypatch, capsys) -> None:
    import autotune.replay.parts as costs

    # 0.25 s per AR token and a clock moving 0.2 s a reading, as above; the cost parts
    # take 100 s of it (a slow machine), however fast they really ran.
    monkeypatch.setattr(profile, "ar_seconds_per_token", lambda target: 0.25)
    monkeypatch.setattr(profile, "ar_decode_seconds_per_token", lambda target, ids: None)
    clocks: list[FakeClock] = []

    def start(plan):
        clock = FakeClock(step=0.2)
        clocks.append(clock)
        return Budget(plan.time_budget_s, clock.now, clock)
    monkeypatch.setattr(fitting, "start", start)
    efforts = []
    measure = costs.measure_parts

    def slow(*args, **kwargs):
        efforts.append(args[5] if len(args) > 5 else kwargs.get("effort"))
        parts = measure(*args, **kwargs)
        clocks[-1].advance(100.0)
        return parts
    monkeypatch.setattr(costs, "measure_parts", slow)
    run = tmp_path / "run"
    assert main(_args(tiny_dir, run, "3m")) == 0
    out, err = capsys.readouterr()
    # Full parts are estimated at 88 s here, more than a fifth of 3 minutes: the least.
    assert [e.name for e in efforts] == ["least"]
    measured = err.index("measuring the replay cost model's parts")
    sized = err.index("of the budget left for the search")
    assert measured < sized                 # the parts came before the sizing
    left = float(err[:sized].rsplit("autotune: ", 1)[1].split()[0])
    assert left < 180 - 100                 # and their 100 s were counted
    assert "the replay cost parts at least effort" in out
    used = float(out.split("time budget 3m: ")[1].split(" s used")[0])
    assert used <= 180


def test_engines_raced_in_themselves_are_planned_with_their_start_up() -> None:
    """`--target all` where an engine runs here: its race in itself is a stage of the
    plan, its engines' start-up counted (vLLM's compiled engines take a minute or more
    each), and an engine whose share cannot hold its start-up is skipped, not started."""
    from autotune.backends import EngineCost
    vllm, hf = EngineCost(3100.0, 2.0), EngineCost(0.0, 1.7)
    raced = Shape(**{**SHAPE.__dict__, "engine_races": (vllm, hf), "engine_race_arms": 3})
    plain = stage_seconds(CAPS, SHAPE, 0.0266)
    planned = stage_seconds(CAPS, raced, 0.0266)
    assert plain["engine_races"] == 0.0
    # Three engines each started, then 16 prompts x 32 tokens x 3 arms at their cost.
    assert planned["engine_races"] == pytest.approx(
        (3 * (3100 + 16 * 32 * 1.1 * 2.0) + 3 * 16 * 32 * 1.1 * 1.7) * 0.0266)
    assert {k: v for k, v in planned.items() if k != "engine_races"} == {
        k: v for k, v in plain.items() if k != "engine_races"}
    # Planned in, they leave the other stages less.
    clock = FakeClock()
    without = Budget(600.0, started=clock.now, clock=clock).plan(CAPS, SHAPE, 0.0266)
    budget = Budget(600.0, started=clock.now, clock=clock)
    cut = budget.plan(CAPS, raced, 0.0266)
    assert cut.screen < without.screen or cut.measured < without.measured
    # Each engine's share of what is left, in proportion to its estimate against the
    # engines after it: vLLM's start-up makes its race the larger.
    race = {c: 3 * (c.start_tokens + cut.measured * 32 * 1.1 * c.token_ratio)
            for c in (vllm, hf)}
    assert budget.engine_race_seconds(clock.now + 600.0, vllm, 3, (hf,)) == pytest.approx(
        600.0 * race[vllm] / (race[vllm] + race[hf]))
    assert budget.engine_race_seconds(clock.now + 400.0, hf, 3) == pytest.approx(400.0)
    # Skipped where its share cannot hold its start-up (3 x 3100 tokens at 26.6 ms: 247 s).
    assert budget.engine_race_seconds(clock.now + 200.0, vllm, 3) == 0.0
    assert budget.engine_race_seconds(clock.now + 260.0, vllm, 3, (hf,)) == 0.0
    # Nor where it holds the start-up (247 s) but not its first look beside it (8
    # prompts x 32 tokens x 3 arms at vLLM's cost: 45 s more): a first look always runs
    # once begun, and overran a 600 s budget by 28 s (issue 59).
    first = 3 * (3100 + min(8, cut.measured) * 32 * 1.1 * 2.0) * 0.0266
    assert budget.first_look_seconds(vllm, 3) == pytest.approx(first)
    assert budget.engine_race_seconds(clock.now + 280.0, vllm, 3) == 0.0
    assert budget.engine_race_seconds(clock.now + first + 1.0, vllm, 3) > 0.0


def test_a_measured_start_up_prices_an_engine_race_in_seconds() -> None:
    """A start-up measured on this machine (`EngineCost.start_s`) is seconds, whatever
    the decode speed: a slow machine's AR pace no longer inflates vLLM's start-up
    (3100 tokens at 83 ms would be 257 s a start)."""
    from autotune.backends import EngineCost
    measured = EngineCost(3100.0, 2.0, start_s=30.0)
    shape = Shape(**{**SHAPE.__dict__, "engine_races": (measured,), "engine_race_arms": 3})
    seconds = stage_seconds(CAPS, shape, 0.083)["engine_races"]
    assert seconds == pytest.approx(3 * 30.0 + 3 * 16 * 32 * 1.1 * 2.0 * 0.083)


def test_engine_races_are_admitted_after_autotune_own_floors_cheapest_first() -> None:
    """Issue 59: on a slow machine the engines' races in themselves took the time
    autotune's own search needed. They are admitted only where they fit beside autotune's
    own stages at their floors, the cheapest first; a dropped one is one line naming the
    seconds it needs, gets no share, and the summary says so."""
    from autotune.backends import EngineCost
    vllm, hf = EngineCost(3100.0, 2.0, start_s=95.0), EngineCost(0.0, 1.7)
    # The screen's references are decoded before the sizing (fixed time, as in a run).
    shape = Shape(**{**SHAPE.__dict__, "engine_races": (vllm, hf), "engine_race_arms": 3,
                     "screen_prepared": True})
    clock = FakeClock()
    budget = Budget(900.0, started=clock.now, clock=clock)
    clock.advance(60.0)                          # loading, profile, the screen's setup
    # At 83 ms/token autotune's own floors take about 450 s of the 822 left: HF's race
    # (about 120 s) fits, vLLM's (three 95 s start-ups and its prompts) does not.
    admitted = budget.admit_engine_races(CAPS, shape, 0.083, {"vllm": vllm, "hf": hf})
    assert admitted == ["hf"]
    assert list(budget.dropped) == ["vllm"]
    reason = budget.dropped["vllm"]
    assert "needs about" in reason and "95 s each, measured here" in reason
    # A budget that cannot hold even autotune's own floors admits none.
    short = Budget(480.0, started=clock.now, clock=clock)
    assert short.admit_engine_races(CAPS, shape, 0.083, {"vllm": vllm, "hf": hf}) == []
    # On a machine three times faster both fit.
    fast = Budget(900.0, started=clock.now, clock=clock)
    assert fast.admit_engine_races(CAPS, shape, 0.0266, {"vllm": vllm, "hf": hf}) == [
        "vllm", "hf"]
    assert not fast.dropped
    # The plan holds the admitted race only; the summary names the dropped one.
    budget.plan(CAPS, Shape(**{**shape.__dict__, "engine_races": (hf,)}), 0.083)
    lines = budget.summary()
    assert any(line.startswith("dropped at planning: vllm's race in itself needs about")
               for line in lines)
    assert "s used (" in lines[0]


def test_the_floors_hold_what_a_decision_needs() -> None:
    """However little time is left, the counts keep AR and one measured config, and a
    measured sample of the race's first look (the cross-fitted estimate's least), from
    a pool larger than it."""
    from autotune.search.racing import FIRST_LOOK
    tight = size_counts(CAPS, SHAPE, 0.083, 1.0)
    assert tight.trials == 2 and budget_module.SPECULATIVE_FLOOR == 2
    assert tight.measured == FIRST_LOOK and tight.pool > tight.measured


def test_start_ups_are_recorded_per_engine_and_reused_by_the_next_plan(
        tmp_path, monkeypatch) -> None:
    from autotune.backends import engine_cost
    from autotune.backends.registry import BACKEND_RECORDS
    from autotune.backends.startup import known_startup, record_startup
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    assert engine_cost("vllm", "default").start_s is None          # nothing measured yet
    key = BACKEND_RECORDS["vllm"].startup("default")
    for seconds in (80.0, 97.0, 66.0):
        record_startup(key, seconds)
    assert known_startup(key) == 80.0                               # the median
    assert engine_cost("vllm", "default").start_s == 80.0
    # Another model, mode or engine is another key.
    assert engine_cost("vllm", "other.gguf").start_s is None
    assert engine_cost("llama_server", "default").start_s is None
    (tmp_path / "engine_startup.json").write_text("not json")
    assert engine_cost("vllm", "default").start_s is None           # unreadable: ignored



def test_a_short_race_keeps_autotune_own_two_then_each_engine_best() -> None:
    """A budget cuts breadth before the least a decision needs: with room for few arms
    the race keeps autotune's own two best finalists, then each engine's best, then the
    documented defaults; with none to spare it still keeps autotune's two."""
    from autotune.search.finalists import Finalist

    def finalist(trial: int, role: str, engine: str = "autotune") -> Finalist:
        return Finalist(trial=trial, label=f"c{trial}", role=role, preset=None, params={},
                        search={}, engine=engine)
    chosen = [finalist(1, "search #1"), finalist(2, "search #2"),
              finalist(3, "default ngram"), finalist(4, "vllm #1", "vllm"),
              finalist(5, "default vllm_ngram", "vllm"), finalist(6, "hf #1", "hf")]
    clock = FakeClock()
    budget = Budget(600.0, started=clock.now, clock=clock)
    budget.plan(CAPS, SHAPE, 0.0266)
    per_arm = budget_module.race_seconds(budget.counts.measured, 1, SHAPE, SHAPE.race_cost,
                                         0.0266)
    # Time for six arms (AR and five finalists): the engines' defaults go last.
    clock.advance(budget.left() - 6.5 * per_arm)
    kept, unfit = fitting.race_arms(budget, chosen)
    assert [f.trial for f in kept] == [1, 2, 3, 4, 6] and [f.trial for f in unfit] == [5]
    # Room for three: an engine raced in itself after this race keeps its best first
    # (its race there takes its finalists from this one).
    clock.advance(budget.left() - 4.5 * per_arm)
    kept, _ = fitting.race_arms(budget, chosen, raced_here=("hf",))
    assert [f.trial for f in kept] == [1, 2, 6]
    # Time for one arm: autotune's own two stay (the floor), nothing else.
    clock.advance(budget.left() - 1.0 * per_arm)
    kept, unfit = fitting.race_arms(budget, chosen)
    assert [f.trial for f in kept] == [1, 2]
    assert fitting.race_arms(None, chosen) == (chosen, [])


def test_a_search_whose_trials_held_ar_alone_races_the_screen_two_best(
        tiny_dir, tmp_path, capsys) -> None:
    """Issue 59: where the measured trials ran no speculative config (here --trials 1: the
    AR baseline; on a slow machine, the trials' share of the budget), autotune's own group
    still races two finalists, the screen's best, and answers from them."""
    args = _args(tiny_dir, tmp_path / "run", "none")
    args[args.index("--trials") + 1] = "1"
    assert main(args) == 0
    _, err = capsys.readouterr()
    assert "racing the screen's" in err
    best = json.loads((tmp_path / "run" / "best.json").read_text())
    roles = [f["role"] for f in best["validation"]["finalists"]]
    assert roles[:2] == ["screen #1", "screen #2"], roles


def test_the_hardware_profile_is_left_out_of_a_budget_it_would_take_much_of() -> None:
    # 230 s of a 240 s budget went to the profile on a machine at 1.1 s/token.
    clock = FakeClock()
    assert Budget(600.0, started=clock.now, clock=clock).profile_fits(0.0266)
    slow = Budget(240.0, started=clock.now, clock=clock)
    assert not slow.profile_fits(1.14)
    assert slow.stopped and slow.stopped[0].startswith("the hardware profile before it began")


def test_a_race_grows_only_back_up_to_the_validation_prompts_asked_for() -> None:
    """Issue 59: a race grows its sample into the pool only where --time-budget cut it,
    and never past --validation-prompts (caps.measured): a run without a budget, or
    one whose sample was not cut, keeps the sample it asked for."""
    from types import SimpleNamespace

    from autotune.pipeline.budget import NoBudget
    from autotune.workloads.prompts import Prompt
    from autotune.workloads.split import PromptSplit, _sample

    pool = [Prompt(f"p{i}", f"c{i % 3}", f"id{i}") for i in range(24)]
    split = PromptSplit([], _sample(pool, 12, 7), "test", pool)
    plan = SimpleNamespace(split=split, held_out=split.held_out, seed=7)
    clock = FakeClock()
    budget = Budget(600.0, started=clock.now, clock=clock)
    budget.plan(CAPS, SHAPE, 0.0266)
    assert budget.caps.measured == 16
    reserve = fitting.race_reserve(plan, budget)
    assert reserve == _sample(pool, None, 7)[12:16]
    assert fitting.race_reserve(plan, NoBudget()) == []
    assert fitting.race_reserve(plan, None) == []
    whole = PromptSplit([], _sample(pool, 16, 7), "test", pool)
    assert fitting.race_reserve(SimpleNamespace(split=whole, held_out=whole.held_out,
                                                seed=7), budget) == []


def test_the_engines_screens_deadline_is_set_once_their_profiles_are_measured() -> None:
    """Issue 60: the engines' profiles are measured before their screens; the screens'
    deadline is set after them, on the screens' own estimate, so a profile slower than
    its estimate no longer leaves the screens nothing (a run answered no engine)."""
    import dataclasses

    clock = FakeClock()
    budget = Budget(600.0, started=clock.now, clock=clock)
    budget.plan(CAPS, dataclasses.replace(SHAPE, engine_profiles_s=60.0), 0.0266)
    with_profiles = budget_module.stage_seconds(budget.counts, budget.shape, 0.0266)
    deadline, _ = fitting.engines_stop(budget)
    assert budget.shape.engine_profiles_s == 0.0
    screens_alone = budget_module.stage_seconds(budget.counts, budget.shape, 0.0266)
    assert screens_alone["engines"] == pytest.approx(with_profiles["engines"] - 60.0)
    assert deadline > clock.now
    assert fitting.engines_stop(budget_module.NoBudget()) is None


def test_a_race_resumes_only_where_the_time_left_holds_its_next_look() -> None:
    """Issue 59: a race resumed in the time the later stages left runs its next look
    whole once begun; a run resumed with 26 s left took 64 s and passed its budget by
    27. It resumes now only where the time left holds that look at the race's pace."""
    from types import SimpleNamespace

    clock = FakeClock()
    budget = Budget(600.0, started=clock.now, clock=clock)
    budget.plan(CAPS, SHAPE, 0.0266)
    budget.stop_at("race")
    clock.advance(80.0)                      # 8 prompts in 80 s: 10 s a prompt
    budget.done("race")
    assert budget.took("race") == pytest.approx(80.0)
    record = SimpleNamespace(race=SimpleNamespace(measured=8), planned_prompts=11)
    clock.advance(budget.left() - 26.0)
    assert fitting.left_for_race(budget, record) is None        # its 3 prompts need 30 s
    clock.now -= 14.0                                           # 40 s left
    assert fitting.left_for_race(budget, record) == pytest.approx(40.0)
    done = SimpleNamespace(race=SimpleNamespace(measured=11), planned_prompts=11)
    assert fitting.left_for_race(budget, done) is None          # nothing left to measure
    assert fitting.left_for_race(budget_module.NoBudget(), record) is None
