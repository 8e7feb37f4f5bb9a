"""Samplers by name: Optuna's own, and the bayesian-optimization package as one more.

Every sampler is wrapped (`GuardedSampler`) for two things the conditional spaces here
need and Optuna's samplers do not do:
- it never sees the autoregressive baseline trial. That trial is recorded with no
  parameters (it has no knobs); Optuna's intersection search space — what GP, CMA-ES,
  QMC and bayes_opt fit on — would shrink to nothing with it;
- it steps around exhausted points: one found infeasible (pruned before anything is
  measured; GP, CMA-ES and bayes_opt learn only from complete trials, so they would
  propose it again and again), or one already measured `MAX_REPEATS` times (a model-based
  sampler on a discrete space can settle on one point for good). Such a proposal is
  replaced by a random draw. One repeat is allowed: a second measurement of a
  promising point on a noisy machine is worth having.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler
from optuna.search_space import IntersectionSearchSpace
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import did_you_mean
from autotune.space.entries import ParamValue
# Named in trial_record (the trial's attributes); here too for the modules that read them.
from autotune.records.trial import BASELINE as BASELINE
from autotune.records.trial import BASELINE_ATTR as BASELINE_ATTR

SAMPLERS = ("tpe", "gp", "cmaes", "random", "grid", "qmc", "nsga2", "bayes_opt")
MAX_REPEATS = 2                   # measurements of one point before a sampler must move on


def check_sampler_name(name: str) -> None:
    """One line naming the samplers there are (and the closest) for an unknown name."""
    if name not in SAMPLERS:
        raise AutotuneError(f"unknown sampler {name!r} (one of {', '.join(SAMPLERS)})"
                            f"{did_you_mean(name, SAMPLERS)}")


def is_baseline(trial: FrozenTrial) -> bool:
    return trial.user_attrs.get(BASELINE_ATTR) == BASELINE and not trial.params


class _StudyView:
    """The study as a sampler should see it: everything but the baseline trial."""

    def __init__(self, study: Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Any = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        trials = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        return [t for t in trials if not is_baseline(t)]

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self._get_trials()


class GuardedSampler(BaseSampler):
    """Delegates to `inner`, hiding the baseline trial and known-infeasible repeats: a
    trial whose proposal is exhausted, or that follows one its runner refused as a
    repeat (`draw_next_at_random`), draws every parameter at random instead (a
    model-based sampler's own independent sampling would propose the same again)."""

    def __init__(self, inner: BaseSampler, seed: int | None = None) -> None:
        self.inner = inner
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._random_trial: int | None = None     # the trial drawn at random
        self._next_random = False

    def draw_next_at_random(self) -> None:
        """The next trial draws at random (its runner refused the last one as a repeat)."""
        self._next_random = True

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        return self.inner.infer_relative_search_space(_StudyView(study), trial)  # type: ignore[arg-type]

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if trial.number == self._random_trial:
            return {}
        params = self.inner.sample_relative(_StudyView(study), trial, search_space)  # type: ignore[arg-type]
        if params and _exhausted(study, params):
            self._random_trial = trial.number
            return {}          # each parameter then comes from sample_independent
        return params

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        if trial.number == self._random_trial:
            return self._random.sample_independent(study, trial, param_name,
                                                   param_distribution)
        return self.inner.sample_independent(_StudyView(study), trial, param_name,  # type: ignore[arg-type]
                                             param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        if self._next_random:
            self._random_trial, self._next_random = trial.number, False
        self.inner.before_trial(_StudyView(study), trial)  # type: ignore[arg-type]

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.inner.after_trial(_StudyView(study), trial, state, values)  # type: ignore[arg-type]

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
        self._random.reseed_rng()


def _exhausted(study: Study, params: dict[str, ParamValue]) -> bool:
    """Whether these very values were found infeasible, or measured MAX_REPEATS times."""
    measured = 0
    for done in study.get_trials(deepcopy=False,
                                 states=(TrialState.PRUNED, TrialState.COMPLETE)):
        if all(done.params.get(name) == value for name, value in params.items()):
            if done.user_attrs.get("infeasible"):
                return True
            measured += 1
    return measured >= MAX_REPEATS


class BayesOptSampler(BaseSampler):
    """The bayesian-optimization package, driven through its suggest/register (ask/tell).

    Draft & Verify searched its skip mask this way: one bit per sublayer, a GP with the
    UCB acquisition (κ = 2.5), a suggestion rounded to bits. Here every finished trial
    in storage is registered before each suggestion, so the search resumes from storage
    and several workers share it like any Optuna sampler. Integers and bits are rounded;
    a categorical becomes its index on a continuous axis. Until one trial has finished
    (bayes_opt's own random initial points), parameters come from random sampling.
    """

    def __init__(self, seed: int | None = None, kappa: float = 2.5) -> None:
        self._seed = seed
        self._kappa = kappa
        self._space = IntersectionSearchSpace()
        self._random = optuna.samplers.RandomSampler(seed=seed)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        if len(study.directions) > 1:
            raise AutotuneError("the bayes_opt sampler optimises one objective; "
                                "use tpe or nsga2 for a multi-objective study")
        return self._space.calculate(study)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        # bayes_opt pulls in scikit-learn and scipy: loaded only when this sampler runs.
        from bayes_opt import BayesianOptimization
        from bayes_opt.acquisition import UpperConfidenceBound

        bounds = {name: _axis(dist) for name, dist in search_space.items()}
        seed = None if self._seed is None else self._seed + trial.number
        optimizer = BayesianOptimization(
            f=None, pbounds=bounds, random_state=seed, verbose=0,
            acquisition_function=UpperConfidenceBound(kappa=self._kappa),
            allow_duplicate_points=True)
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        # bayes_opt prints a line for every repeated point even at verbose=0; rounding to
        # integers and bits makes repeats common and the lines are noise.
        with contextlib.redirect_stdout(io.StringIO()):
            for done in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
                if not all(name in done.params for name in search_space):
                    continue
                point = {name: _to_axis(dist, done.params[name])
                         for name, dist in search_space.items()}
                optimizer.register(params=point, target=sign * float(done.value))
        if not optimizer.space.target.size:
            return {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # sklearn's GP convergence chatter
            suggestion = optimizer.suggest()
        return {name: _from_axis(dist, float(suggestion[name]))
                for name, dist in search_space.items()}

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()


def _axis(dist: BaseDistribution) -> tuple[float, float]:
    if isinstance(dist, CategoricalDistribution):
        return (0.0, float(len(dist.choices) - 1) or 1e-9)
    assert isinstance(dist, (IntDistribution, FloatDistribution))
    if dist.log:
        return (math.log(dist.low), math.log(dist.high))
    return (float(dist.low), float(dist.high))


def _to_axis(dist: BaseDistribution, value: Any) -> float:
    if isinstance(dist, CategoricalDistribution):
        return float(dist.to_internal_repr(value))
    assert isinstance(dist, (IntDistribution, FloatDistribution))
    return math.log(value) if dist.log else float(value)


def _from_axis(dist: BaseDistribution, x: float) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return dist.choices[int(np.clip(round(x), 0, len(dist.choices) - 1))]
    assert isinstance(dist, (IntDistribution, FloatDistribution))
    value = math.exp(x) if dist.log else x
    if isinstance(dist, IntDistribution):
        step = dist.step
        value = dist.low + step * round((value - dist.low) / step)
        return int(min(max(value, dist.low), dist.high))
    if dist.step is not None:
        value = dist.low + dist.step * round((value - dist.low) / dist.step)
    return float(min(max(value, dist.low), dist.high))


def make_sampler(name: str, seed: int | None, n_objectives: int,
                 grid: Callable[[], dict[str, list[Any]]],
                 startup_trials: int | None = None) -> BaseSampler:
    """A sampler by name, wrapped in `GuardedSampler`.

    `startup_trials`: random trials before TPE models anything (Optuna's default 10
    otherwise); a replay screen of hundreds of cheap trials explores first.

    `grid` is called only for the grid sampler (it may raise for spaces a grid cannot
    cover, e.g. a float knob without `grid:` values).
    """
    samplers = optuna.samplers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            # multivariate + group: TPE models knobs jointly within each conditional
            # branch of the space (method, exit policy) instead of one by one.
            inner: BaseSampler = samplers.TPESampler(
                seed=seed, multivariate=True, group=True, constant_liar=True,
                n_startup_trials=startup_trials if startup_trials is not None else 10)
        elif name == "gp":
            inner = samplers.GPSampler(seed=seed, warn_independent_sampling=False)
        elif name == "cmaes":
            if n_objectives > 1:
                raise AutotuneError("cmaes optimises one objective; use tpe or nsga2")
            inner = samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
        elif name == "random":
            inner = samplers.RandomSampler(seed=seed)
        elif name == "grid":
            inner = samplers.GridSampler(grid(), seed=seed)
        elif name == "qmc":
            inner = samplers.QMCSampler(seed=seed, scramble=True,
                                        warn_independent_sampling=False)
        elif name == "nsga2":
            inner = samplers.NSGAIISampler(seed=seed)
        elif name == "bayes_opt":
            if n_objectives > 1:
                raise AutotuneError("bayes_opt optimises one objective; use tpe or nsga2")
            inner = BayesOptSampler(seed=seed)
        else:
            check_sampler_name(name)
            raise AssertionError(f"sampler {name!r} is listed but not built")
    return GuardedSampler(inner, seed)
