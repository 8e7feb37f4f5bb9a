"""The study runner on tiny random models: samplers, defaults, failure, timeout,
pruning, resume. (Kill -9, many workers and the CLI run in test_search_cli.py.)"""

from __future__ import annotations

import socket
import time
from functools import partial

import optuna
import pytest
from optuna.trial import TrialState
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.common.errors import AutotuneError
from autotune.records.summary import MeasurementSummary
from autotune.schema.config import DecodeConfig
from autotune.search import evaluation
from autotune.runs.folder import best_document, top_table, trials_frame, write_run_files
from autotune.search.objectives import EvalContext, load_objective
from autotune.search.samplers import BayesOptSampler, make_sampler
from autotune.search.study import (
    UNPRUNED_ATTR,
    SearchSettings,
    StudyRunner,
    counted_trials,
    presets,
)
from autotune.space import load_space
from autotune.workloads.prompts import Prompt

PROMPTS = [Prompt(text="t1 t2 t3 t4 t5 t1 t2 t3 t4", category="a", prompt_id="p0"),
           Prompt(text="t7 t8 t9 t7 t8 t9 t7", category="b", prompt_id="p1")]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=3, layers=4, scale=4.0)


def _runner(tmp_path, target, space="ngram", objective="latency", trials=6, sampler="tpe",
            draft=None, **kwargs) -> StudyRunner:
    obj = load_objective(objective)
    bound = load_space(space).bind(target.n_layers, None if draft is None else draft.n_layers)
    settings = SearchSettings(study_name="s", storage=str(tmp_path / "study.journal"),
                              trials=trials, sampler=sampler, seed=0, **kwargs)
    context = EvalContext(target=target, draft=draft, prompts=PROMPTS, max_new_tokens=6,
                          seed=0, memo={})
    return StudyRunner(settings, bound, obj, context)


def _finished(runner: StudyRunner) -> list:
    return runner.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                           TrialState.PRUNED, TrialState.FAIL))


@pytest.mark.parametrize("sampler,space,objective", [
    ("tpe", "joint", "latency"),
    ("random", "ngram", "speedup"),
    ("grid", "ngram", "latency"),
    ("qmc", "ngram", "latency"),
    ("cmaes", "ngram", "latency"),
    ("gp", "layer_skip", "latency"),
    ("bayes_opt", "layer_skip", "latency"),
    ("nsga2", "ngram", "latency_memory"),
])
def test_every_sampler_runs_trials(tmp_path, target, sampler, space, objective):
    runner = _runner(tmp_path, target, space, objective, trials=7, sampler=sampler)
    reason = runner.run()
    assert reason == "budget"
    trials = runner.study.get_trials(deepcopy=False)
    assert len(counted_trials(trials)) == 7
    # The AR baseline is always trial 0, recorded with no parameters.
    assert trials[0].user_attrs["preset"] == "baseline" and trials[0].params == {}
    assert trials[0].user_attrs["config"]["method"] == "none"
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) >= 5
    for t in complete:
        assert t.user_attrs["metrics"]["lossless"] is True
        assert len(t.values) == len(runner.objective.metrics)
    # Samplers other than the queued defaults produced trials of their own.
    assert any("preset" not in t.user_attrs for t in complete)


def test_defaults_are_queued_once_and_only_where_expressible(tmp_path, target):
    runner = _runner(tmp_path, target, "ngram", trials=3)
    runner.run()
    names = [t.user_attrs.get("preset") for t in runner.study.get_trials(deepcopy=False)]
    assert names[:2] == ["baseline", "vllm_ngram"]
    vllm = runner.study.get_trials(deepcopy=False)[1]
    assert vllm.user_attrs["config"] | {"k": 5, "ngram_min": 5, "ngram_max": 5} == \
        vllm.user_attrs["config"]
    # Draft & Verify's default is not an n-gram config; HF/SGLang ones need a draft.
    assert "dv_default" not in names and "hf_assisted" not in names
    again = _runner(tmp_path, target, "ngram", trials=4)
    assert again.enqueue_defaults() == []


def test_dv_default_preset_is_expressible_in_layer_skip_space(target):
    bound = load_space("layer_skip").bind(30, None)
    dv = next(p for p in presets(30) if p.name == "dv_default")
    params = bound.encode(dv.values)
    assert params is not None
    config = bound.params_to_config(params)
    assert config.k == 8 and config.exit_policy == "adaptive" and config.gamma == 0.8
    assert config.attn_skip == tuple(range(15, 29, 2))


