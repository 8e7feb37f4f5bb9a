"""Each engine's candidates priced at that engine's own costs (issue 60).

The replay tier's rounds are exact for the engines' model-free drafters; a round's price
was our decoder's, whatever the engine (vLLM's CPU step is about 2x ours and mostly fixed
per step). A profile measured in the engine (`backends.profile.EngineProfile`) now prices
a config for that engine and its baseline. A tiny random-weight Llama drafts here; the
costs are synthetic, so nothing depends on this machine's speed.
"""

from __future__ import annotations

import pytest
from tiny import tiny_llama

from autotune.backends.profile import FORMAT as PROFILE_FORMAT
from autotune.backends.profile import (EngineProfile, ProfileKey, ProfilePoint, load_profile,
                                       store_profile)
from autotune.backends.profiling import fit_profile
from autotune.replay.costs import FORMAT, CostParts, LayerParts
from autotune.replay.run import Replayer
from autotune.schema.config import DecodeConfig
from autotune.workloads.prompts import Prompt

LAYERS = 4
# Our decoder's prices: a pass costs in proportion to the tokens it verifies, so a wide
# verify step that is mostly rejected loses.
STEEP = [[1, 10.0], [2, 20.0], [4, 40.0], [8, 80.0], [16, 160.0]]
PROMPTS = [Prompt("t1 t2 t3 t1 t2 t3 t1", "rep", "p0"), Prompt("t7 t8 t9 t7 t8", "mix", "p1"),
           Prompt("t4 t5 t6 t4", "other", "p2")]
KEY = ProfileKey("vllm", "0.32.0", "eager", 2, "cpu", "tiny", 16)
# vLLM-like: a large fixed cost per step (scheduler, input preparation, sampler) that a
# wide verify step pays once.
FIXED = EngineProfile(PROFILE_FORMAT, KEY, ar_ms=50.0, verify_curve=[[1, 50.0], [16, 53.0]],
                      draft_ms={"ngram": 0.1}, spec_overhead_ms=0.5)
KS = (1, 2, 4, 8)


def _parts() -> CostParts:
    bare = LayerParts(layers=LAYERS, base=1.0, attn=0.15, mlp=0.35, kv=0.4, head=0.8,
                      choose=0.3)
    return CostParts(FORMAT, {}, STEEP, ar_other=0.5, spec_other=0.5, ngram_lookup=0.05,
                     tree_node=0.0, tree_other=0.0, tree_verify_factor=1.0,
                     target_layers=bare, draft_curve=None, draft_layers=None, draft_factor={})


@pytest.fixture
def replayer(tmp_path) -> Replayer:
    target = tiny_llama(seed=1, layers=LAYERS, scale=4.0)
    return Replayer(target, None, PROMPTS, 24, tmp_path / "unused.json", tmp_path,
                    parts=_parts())


def _ranking(replayer: Replayer, engine: str) -> list[int]:
    """The k of each n-gram config, best predicted speedup first."""
    speedups = {k: replayer.summary(DecodeConfig(method="ngram", engine=engine, k=k,
                                                 ngram_min=1, ngram_max=2))["speedup"]
                for k in KS}
    return sorted(KS, key=speedups.__getitem__, reverse=True)


def test_an_engine_profile_with_a_large_fixed_step_cost_ranks_a_long_draft_first(replayer):
    # At our decoder's prices the shortest draft wins...
    assert _ranking(replayer, "vllm")[0] == 1
    replayer.engine_profiles["vllm"] = FIXED
    # ...at the engine's own, where a step costs about the same however wide, the longest.
    assert _ranking(replayer, "vllm")[0] == 8
    summary = replayer.summary(DecodeConfig(method="ngram", engine="vllm", k=8, ngram_min=1,
                                            ngram_max=2))
    assert any("priced at vllm's own costs" in note for note in summary["replay_notes"])
    # The baseline is the engine's AR step: every AR round costs its 50 ms.
    base = replayer.replay(DecodeConfig(method="ngram", engine="vllm", k=8, ngram_min=1,
                                        ngram_max=2)).runs[0].baseline
    assert all(r.verify_s == pytest.approx(0.050) for r in base.rounds)


def test_an_engine_without_a_profile_keeps_our_prices_and_says_so(replayer):
    replayer.engine_profiles["vllm"] = FIXED
    # Another engine (a GPU one, say) is unaffected by vLLM's profile, and says whose
    # prices it has.
    assert _ranking(replayer, "sglang")[0] == 1
    summary = replayer.summary(DecodeConfig(method="ngram", engine="sglang", k=2,
                                            ngram_min=1, ngram_max=2))
    assert any("no profile of sglang" in note for note in summary["replay_notes"])
    # Autotune's own configs keep our decoder's prices, with no note.
    own = replayer.summary(DecodeConfig(method="ngram", k=2, ngram_min=1, ngram_max=2))
    assert not any("priced" in note for note in own["replay_notes"])


