"""What TPE's asks cost on the joint space, layer bits as two categories or as integers.

A replay screen asks Optuna's TPE (multivariate, grouped, as `make_sampler("tpe")`) for
hundreds of configs, each a skip mask of one bit per sublayer among other knobs. This
times `--trials` asks on the joint space bound to the default model's 30 layers with a
stand-in objective (a hash of the params: TPE's cost does not depend on the values),
once with the bits as suggested today (`BIT_CHOICES`, categorical) and once as integers
0..1 (how they were suggested before), same seed.

    python bench/sampler_asks.py [--trials 300]
"""

from __future__ import annotations

import argparse
import hashlib
import time
import warnings
from typing import Any

import optuna

from autotune.search.samplers import make_sampler
from autotune.space import load_space
from autotune.space.binding import BIT_CHOICES, InfeasibleConfig, trained_space_args


class _IntegerBits:
    """A trial that suggests a two-category bit as an integer 0..1 instead."""

    def __init__(self, trial: optuna.Trial) -> None:
        self._trial = trial

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        if tuple(choices) == BIT_CHOICES:
            return self._trial.suggest_int(name, 0, 1)
        return self._trial.suggest_categorical(name, choices)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trial, name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=300)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    space = load_space("joint").bind(30, None, None, **trained_space_args(None))
    seconds = {}
    for encoding in ("categorical", "integer"):
        def objective(trial: optuna.Trial) -> float:
            try:
                space.suggest(trial if encoding == "categorical" else _IntegerBits(trial))
            except InfeasibleConfig:
                raise optuna.TrialPruned() from None
            return hashlib.sha256(repr(sorted(trial.params.items())).encode()).digest()[0] / 255
        study = optuna.create_study(direction="maximize", sampler=make_sampler(
            "tpe", 0, 1, dict, startup_trials=max(10, args.trials // 4)))
        start = time.perf_counter()
        study.optimize(objective, n_trials=args.trials)
        seconds[encoding] = time.perf_counter() - start
        print(f"bits {encoding:>11}: {args.trials} asks in {seconds[encoding]:.1f} s "
              f"({1000 * seconds[encoding] / args.trials:.0f} ms each)")
    print(f"integer / categorical: {seconds['integer'] / seconds['categorical']:.2f}")


if __name__ == "__main__":
    main()