def test_failing_and_oom_trials_are_recorded_and_the_study_goes_on(tmp_path, target, monkeypatch):
    runner = _runner(tmp_path, target, "ngram", trials=6, prune=False)
    real = partial(evaluation.evaluate, runner.objective)
    calls = {"n": 0}

    def flaky(ctx, config, report=None):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if calls["n"] == 3:
            raise ValueError("something broke\nwith a second line")
        return real(ctx, config, report)

    monkeypatch.setattr(evaluation, "evaluate",
                        lambda self, ctx, config, report=None: flaky(ctx, config, report))
    assert runner.run() == "budget"
    failed = [t for t in runner.study.get_trials(deepcopy=False) if t.state == TrialState.FAIL]
    messages = sorted(t.user_attrs["error"] for t in failed)
    assert messages == ["ValueError: something broke",
                        "out of memory: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    assert len(counted_trials(runner.study.get_trials(deepcopy=False))) == 6


def test_trial_timeout_fails_only_the_slow_trial(tmp_path, target, monkeypatch):
    runner = _runner(tmp_path, target, "ngram", trials=3, trial_timeout_s=0.5, prune=False)
    calls = {"n": 0}

    def slow_second(self, ctx, config, report=None):
        calls["n"] += 1
        if calls["n"] == 2:
            # Only the deadline ends this wait: without it the trial would finish
            # (after a minute) and complete, and the assertions below would fail.
            time.sleep(60)
        # The other trials answer at once: a real measurement could itself pass the
        # half-second deadline on a loaded machine.
        return MeasurementSummary(latency_ms_per_token=10.0 + calls["n"], lossless=True)

    monkeypatch.setattr(evaluation, "evaluate", slow_second)
    runner.run()
    states = [t.state for t in runner.study.get_trials(deepcopy=False)]
    assert states.count(TrialState.FAIL) == 1
    failed = next(t for t in runner.study.get_trials(deepcopy=False) if t.state == TrialState.FAIL)
    assert "--trial-timeout 0.5" in failed.user_attrs["error"]


def test_constraint_violation_fails_the_trial(tmp_path, target, monkeypatch):
    runner = _runner(tmp_path, target, "ngram", trials=2, prune=False)
    real = partial(evaluation.evaluate, runner.objective)

    def lossy(self, ctx, config, report=None):
        metrics = real(ctx, config, report)
        return metrics.with_figures(lossless=False)

    monkeypatch.setattr(evaluation, "evaluate", lossy)
    runner.run()
    trials = runner.study.get_trials(deepcopy=False)
    assert all(t.state == TrialState.FAIL for t in trials)
    assert "constraint violated" in trials[0].user_attrs["error"]
    assert best_document(runner.study, runner.objective) is None


def _fake_latency(monkeypatch, runner, value_of):
    """Replace measurement with a deterministic per-prompt latency (pruning logic only)."""
    def evaluate(self, ctx, config, report=None):
        value = value_of(config)
        for step in range(4):
            if report is not None:
                report(step, value)
        return MeasurementSummary(latency_ms_per_token=value, lossless=True, speedup=1.0)

    monkeypatch.setattr(evaluation, "evaluate", evaluate)


def test_median_pruner_prunes_slow_trials_and_no_prune_does_not(tmp_path, target, monkeypatch):
    for prune, folder in ((True, "a"), (False, "b")):
        (tmp_path / folder).mkdir()
        runner = _runner(tmp_path / folder, target, "ngram", trials=16, prune=prune)
        _fake_latency(monkeypatch, runner, lambda c: 10.0 + c.k)
        runner.run()
        # Infeasible points are pruned before measuring; the pruner's are the others.
        pruned = [t for t in runner.study.get_trials(deepcopy=False)
                  if t.state == TrialState.PRUNED and not t.user_attrs.get("infeasible")]
        assert bool(pruned) == prune
        assert all(t.intermediate_values for t in pruned)


def test_an_unpruned_trial_is_measured_on_every_prompt(tmp_path, target, monkeypatch):
    """A screened method's only config (`UNPRUNED_ATTR`) runs every prompt however slow;
    the same config without the flag is pruned."""
    runner = _runner(tmp_path, target, "ngram", trials=8, prune=True)
    slow = {"now": False}
    _fake_latency(monkeypatch, runner, lambda c: 100.0 if slow["now"] else 10.0)
    runner.run()
    params = next(t.params for t in runner.study.get_trials(deepcopy=False)
                  if t.state == TrialState.COMPLETE and t.params)
    slow["now"] = True
    runner.study.enqueue_trial(params, user_attrs={UNPRUNED_ATTR: True}, skip_if_exists=False)
    runner.study.enqueue_trial(params, skip_if_exists=False)
    runner.settings.trials = 10
    runner.run()
    flagged, plain = runner.study.get_trials(deepcopy=False)[-2:]
    assert flagged.user_attrs.get(UNPRUNED_ATTR) and flagged.state == TrialState.COMPLETE
    assert flagged.values == [100.0] and len(flagged.intermediate_values) == 0
    assert not plain.user_attrs.get(UNPRUNED_ATTR) and plain.state == TrialState.PRUNED


def test_resume_counts_finished_trials_toward_the_budget(tmp_path, target):
    first = _runner(tmp_path, target, "ngram", trials=3)
    first.run()
    before = {t.number: t.values for t in _finished(first)}
    second = _runner(tmp_path, target, "ngram", trials=5)
    second.run()
    after = {t.number: t.values for t in _finished(second)}
    assert len(counted_trials(second.study.get_trials(deepcopy=False))) == 5
    assert all(after[n] == v for n, v in before.items())
    assert sum(1 for t in second.study.get_trials() if t.user_attrs.get("preset") == "baseline") == 1


def test_resume_refuses_another_experiment(tmp_path, target):
    runner = _runner(tmp_path, target, "ngram", trials=1, study_attrs={"space_sha256": "aaa"})
    runner.run()
    with pytest.raises(AutotuneError, match="space_sha256"):
        _runner(tmp_path, target, "ngram", trials=2, study_attrs={"space_sha256": "bbb"})


def test_a_study_made_before_its_bits_were_categories_is_refused_by_name(tmp_path, target):
    """A study recorded without `bit_params` had integer bits: resuming it with
    categorical ones is another experiment (Optuna would refuse the params' new
    distributions mid-trial); a key it never recorded otherwise stays unchecked."""
    runner = _runner(tmp_path, target, "ngram", trials=1, study_attrs={"space_sha256": "a"})
    runner.run()
    with pytest.raises(AutotuneError, match="was made with bit_params='integer'"):
        _runner(tmp_path, target, "ngram", trials=2,
                study_attrs={"space_sha256": "a", "bit_params": "categorical"})
    _runner(tmp_path, target, "ngram", trials=2,
            study_attrs={"space_sha256": "a", "screen_sha256": "b"})


def test_a_key_recorded_as_none_is_still_checked_on_resume(tmp_path, target):
    """`draft: None` recorded, a draft given now: another experiment."""
    _runner(tmp_path, target, "ngram", trials=1, study_attrs={"draft": None}).run()
    with pytest.raises(AutotuneError, match="was made with draft=None"):
        _runner(tmp_path, target, "ngram", trials=2, study_attrs={"draft": "d"})


def test_dead_worker_trial_is_failed_and_requeued(tmp_path, target):
    runner = _runner(tmp_path, target, "ngram", trials=2)
    # A trial left RUNNING by a process of this host that no longer exists.
    trial = runner.study.ask({"k": optuna.distributions.IntDistribution(1, 10)})
    trial.set_user_attr("worker", f"{socket.gethostname()}:999999999:1")
    assert runner.recover_interrupted() == [trial.number]
    frozen = runner.study._storage.get_trial(trial._trial_id)
    assert frozen.state == TrialState.FAIL and frozen.user_attrs["interrupted"]
    waiting = runner.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert [t.user_attrs["retry_of"] for t in waiting] == [trial.number]
    assert frozen not in counted_trials(runner.study.get_trials(deepcopy=False))


def test_run_folder_files(tmp_path, target):
    runner = _runner(tmp_path, target, "ngram", trials=3)
    runner.run()
    write_run_files(tmp_path, runner.study, runner.objective)
    frame = trials_frame(runner.study, runner.objective)
    assert {"number", "state", "duration_s", "value.latency_ms_per_token",
            "metrics.speedup", "config.method", "params.k"} <= set(frame.columns)
    assert (tmp_path / "trials.csv").read_text().count("\n") == len(frame) + 1
    best = best_document(runner.study, runner.objective)
    assert best["objective"]["values"]["latency_ms_per_token"] == min(
        t.value for t in runner.study.get_trials() if t.state == TrialState.COMPLETE)
    assert DecodeConfig(**{k: tuple(v) if isinstance(v, list) else v
                           for k, v in best["params"].items()}).validate()
    assert "latency_ms_per_token" in top_table(runner.study, runner.objective)


def test_bayes_opt_sampler_finds_a_quadratic_optimum_and_resumes_from_storage(tmp_path):
    def objective(trial):
        x = trial.suggest_float("x", -5, 5)
        y = trial.suggest_int("y", 0, 10)
        return -((x - 1.5) ** 2) - (y - 7) ** 2

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    study = optuna.create_study(study_name="q", storage=storage, direction="maximize",
                                sampler=make_sampler("bayes_opt", 0, 1, dict))
    study.optimize(objective, n_trials=12)
    # A fresh sampler on the same storage continues from every stored trial.
    resumed = optuna.load_study(study_name="q", storage=storage,
                                sampler=make_sampler("bayes_opt", 1, 1, dict))
    resumed.optimize(objective, n_trials=13)
    assert resumed.best_value > -0.5
    random = optuna.create_study(direction="maximize",
                                 sampler=optuna.samplers.RandomSampler(seed=0))
    random.optimize(objective, n_trials=25)
    assert resumed.best_value >= random.best_value


def test_bayes_opt_refuses_several_objectives():
    with pytest.raises(AutotuneError, match="one objective"):
        make_sampler("bayes_opt", 0, 2, dict)
    with pytest.raises(AutotuneError, match="did you mean 'tpe'"):
        make_sampler("tpee", 0, 1, dict)
    assert isinstance(make_sampler("bayes_opt", 0, 1, dict).inner, BayesOptSampler)


def test_infeasible_points_do_not_count(tmp_path, target):
    runner = _runner(tmp_path, target, "ngram", trials=6, sampler="random")
    runner.run()
    trials = runner.study.get_trials(deepcopy=False)
    infeasible = [t for t in trials if t.user_attrs.get("infeasible")]
    assert all(t.state == TrialState.PRUNED for t in infeasible)
    assert len(counted_trials(trials)) == 6


def test_enqueued_configs_run_first_and_inexpressible_ones_are_refused(tmp_path, target):
    runner = _runner(tmp_path, target, "ngram", trials=4,
                     enqueue=[{"method": "ngram", "k": 2, "ngram_min": 1, "ngram_max": 2}])
    runner.run()
    trials = runner.study.get_trials(deepcopy=False)
    mine = [t for t in trials if t.user_attrs.get("preset") == "enqueue0"]
    assert len(mine) == 1 and mine[0].user_attrs["config"]["k"] == 2
    assert mine[0].number < 3
    other = _runner(tmp_path / "x", target, "ngram", trials=1,
                    enqueue=[{"method": "layer_skip", "attn_skip": [1]}])
    with pytest.raises(AutotuneError, match="not expressible"):
        other.run()


class _Stubborn(optuna.samplers.BaseSampler):
    """Always proposes the same point, as a GP can on a discrete space."""

    def __init__(self, point):
        self.point = point
        self.random = optuna.samplers.RandomSampler(seed=0)

    def infer_relative_search_space(self, study, trial):
        return {"x": optuna.distributions.IntDistribution(0, 50),
                "y": optuna.distributions.IntDistribution(0, 50)}

    def sample_relative(self, study, trial, search_space):
        return dict(self.point)

    def sample_independent(self, study, trial, name, dist):
        return self.random.sample_independent(study, trial, name, dist)


def test_guarded_sampler_moves_on_from_exhausted_points():
    from autotune.search.samplers import MAX_REPEATS, GuardedSampler

    def measured(trial):
        trial.suggest_int("x", 0, 50), trial.suggest_int("y", 0, 50)
        return 1.0

    study = optuna.create_study(sampler=GuardedSampler(_Stubborn({"x": 3, "y": 4})))
    study.optimize(measured, n_trials=MAX_REPEATS + 3)
    points = [(t.params["x"], t.params["y"]) for t in study.trials]
    assert points[:MAX_REPEATS] == [(3, 4)] * MAX_REPEATS
    assert (3, 4) not in points[MAX_REPEATS:]

    def infeasible(trial):
        trial.suggest_int("x", 0, 50), trial.suggest_int("y", 0, 50)
        trial.set_user_attr("infeasible", "no")
        raise optuna.TrialPruned()

    study = optuna.create_study(sampler=GuardedSampler(_Stubborn({"x": 7, "y": 7})))
    study.optimize(infeasible, n_trials=3)
    points = [(t.params["x"], t.params["y"]) for t in study.trials]
    assert points[0] == (7, 7) and (7, 7) not in points[1:]


def test_ctrl_c_inside_a_trial_marks_it_interrupted_and_queues_it(tmp_path, target, monkeypatch):
    runner = _runner(tmp_path, target, "ngram", trials=5, prune=False)
    real = partial(evaluation.evaluate, runner.objective)
    calls = {"n": 0}

    def interrupted_third(self, ctx, config, report=None):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(ctx, config, report)

    monkeypatch.setattr(evaluation, "evaluate", interrupted_third)
    assert runner.run() == "interrupted"
    trials = runner.study.get_trials(deepcopy=False)
    stopped = [t for t in trials if t.user_attrs.get("interrupted")]
    assert len(stopped) == 1 and stopped[0].state == TrialState.FAIL
    assert "Ctrl-C" in stopped[0].user_attrs["error"]
    retry = [t for t in trials if t.state == TrialState.WAITING]
    assert [t.user_attrs["retry_of"] for t in retry] == [stopped[0].number]
    assert retry[0].system_attrs["fixed_params"] == stopped[0].params
    # Resuming runs the queued retry and does not count the interrupted trial.
    monkeypatch.setattr(evaluation, "evaluate", lambda self, c, cfg, r=None: real(c, cfg, r))
    resumed = _runner(tmp_path, target, "ngram", trials=5, prune=False)
    assert resumed.run() == "budget"
    after = resumed.study.get_trials(deepcopy=False)
    assert after[retry[0].number].state == TrialState.COMPLETE
    assert len(counted_trials(after)) == 5


def test_storage_passwords_never_reach_files_or_messages():
    from autotune.search.storage import storage_url_shown
    assert storage_url_shown("postgresql://me:s3cret@db.example:5432/x") == \
        "postgresql://me:***@db.example:5432/x"
    assert storage_url_shown("postgresql://me@db/x") == "postgresql://me@db/x"
    assert storage_url_shown("reports/run/study.journal") == "reports/run/study.journal"


class _StubbornEverywhere(_Stubborn):
    """Proposes the same point through relative and independent sampling alike, as TPE
    does once it has settled (its independent sampling is model-based too)."""

    def sample_independent(self, study, trial, name, dist):
        return self.point[name]


def test_guarded_sampler_draws_at_random_even_when_the_inner_one_never_moves():
    from autotune.search.samplers import MAX_REPEATS, GuardedSampler

    def measured(trial):
        trial.suggest_int("x", 0, 50), trial.suggest_int("y", 0, 50)
        return 1.0

    study = optuna.create_study(
        sampler=GuardedSampler(_StubbornEverywhere({"x": 3, "y": 4}), seed=0))
    study.optimize(measured, n_trials=MAX_REPEATS + 3)
    points = [(t.params["x"], t.params["y"]) for t in study.trials]
    assert points[:MAX_REPEATS] == [(3, 4)] * MAX_REPEATS
    assert (3, 4) not in points[MAX_REPEATS:]


class _SettledTPE(optuna.samplers.BaseSampler):
    """Samples every parameter independently and always the same value for a known one
    (a settled univariate TPE), any other at random."""

    def __init__(self, point):
        self.point = point
        self.random = optuna.samplers.RandomSampler(seed=0)

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, dist):
        if name in self.point:
            return self.point[name]
        return self.random.sample_independent(study, trial, name, dist)