def test_a_profile_is_fitted_from_points_the_engine_counted():
    """Points on a line: the AR step, then steps at 1.2 ms per verified token above a
    2 ms speculative overhead; the fit gives the overhead, and the verify curve, the
    AR step at one token."""
    ar = ProfilePoint(k=0, steps=32, verified=1.0, step_ms=10.0)
    spec = [ProfilePoint(k=k, steps=10, verified=k + 1.0, step_ms=12.0 + 1.2 * k)
            for k in (1, 3, 7)]
    profile = fit_profile(KEY, ar, spec, "ngram", None, 1.0)
    assert profile.spec_overhead_ms == pytest.approx(2.0)
    assert profile.verify_ms(1) == pytest.approx(10.0)
    assert profile.verify_ms(8) == pytest.approx(10.0 + 1.2 * 7)
    assert profile.step_ms(8, "ngram") == pytest.approx(12.0 + 1.2 * 7)
    assert any("inside the engine's step" in note for note in profile.notes)


def test_a_profile_is_kept_under_its_key(tmp_path):
    paths = [tmp_path / "run" / "engine_profiles.json", tmp_path / "cache.json"]
    store_profile(FIXED, paths)
    assert load_profile(KEY, paths) == FIXED
    assert load_profile(KEY, paths[1:]) == FIXED
    # Another context, release or thread count is another profile.
    for other in (dataclass_replace(KEY, context=17), dataclass_replace(KEY, version="0.33"),
                  dataclass_replace(KEY, threads=4)):
        assert load_profile(other, paths) is None
    paths[1].write_text("{not json")
    assert load_profile(KEY, paths[1:]) is None


def dataclass_replace(key: ProfileKey, **changes) -> ProfileKey:
    import dataclasses
    return dataclasses.replace(key, **changes)


def test_a_profile_measured_in_the_engine_is_reused_on_a_rerun(tmp_path, monkeypatch):
    """HF `generate()` on the tiny model is profiled once; a rerun (another search, the
    same engine, model, machine and context) loads it from the cache folder and measures
    nothing, and the search's replayer prices HF's configs with it."""
    from autotune.search import engine_prices
    from autotune.search.objectives import EvalContext

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    target = tiny_llama(seed=1, layers=LAYERS, scale=4.0)

    def context() -> EvalContext:
        ctx = EvalContext(target=target, draft=None, prompts=list(PROMPTS), max_new_tokens=8)
        ctx.memo["replayer"] = Replayer(target, None, PROMPTS, 8, tmp_path / "unused.json",
                                        tmp_path / "refs", parts=_parts())
        return ctx

    first = engine_prices.price_engines(context(), ["hf"], "tiny", None, tmp_path / "run1")
    assert first is not None and set(first.profiles) == {"hf"}
    measured = first.profiles["hf"]
    assert measured.ar_ms > 0 and measured.points[0].k == 0 and len(measured.points) > 2
    assert (tmp_path / "run1" / "engine_profiles.json").is_file()

    def measure_again(*args, **kwargs):
        raise AssertionError("the profile was measured again")

    monkeypatch.setattr(engine_prices, "_measure", measure_again)
    ctx = context()
    again = engine_prices.price_engines(ctx, ["hf"], "tiny", None, tmp_path / "run2")
    assert again is not None and again.profiles["hf"] == measured
    assert (tmp_path / "run2" / "engine_profiles.json").is_file()
    assert ctx.memo["replayer"].engine_profiles["hf"] == measured
    assert engine_prices.cached_engine("hf", "tiny")


