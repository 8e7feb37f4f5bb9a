"""Racing the finalists: the look schedule and error spending, dropping, stopping, the
time budget and resuming, over a stand-in for measurement (no timing here: the arms'
decode times are given, and the budget runs on a fake clock)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from autotune.decoding.decoder import Generation, RoundTrace
from autotune.measure.results import Measurement, PromptRun
from autotune.search import finalists, racing
from autotune.search.finalists import Finalist
from autotune.workloads.prompts import Prompt

PROMPTS = [Prompt(f"p{i}", f"c{i % 3}", f"id{i}") for i in range(24)]
TOKENS = 33


def test_looks_and_error_spending_keep_the_total_at_ten_percent() -> None:
    assert racing.look_sizes(16) == [8, 12, 16]
    assert racing.look_sizes(6) == [6]
    assert racing.look_sizes(21) == [8, 12, 16, 20, 21]
    spent, levels = 0.0, []
    for size in racing.look_sizes(16):
        level = racing.look_level(0.1, spent, size, 16)
        spent += 1 - level
        levels.append(level)
    assert math.isclose(spent, 0.1)
    # Little is spent early (a race stops early only on a clear result).
    assert levels[0] == pytest.approx(1 - 0.0125) and levels[-1] == pytest.approx(1 - 0.0578125)


def test_a_looks_error_is_shared_by_the_arms_racing_in_each_group() -> None:
    """Bonferroni within each group (issue 59): three arms of autotune's own share a
    look's 3%, the one vLLM arm keeps its group's 3% whole; an arm in no group is in
    the group ""."""
    levels = racing.arm_levels(0.97, ["trial1", "trial2", "trial3", "vllm.trial4"],
                               {"trial1": "autotune", "trial2": "autotune",
                                "trial3": "autotune", "vllm.trial4": "vllm"})
    assert levels == pytest.approx({"trial1": 0.99, "trial2": 0.99, "trial3": 0.99,
                                    "vllm.trial4": 0.97})
    assert racing.arm_levels(0.9, ["a", "b"], {}) == pytest.approx({"a": 0.95, "b": 0.95})


def test_a_finalist_clearly_behind_is_dropped_and_one_left_above_one_decides() -> None:
    look = racing.next_look({"a": (1.2, 1.4), "b": (0.8, 1.1), "c": (1.1, 1.3)},
                            last=False, min_gain=0.05)
    assert look.dropped == ["b"] and look.keep == ["a", "c"] and look.stop is None
    look = racing.next_look({"a": (1.2, 1.4), "c": (1.0, 1.15)}, last=False, min_gain=0.05)
    assert look.keep == ["a"] and look.stop == "decided"
    # Every interval below 1 + min_gain: nothing worth having, decided.
    look = racing.next_look({"a": (0.9, 1.04), "c": (0.95, 1.03)}, last=False, min_gain=0.05)
    assert look.stop == "decided"
    # Too close to call: on.
    look = racing.next_look({"a": (0.98, 1.2), "c": (0.97, 1.15)}, last=False, min_gain=0.05)
    assert look.stop is None and look.keep == ["a", "c"]
    assert racing.next_look({"a": (0.98, 1.2)}, last=True, min_gain=0.05).stop == "sample"


class _Bench:
    """A stand-in for `measure_arms`: arm `trialN` decodes `speedups[N]` times faster
    than the baseline with a little noise per prompt; a fake clock advances 10 s per
    prompt measured."""

    def __init__(self, speedups: dict[int, float], noise: float = 0.02) -> None:
        self.speedups = speedups
        self.noise = noise
        self.now = 0.0
        self.measured: list[str] = []
        self.histories: list[list[str]] = []
        self.warm_ups: list[bool] = []
        self.rng = np.random.default_rng(0)

    def clock(self) -> float:
        return self.now

    def measure_arms(self, target: Any, configs: dict[str, Any], prompts: list[Prompt],
                     max_new_tokens: int, repeats: int = 1, seed: int = 0, draft: Any = None,
                     on_prompt: Any = None, backend: Any = None, history: Any = (),
                     responses: Any = None, warm_up: bool = True) -> dict[str, Measurement]:
        # What each look was told came before it (a stateful method's warm history).
        self.histories.append([p.prompt_id for p in history])
        self.warm_ups.append(warm_up)
        runs: dict[str, list[PromptRun]] = {arm: [] for arm in configs}
        for prompt in prompts:
            self.now += 10.0
            self.measured.append(prompt.prompt_id)
            base_s = 0.02 * TOKENS * (1 + 0.3 * self.rng.random())
            baseline = Generation(5, list(range(TOKENS)), 0.01, base_s,
                                  [RoundTrace(0, 0, 1, [], 0.0, 0.02, 1)] * (TOKENS - 1), 0)
            for arm in configs:
                speed = self.speedups[int(arm.removeprefix("trial"))]
                cand_s = base_s / speed * (1 + self.noise * self.rng.normal())
                candidate = Generation(5, list(range(TOKENS)), 0.01, cand_s,
                                       [RoundTrace(3, 1, 2, [], 0.0, 0.02, 4)] * 16, 0)
                runs[arm].append(PromptRun(prompt.prompt_id, prompt.category, baseline,
                                           candidate))
        return {arm: Measurement(configs[arm], "m", None, "cpu", "float32", max_new_tokens,
                                 arm_runs, None, None, "none")
                for arm, arm_runs in runs.items()}


def _race(monkeypatch: pytest.MonkeyPatch, bench: _Bench, budget: float | None = None,
          resume: dict[str, Any] | None = None, sample: int = 16,
          reserve: int = 0) -> dict[str, Any]:
    import autotune.measure.measurement as measurement

    monkeypatch.setattr(measurement, "measure_arms", bench.measure_arms)
    monkeypatch.setattr(finalists.time, "monotonic", bench.clock)
    chosen = [Finalist(n, f"ngram k={n}", f"search #{n}", None,
                       {"method": "ngram", "k": n}, {}) for n in bench.speedups]
    ctx = SimpleNamespace(target=None, draft=None, max_new_tokens=TOKENS, seed=0,
                          final_backend=None)
    earlier = finalists.ValidationRecord.from_json(resume) if resume is not None else None
    record = finalists.measure_finalists(ctx, chosen, PROMPTS[:sample], 1, 5, "test",
                                         budget_s=budget, resume=earlier,
                                         reserve=PROMPTS[sample:sample + reserve])
    return record.to_json()         # the record as the study stores it


def test_a_clear_race_stops_at_the_first_look_with_the_leader(monkeypatch) -> None:
    bench = _Bench({1: 1.6, 2: 0.7, 3: 1.0})
    record = _race(monkeypatch, bench)
    race = record["race"]
    assert race["stopped"] == "decided" and race["measured"] == 8
    assert len(bench.measured) == 8 and record["prompts"] == 8
    assert record["decision"] == finalists.SPECULATE and record["winner"] == 1
    dropped = {f["trial"]: f["dropped_after"] for f in record["finalists"]}
    assert dropped == {1: None, 2: 8, 3: 8}
    winner = next(f for f in record["finalists"] if f["trial"] == 1)
    # The look's 98.75% shared by the three arms racing (Bonferroni, issue 59).
    assert winner["look_level"] == pytest.approx(1 - 0.0125 / 3) and winner["ci90"][0] > 1.0
    assert record["race"]["looks"][0]["level"] == pytest.approx(0.9875)


def test_the_budget_stops_a_close_race_undecided_and_a_rerun_resumes_it(monkeypatch) -> None:
    bench = _Bench({1: 1.04, 2: 1.03}, noise=0.15)
    record = _race(monkeypatch, bench, budget=100.0)
    assert record["race"]["stopped"] == "budget" and record["race"]["measured"] == 8
    assert record["decision"] == finalists.UNDECIDED
    assert ("race's 100 s (--validation-budget, or its share of --time-budget) ran out "
            "after 8 of 16 prompts") in record["reason"]
    assert bench.measured == [p.prompt_id for p in PROMPTS[:8]]
    again = _race(monkeypatch, bench, budget=1000.0, resume=record)
    # Only the prompts not measured yet, then the rest of the error.
    assert bench.measured[8:] == [p.prompt_id for p in PROMPTS[8:16]]
    assert again["race"]["measured"] == 16 and again["race"]["stopped"] in ("sample",
                                                                            "decided")
    assert again["race"]["alpha_spent"] == pytest.approx(0.1)
    assert again["prompts"] == 16 and len(again["rows"]["trial1"]) == 16
    # Every look is served after the sample's earlier prompts, a resumed race's too.
    ids = [p.prompt_id for p in PROMPTS]
    assert bench.histories[0] == [] and bench.histories[1:] == [
        ids[:n] for n in (8, 12)][:len(bench.histories) - 1]
    # Our decoder warms up once per process: the first look of each run, not the rest.
    assert bench.warm_ups == [True, True, False][:len(bench.warm_ups)]


def test_a_race_starts_the_engines_its_backend_keeps_before_its_clock() -> None:
    """vLLM keeps started engines idle between looks (a compiled one takes a minute or
    more to start): a race starts the baseline's and its arms' engines, as many as the
    backend keeps, before its clock, and takes that time off its budget."""
    from types import SimpleNamespace

    from autotune.schema.config import DecodeConfig

    started: list[str] = []

    class Keeping:
        idle_engines = 2

        def runner(self, config: DecodeConfig) -> SimpleNamespace:
            started.append(config.method if config.method == "none" else f"k{config.k}")
            return SimpleNamespace(close=lambda: None)

    configs = {f"trial{k}": DecodeConfig(method="ngram", k=k) for k in (2, 3, 4)}
    assert finalists._start_engines(Keeping(), configs) >= 0.0
    assert started == ["none", "k2"]                 # the baseline first, as many as kept
    started.clear()
    Keeping.idle_engines = 0
    assert finalists._start_engines(Keeping(), configs) == 0.0 and started == []
    assert finalists._start_engines(None, configs) == 0.0


def test_a_short_last_look_is_taken_when_the_time_holds_its_prompts():
    # Issue 59: 8 of 11 prompts measured in 92 s of a 109 s race: a look "as long as the
    # first" (92 s) would overrun, the 3 prompts left (about 35 s) do not. The old rule
    # stopped there and left the time unused.
    from autotune.search.racing import overruns
    assert not overruns(92.0, 8, 3, 109.0 + 35.0)
    assert overruns(92.0, 8, 3, 109.0)            # 92 + 34.5 > 109: still refused
    assert not overruns(92.0, 8, 3, 130.0)
    assert overruns(92.0, 8, 8, 130.0)            # a full look would pass it
    assert not overruns(0.0, 0, 8, 10.0) and overruns(11.0, 0, 8, 10.0)
    assert not overruns(1e9, 8, 8, None)


def test_a_sample_ended_with_time_left_grows_into_the_pool_and_spends_alpha_once(
        monkeypatch) -> None:
    """Issue 59: a race that ends its sample with time left grows it into the pool's
    next prompts (10 s a prompt on the fake clock: 8 prompts in 80 s of 200 leave room
    for 10 more at the 85% margin), the look that ended the old plan becomes an interim
    one, and the whole race still spends exactly alpha."""
    bench = _Bench({1: 1.04, 2: 1.03}, noise=0.15)
    record = _race(monkeypatch, bench, budget=200.0, sample=8, reserve=16)
    race = record["race"]
    assert record["planned_prompts"] == 18 and race["measured"] in (12, 16, 18)
    assert bench.measured == [p.prompt_id for p in PROMPTS[:race["measured"]]]
    assert race["looks"][0]["level"] == pytest.approx(1 - 0.1 * (8 / 18) ** 3)
    if race["stopped"] != "decided":
        assert race["measured"] == 18 and race["alpha_spent"] == pytest.approx(0.1)
    assert race["alpha_spent"] <= 0.1 + 1e-12
    # A rerun of the same plan finds the record by the sample as drawn.
    from autotune.workloads.prompts import workload_digest
    assert record["sample_sha256"] == workload_digest(PROMPTS[:8])
    # Without a budget, or with no time to spare, the sample stays as planned.
    assert _race(monkeypatch, _Bench({1: 1.04, 2: 1.03}, noise=0.15), sample=8,
                 reserve=16)["planned_prompts"] == 8
    assert _race(monkeypatch, _Bench({1: 1.04, 2: 1.03}, noise=0.15), budget=110.0,
                 sample=8, reserve=16)["planned_prompts"] == 8


def test_grown_sample_grows_only_at_the_plans_end_by_what_the_time_holds() -> None:
    grown = racing.grown_sample
    assert grown(8, 8, 16, 80.0, 8, 200.0) == 16            # 10 fit, the pool holds 8
    assert grown(8, 8, 24, 80.0, 8, 200.0) == 18
    assert grown(16, 12, 24, 80.0, 12, 400.0) == 16         # not at the plan's end
    assert grown(8, 8, 24, 80.0, 8, 120.0) == 8             # 3 fit: less than a look
    assert grown(8, 8, 24, 80.0, 8, None) == 8 and grown(8, 8, 8, 80.0, 8, 900.0) == 8
    assert grown(8, 8, 24, 0.0, 0, 900.0) == 8              # no pace yet
    # Two prompts left in the pool (a sample cut 16 -> 14): two fit, the plan takes them.
    assert grown(14, 14, 16, 140.0, 14, 170.0) == 16
    assert grown(14, 14, 16, 140.0, 14, 150.0) == 14        # not even one fits