def test_a_distinct_study_screens_each_config_once_and_stops_when_covered(tmp_path, target):
    """A replay screen (`distinct`): a repeat of a finished config is pruned uncounted
    and the next trial draws at random; a space with nothing new left stops ("covered")."""
    from autotune.search.study import COVERED_AFTER, REPEAT_ATTR
    runner = _runner(tmp_path, target, "ngram", trials=8, distinct=True)
    first = runner.study.ask()
    runner.space.suggest(first)
    point = dict(first.params)
    first.set_user_attr("infeasible", "only asked for its parameters")
    runner.study.tell(first, state=TrialState.PRUNED)
    runner.study.sampler.inner = _SettledTPE(point)
    assert runner.run() == "budget"
    trials = runner.study.get_trials(deepcopy=False)
    counted = counted_trials(trials)
    configs = [str(sorted(t.user_attrs["config"].items())) for t in counted]
    assert len(counted) == 8 and len(set(configs)) == 8
    repeats = [t for t in trials if t.user_attrs.get(REPEAT_ATTR) is not None]
    assert repeats and all(t.state == TrialState.PRUNED for t in repeats)
    # Nothing new anywhere (the random draws repeat too): it stops, not spins.
    runner.study.sampler._random = _SettledTPE(point)
    runner.settings.trials = 1000
    assert runner.run() == "covered"
    assert len(counted_trials(runner.study.get_trials(deepcopy=False))) == 8
    after = [t for t in runner.study.get_trials(deepcopy=False)
             if t.user_attrs.get(REPEAT_ATTR) is not None]
    assert len(after) >= len(repeats) + COVERED_AFTER