def test_a_short_race_keeps_each_engine_best_and_default_before_its_next_finalists():
    """Each engine raced in itself brings up to ENGINE_FINALISTS of its screen (issue 60
    item 3); a race cut to its time keeps autotune's two, each engine's best, the
    defaults, and only then the engines' next finalists."""
    from test_time_budget import CAPS, SHAPE, FakeClock

    from autotune.pipeline import budget as budget_module
    from autotune.pipeline import fitting
    from autotune.pipeline.budget import Budget
    from autotune.search.engine_screens import ENGINE_FINALISTS
    from autotune.search.finalists import Finalist

    assert ENGINE_FINALISTS >= 3

    def finalist(trial: int, role: str, engine: str = "autotune") -> Finalist:
        return Finalist(trial=trial, label=f"c{trial}", role=role, preset=None, params={},
                        search={}, engine=engine)
    chosen = [finalist(1, "search #1"), finalist(2, "search #2"),
              finalist(3, "default ngram"), finalist(4, "vllm #1", "vllm"),
              finalist(5, "vllm #2", "vllm"), finalist(6, "vllm #3", "vllm"),
              finalist(7, "default vllm_ngram", "vllm"), finalist(8, "hf #1", "hf")]
    clock = FakeClock()
    budget = Budget(600.0, started=clock.now, clock=clock)
    budget.plan(CAPS, SHAPE, 0.0266)
    per_arm = budget_module.race_seconds(budget.counts.measured, 1, SHAPE, SHAPE.race_cost,
                                         0.0266)
    # Time for AR and seven finalists: all but the engine's third.
    clock.advance(budget.left() - 8.5 * per_arm)
    kept, unfit = fitting.race_arms(budget, chosen)
    assert [f.trial for f in kept] == [1, 2, 3, 4, 5, 7, 8] and [f.trial for f in unfit] == [6]
    # Time for AR and five: each engine's best and autotune's default, not the engines'
    # default nor their next ones.
    clock.advance(budget.left() - 6.5 * per_arm)
    kept, unfit = fitting.race_arms(budget, chosen)
    assert [f.trial for f in kept] == [1, 2, 3, 4, 8]
    assert [f.trial for f in unfit] == [5, 6, 7]


def test_a_profile_still_to_measure_is_counted_in_the_engines_stage(monkeypatch):
    """The budget counts a profile's cost: each profiled k an engine started and its
    decodes, in the engines' screens' stage. A compiled engine's start is priced cold
    (its prior), however fast the starts it recorded with a warm compile cache: vLLM's
    first compiled profile took 94 s a config where its recorded start-ups were 12-19 s."""
    import dataclasses

    from test_time_budget import CAPS, SHAPE

    from autotune.backends import EngineCost
    from autotune.backends.profiling import profile_runs
    from autotune.pipeline.budget import stage_seconds
    from autotune.search import engine_prices
    from autotune.search.engine_prices import profile_seconds

    costs = {"vllm": EngineCost(3100.0, 2.0, start_s=14.0), "hf": EngineCost(0.0, 1.7)}
    mode = {"vllm": "compiled", "hf": "eager"}
    monkeypatch.setattr(engine_prices, "engine_cost", lambda e, model=None: costs[e])
    monkeypatch.setattr(engine_prices, "_version_mode", lambda e, model: ("1", mode[e], 2))
    vllm = profile_seconds("vllm", "default", 0.03)
    assert vllm > profile_runs("vllm") * 3100.0 * 0.03 > profile_runs("vllm") * 14.0
    mode["vllm"] = "eager"              # an eager start is what it recorded
    assert profile_runs("vllm") * 14.0 < profile_seconds("vllm", "default", 0.03) < vllm
    assert profile_seconds("hf", "default", 0.03) < vllm
    shape = dataclasses.replace(SHAPE, stages=SHAPE.stages | {"engines"})
    plain = stage_seconds(CAPS, shape, 0.03)["engines"]
    priced = stage_seconds(CAPS, dataclasses.replace(shape, engine_profiles_s=vllm), 0.03)
    assert priced["engines"] == pytest.approx(plain + vllm)


def test_a_noisy_profile_never_prices_a_wide_step_below_the_ar_step():
    """On a loaded machine the points scatter: the fitted overhead is at most the least
    excess of a speculative step over the AR step, and the verify curve never falls
    below the AR step."""
    ar = ProfilePoint(k=0, steps=31, verified=1.0, step_ms=547.8)
    spec = [ProfilePoint(1, 23, 1.61, 1323.0), ProfilePoint(3, 19, 2.47, 540.1),
            ProfilePoint(6, 17, 3.53, 205.5), ProfilePoint(10, 18, 5.5, 232.0)]
    profile = fit_profile(KEY, ar, spec, "ngram", 0.25, 1.0)
    assert profile.spec_overhead_ms >= 0.0
    values = [ms for _, ms in profile.verify_curve]
    assert values[0] == pytest.approx(547.8) and values == sorted(values)


