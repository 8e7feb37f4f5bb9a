"""Draft & Verify's search against ours, on the default model, same budget.

Draft & Verify searches its skip mask with the bayesian-optimization package: one bit per
attention and MLP sublayer (2L bits), a GP with UCB, its draft settings fixed
(`bench/spaces/dv_bits.yaml`). We run that setting (sampler `bayes_opt`) and our default
sampler (`tpe`) on the same space, objective (latency, lossless constraint) and
workload, alternating one trial of each so that machine drift hits both alike. Both
studies start with the same queued trials (the AR baseline and Draft & Verify's default).
Printed: the best speedup (and latency) found after n evaluations, for both.

With `--multi`, our multi-fidelity search runs instead, in a wall-time budget: the replay
tier screens masks (tpe, latency predicted) for `--screen-s` seconds, then the best
`--measure` distinct masks are measured as the trials above are; printed: masks screened,
the best measured mask, and the wall time, to set against the bayes_opt/tpe tables.

Usage: python bench/dv_parity.py [--trials 30] [--prompts 3] [--max-new-tokens 32]
       python bench/dv_parity.py --multi [--screen-s 240] [--measure 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.models.loading import load_model
from autotune.search.objectives import EvalContext, load_objective
from autotune.search.study import SearchSettings, StudyRunner, counted_trials
from autotune.space import load_space
from autotune.workloads.prompts import load_workload

SPACE = Path(__file__).resolve().parent / "spaces" / "dv_bits.yaml"


def best_so_far(study: optuna.Study, speculative_only: bool = False
                ) -> list[tuple[float, float] | None]:
    """Per counted trial, in order: (best latency, its speedup) so far; with
    `speculative_only`, among skip masks only (the AR baseline trial left out)."""
    out: list[tuple[float, float] | None] = []
    best: tuple[float, float] | None = None
    for t in counted_trials(study.get_trials(deepcopy=False)):
        eligible = t.state == TrialState.COMPLETE and not (
            speculative_only and t.user_attrs.get("preset") == "baseline")
        if eligible and (best is None or t.value < best[0]):
            best = (t.value, t.user_attrs["metrics"]["speedup"])
        out.append(best)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--multi", action="store_true",
                        help="replay screen, then measure the best masks")
    parser.add_argument("--screen-s", type=float, default=240.0)
    parser.add_argument("--measure", type=int, default=5)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if args.multi:
        multi(args)
        return

    target = load_model("default", "cpu", "float32")
    bound = load_space(str(SPACE)).bind(target.n_layers, None)
    objective = load_objective("latency")
    prompts = load_workload("builtin", None, args.prompts)
    context = EvalContext(target=target, draft=None, prompts=prompts,
                          max_new_tokens=args.max_new_tokens, seed=args.seed, memo={})
    folder = Path(tempfile.mkdtemp(prefix="dv-parity-"))
    runners = {}
    for sampler in ("bayes_opt", "tpe"):
        settings = SearchSettings(study_name=sampler, storage=str(folder / f"{sampler}.journal"),
                                  trials=0, sampler=sampler, seed=args.seed, prune=False)
        runners[sampler] = StudyRunner(settings, bound, objective, context)
    began = time.monotonic()
    for n in range(1, args.trials + 1):
        for runner in runners.values():
            runner.settings.trials = n
            runner.run()
        print(f"{n}/{args.trials} trials each, {time.monotonic() - began:.0f} s", flush=True)

    print(f"\n{args.prompts} prompts x {args.max_new_tokens} tokens, "
          f"{bound.space.name}: {len(bound.knobs())} bits")
    for speculative_only in (False, True):
        curves = {name: best_so_far(r.study, speculative_only) for name, r in runners.items()}
        print("\nbest so far" + (", skip masks only (baseline left out)" if speculative_only
                                 else ", the AR baseline included"))
        print(f"{'evals':>5}  {'bayes_opt ms/tok (speedup)':>28}  {'tpe ms/tok (speedup)':>24}")
        for i in range(args.trials):
            cells = []
            for name in ("bayes_opt", "tpe"):
                point = curves[name][i] if i < len(curves[name]) else None
                cells.append("-" if point is None else f"{point[0]:.2f} ({point[1]:.3f})")
            print(f"{i + 1:>5}  {cells[0]:>28}  {cells[1]:>24}")
    for name, runner in runners.items():
        best = runner.study.best_trial
        print(f"{name}: best trial {best.number} {best.value:.2f} ms/token, speedup "
              f"{best.user_attrs['metrics']['speedup']:.3f}, attn_skip "
              f"{best.user_attrs['config']['attn_skip']}, mlp_skip "
              f"{best.user_attrs['config']['mlp_skip']}")


def multi(args: argparse.Namespace) -> None:
    """The replay screen for `--screen-s` seconds, then `--measure` masks measured."""
    from autotune.search.screening import run_screen, screened_queue

    began = time.monotonic()
    target = load_model("default", "cpu", "float32")
    bound = load_space(str(SPACE)).bind(target.n_layers, None)
    objective = load_objective("latency")
    prompts = load_workload("builtin", None, args.prompts)
    folder = Path(tempfile.mkdtemp(prefix="dv-parity-multi-"))
    context = EvalContext(target=target, draft=None, prompts=prompts,
                          max_new_tokens=args.max_new_tokens, seed=args.seed, memo={},
                          replay_parts=folder / "replay_costs.json")
    settings = SearchSettings(study_name="multi", storage=str(folder / "multi.journal"),
                              trials=args.measure + 1, sampler="tpe", seed=args.seed,
                              prune=False, timeout_s=args.screen_s)
    screen, _ = run_screen(settings, 100_000, bound, objective, context)
    screened = len(counted_trials(screen.study.get_trials(deepcopy=False)))
    screen_s = time.monotonic() - began
    settings.timeout_s = None
    settings.screened = screened_queue(screen, objective, args.measure)
    runner = StudyRunner(settings, bound, objective, context)
    runner.run()
    total = time.monotonic() - began
    measured = [t for t in runner.study.get_trials(deepcopy=False)
                if t.state == TrialState.COMPLETE and t.user_attrs.get("preset") != "baseline"]
    base = next(t for t in runner.study.get_trials(deepcopy=False)
                if t.user_attrs.get("preset") == "baseline")
    print(f"\n{args.prompts} prompts x {args.max_new_tokens} tokens, {bound.space.name}: "
          f"{screened} masks replayed in {screen_s:.0f} s (model load and cost parts "
          f"included), {len(measured)} measured; {total:.0f} s in all")
    print(f"AR baseline measured {base.value:.2f} ms/token")
    for t in sorted(measured, key=lambda t: t.value):
        m, c, s = t.user_attrs["metrics"], t.user_attrs["config"], t.user_attrs["screen"]
        print(f"  screen #{s['rank']}: predicted {s['predicted']['latency_ms_per_token']:.2f} "
              f"ms/token ({s['predicted']['speedup']:.3f}x), measured {t.value:.2f} "
              f"({m['speedup']:.3f}x); {len(c['attn_skip'])} attention + "
              f"{len(c['mlp_skip'])} MLP skipped: attn {c['attn_skip']} mlp {c['mlp_skip']}")


if __name__ == "__main__":
    main()