def test_an_engine_that_pays_its_overhead_only_where_it_drafted_prices_a_miss_at_its_ar_step():
    """Issue 60: HF's prompt lookup pays its speculative overhead on the steps that drafted;
    a step whose lookup missed costs about its AR step (8 Spec-Bench prompts: priced with
    the overhead on every step, 16-26% above measured). Its registry record says so, the
    profile carries it, and the replay prices a miss without it; vLLM's keeps it."""
    from autotune.backends.registry import BACKEND_RECORDS
    from autotune.replay.engine_prices import EngineCostModel
    from autotune.replay.simulate import ReplayRound

    assert not BACKEND_RECORDS["hf"].spec_overhead_on_misses
    assert BACKEND_RECORDS["vllm"].spec_overhead_on_misses
    config = DecodeConfig(method="ngram", k=4, engine="vllm").validate()
    miss = ReplayRound(drafted=0, accepted=0, emitted=1, verified=1, depth=0, confidences=[])
    hit = ReplayRound(drafted=4, accepted=2, emitted=3, verified=5, depth=4, confidences=[])
    pays = EngineCostModel(FIXED, config, None)
    spared = EngineCostModel(dataclass_replace_profile(FIXED, overhead_on_misses=False),
                             config, None)
    assert pays.round_seconds(miss)[2] == pytest.approx(0.0005)
    assert spared.round_seconds(miss)[2] == 0.0
    assert spared.round_seconds(hit) == pays.round_seconds(hit)
    # fit_profile carries the record's word into the profile.
    ar = ProfilePoint(k=0, steps=32, verified=1.0, step_ms=10.0)
    spec = [ProfilePoint(k=k, steps=10, verified=k + 1.0, step_ms=12.0 + 1.2 * k)
            for k in (1, 3, 7)]
    assert not fit_profile(KEY, ar, spec, "ngram", None, 1.0,
                           overhead_on_misses=False).overhead_on_misses


def dataclass_replace_profile(profile: EngineProfile, **changes) -> EngineProfile:
    import dataclasses
    return dataclasses.replace(profile, **changes)


def test_a_target_engine_prices_its_own_screen_where_its_profile_fits_the_budget(
        tmp_path, monkeypatch):
    """`--target ENGINE` that measures here (issue 60: `--target vllm` answered 0.79 of the
    best fixed config in vLLM, its screen ranked at our decoder's prices): its cost
    profile prices its own screen before the sizing; one not cached is measured only
    where its estimate fits its share of the time left, else the screen keeps our
    prices and the budget's cuts say so. Another target, or no screen, prices nothing."""
    import types

    from test_time_budget import FakeClock

    from autotune.pipeline import fitting
    from autotune.pipeline.budget import Budget
    from autotune.search import engine_prices
    from autotune.search.objectives import EvalContext

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    target = tiny_llama(seed=1, layers=LAYERS, scale=4.0)
    ctx = EvalContext(target=target, draft=None, prompts=list(PROMPTS), max_new_tokens=8)
    ctx.memo["replayer"] = Replayer(target, None, PROMPTS, 8, tmp_path / "unused.json",
                                    tmp_path / "refs", parts=_parts())
    plan = types.SimpleNamespace(in_engine=True, fidelity="multi", target="hf",
                                 model="tiny", draft=None, max_new_tokens=8,
                                 run_dir=tmp_path / "run")
    clock = FakeClock()
    # 60 s left: HF's profile (tens of seconds at 1 s/token) does not fit a quarter.
    short = Budget(60.0, started=clock.now, clock=clock)
    assert fitting.price_target(plan, short, 1.0, ctx) is None
    assert any("hf's own cost profile" in cut for cut in short.trimmed)
    assert not ctx.memo["replayer"].engine_profiles
    # Not the engine's to measure, or no screen: nothing priced, nothing measured.
    with monkeypatch.context() as patched:
        patched.setattr(engine_prices, "_measure", _never)
        for other in ({"in_engine": False}, {"fidelity": "measure"}):
            assert fitting.price_target(types.SimpleNamespace(**{**vars(plan), **other}),
                                        None, None, ctx) is None
    # Without a budget it is measured, kept in the run folder, and prices the screen.
    prices = fitting.price_target(plan, None, None, ctx)
    assert prices is not None and set(prices.profiles) == {"hf"}
    assert ctx.memo["replayer"].engine_profiles["hf"] == prices.profiles["hf"]
    assert (tmp_path / "run" / "engine_profiles.json").is_file()
    # Cached now: the short budget takes it at no cost.
    again = Budget(60.0, started=clock.now, clock=clock)
    assert fitting.price_target(plan, again, 1.0, ctx) is not None
    assert not again.trimmed


def _never(*args, **kwargs):
    raise AssertionError("a profile was measured")
