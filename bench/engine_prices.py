"""Each engine's own prices checked (issue 60): per engine that runs here, configs
predicted by the engine's cost profile (and, beside it, by our decoder's prices) and
measured in the engine itself, on held-out prompts neither the profile nor the screen saw.

One timing job, nothing else on the machine:

1. a seeded split of Spec-Bench into search and held-out prompts;
2. per engine: its profile (`backends.profiling`, on a search prompt; loaded from the
   cache folder where a run measured it already), then a screen of its n-gram grid on
   the search prompts by replay at its own prices: its top 3;
3. the arms: the engine's documented default, the screen's top 3 and spread configs
   (short and long drafts, short and long n-grams) to at least --arms; measured in the
   engine on the held-out prompts against the engine without speculation (one AR
   baseline, interleaved per prompt), and predicted there by replay at the engine's
   prices and at our decoder's.

Prints per engine a row per arm (predicted at its prices, at ours, measured with its 90%
interval) and, per basis of prices, the median |predicted / measured - 1|, the worst and
Spearman's rho over the arms.

Usage: python bench/engine_prices.py [--engines hf,llama_server,vllm] [--search 12]
       [--held-out 8] [--measured N] [--max-new-tokens 32] [--arms 6] [--eager]
       [--seed 0] [--csv FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from autotune.backends import open_backend
from autotune.measure import paired
from autotune.measure.measurement import measure_arms
from autotune.models.loading import load_model
from autotune.replay import PARTS_FILE
from autotune.replay.reference import cache_dir
from autotune.replay.run import Replayer
from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.schema.engines import rules_for
from autotune.schema.label import describe
from autotune.search.engine_prices import price_engines
from autotune.search.objectives import EvalContext
from autotune.workloads.prompts import load_workload, round_robin, split_workload


def _log(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def _grid(engine: str) -> list[dict]:
    """The engine's n-gram space (engine_<name>.yaml), as a grid."""
    if engine == "hf":
        return [{"method": "ngram", "k": k, "ngram_min": 1, "ngram_max": n,
                 "exit_policy": "fixed"} for k in range(1, 11) for n in range(1, 6)]
    if engine == "vllm":
        return [{"method": "ngram", "k": k, "ngram_min": lo, "ngram_max": hi,
                 "exit_policy": "fixed"}
                for k in range(1, 11) for lo in range(1, 6) for hi in range(lo, 6)]
    return [{"method": "llama_ngram", "llama_spec_type": "ngram-simple", "k": k,
             "llama_ngram_size_n": n, "exit_policy": "fixed"}
            for k in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) for n in (2, 3, 4, 6, 8, 12, 16)]


# The engine's documented default (the methods' presets), then spread configs.
DEFAULTS = {
    "hf": {"method": "ngram", "k": 10, "ngram_min": 1, "ngram_max": 2, "exit_policy": "fixed"},
    "vllm": {"method": "ngram", "k": 5, "ngram_min": 5, "ngram_max": 5, "exit_policy": "fixed"},
    "llama_server": {"method": "llama_ngram", "llama_spec_type": "ngram-simple", "k": 48,
                     "llama_ngram_size_n": 12, "exit_policy": "fixed"},
}
SPREAD = {
    "hf": [{"k": 1, "ngram_max": 1}, {"k": 4, "ngram_max": 3}, {"k": 10, "ngram_max": 5},
           {"k": 2, "ngram_max": 2}],
    "vllm": [{"k": 9, "ngram_min": 2, "ngram_max": 2}, {"k": 3, "ngram_min": 2, "ngram_max": 2},
             {"k": 7, "ngram_min": 4, "ngram_max": 5}, {"k": 1, "ngram_min": 1, "ngram_max": 1}],
    # From across its grid's range first: its default and the screen's top configs all
    # measure within a few percent of each other here (0.89-0.99x, overlapping
    # intervals), so ranks over them alone are noise; a long draft behind a short n-gram
    # verifies 65 tokens (about 8 ms each) at every match.
    "llama_server": [{"k": 64, "llama_ngram_size_n": 2}, {"k": 4, "llama_ngram_size_n": 2},
                     {"k": 24, "llama_ngram_size_n": 3}, {"k": 16, "llama_ngram_size_n": 4},
                     {"k": 8, "llama_ngram_size_n": 12}],
}


def _config(engine: str, values: dict) -> DecodeConfig:
    return config_from_mapping({**values, "engine": rules_for(engine, "cpu")}).validate()


def _speedup(measurement) -> float | None:
    return paired.speedup([run.pair() for run in measurement.runs])


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for m in range(i, j + 1):
            ranks[order[m]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rho (ties share their mean rank); None below 3 points or flat ranks."""
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else None


def _errors(predicted: list[float], measured: list[float]) -> tuple[float, float, float | None]:
    errors = [abs(p / m - 1) for p, m in zip(predicted, measured)]
    return statistics.median(errors), max(errors), spearman(predicted, measured)


def _arms(engine: str, screen: Replayer, n: int) -> dict[str, DecodeConfig]:
    """The default, the screen's top 3 at the engine's prices, then spread configs."""
    began = time.perf_counter()
    scored = []
    for values in _grid(engine):
        config = _config(engine, values)
        scored.append((screen.summary(config)["speedup"], describe(config.to_dict()), config))
    scored.sort(key=lambda row: -row[0])
    _log(f"{engine}: screened {len(scored)} configs in {time.perf_counter() - began:.0f} s")
    arms = {"default": _config(engine, DEFAULTS[engine])}
    seen = {describe(arms["default"].to_dict())}
    top = 0
    for _, label, config in scored:
        if top == 3:
            break
        if label not in seen:
            seen.add(label)
            top += 1
            arms[f"screen #{top}"] = config
    for values in SPREAD[engine]:
        if len(arms) >= n:
            break
        config = _config(engine, {**DEFAULTS[engine], **values})
        if describe(config.to_dict()) not in seen:
            seen.add(describe(config.to_dict()))
            arms[f"spread {len(arms) - top}"] = config
    return arms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="hf,llama_server")
    parser.add_argument("--search", type=int, default=12)
    parser.add_argument("--held-out", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--arms", type=int, default=6)
    parser.add_argument("--measured", type=int, default=0,
                        help="measure and predict on the first N held-out prompts only "
                             "(0: all of them; the split, hence the caches, unchanged)")
    parser.add_argument("--eager", action="store_true", help="vLLM without torch.compile")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv")
    args = parser.parse_args(argv)

    target = load_model("default", device="cpu", dtype="float32")
    prompts = round_robin(load_workload("spec_bench"), args.search + args.held_out)
    seen, held_out = split_workload(prompts, args.held_out / len(prompts), args.seed)
    if args.measured:
        held_out = held_out[:args.measured]
    _log(f"{len(seen)} search prompts, {len(held_out)} held-out measured")
    parts_path = cache_dir() / PARTS_FILE
    screen = Replayer(target, None, seen, args.max_new_tokens, parts_path)
    held = Replayer(target, None, held_out, args.max_new_tokens, parts_path,
                    parts=screen.parts)
    rows = []
    for engine in args.engines.split(","):
        ctx = EvalContext(target=target, draft=None, prompts=list(seen),
                          max_new_tokens=args.max_new_tokens)
        ctx.memo["replayer"] = screen
        if engine == "vllm" and args.eager:
            import os
            os.environ["AUTOTUNE_VLLM_EAGER"] = "1"
        began = time.perf_counter()
        prices = price_engines(ctx, [engine], "default", None, None)
        if prices is None or not prices.profiles:
            _log(f"{engine}: no profile; skipped")
            continue
        profile = next(iter(prices.profiles.values()))
        _log(f"{engine}: profile in {time.perf_counter() - began:.0f} s "
             f"(measured in {profile.measured_s:.0f} s when it was measured)")
        arms = _arms(engine, screen, args.arms)
        backend = open_backend(engine, target, None, "default", held_out, args.max_new_tokens)
        began = time.perf_counter()
        try:
            measured = measure_arms(target, arms, held_out, args.max_new_tokens,
                                    seed=args.seed, backend=backend)
        finally:
            backend.close()
        _log(f"{engine}: measured in {backend.label} in {time.perf_counter() - began:.0f} s")
        held.engine_profiles = {}
        ours = {name: held.replay(c) for name, c in arms.items()}
        held.engine_profiles = dict(prices.profiles)
        theirs = {name: held.replay(c) for name, c in arms.items()}
        for name, config in arms.items():
            pairs = [run.pair() for run in measured[name].runs]
            rows.append({"engine": engine, "arm": name, "config": describe(config.to_dict()),
                         "engine_prices": _speedup(theirs[name]),
                         "our_prices": _speedup(ours[name]),
                         "measured": paired.speedup(pairs),
                         "measured_ci90": paired.interval(pairs),
                         "profile": {"ar_ms": profile.ar_ms,
                                     "verify_curve": profile.verify_curve,
                                     "draft_ms": profile.draft_ms,
                                     "spec_overhead_ms": profile.spec_overhead_ms}})
        _report(engine, backend.label, [r for r in rows if r["engine"] == engine],
                len(held_out), args.max_new_tokens, profile)
    if args.csv:
        Path(args.csv).write_text(json.dumps(rows, indent=2, default=list) + "\n")
    return 0


def _report(engine: str, label: str, rows: list[dict], prompts: int, tokens: int,
            profile) -> None:
    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    print(f"\n{engine}: {label}, {prompts} held-out Spec-Bench prompts, {tokens} new tokens, "
          f"greedy; profile AR {profile.ar_ms:.1f} ms/step, overhead "
          f"{profile.spec_overhead_ms:.2f} ms/step, verify curve "
          + ", ".join(f"{n:g}:{ms:.1f}" for n, ms in profile.verify_curve))
    print(f"{'arm':10} {'config':44} {'engine prices':>13} {'our prices':>10} "
          f"{'measured [90%]':>26}")
    for r in rows:
        ci = r["measured_ci90"]
        interval = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        print(f"{r['arm']:10} {r['config'][:44]:44} {fmt(r['engine_prices']):>13} "
              f"{fmt(r['our_prices']):>10} {fmt(r['measured']):>8} {interval:>17}")
    complete = [r for r in rows if r["measured"] and r["engine_prices"] and r["our_prices"]]
    measured = [r["measured"] for r in complete]
    for basis in ("engine_prices", "our_prices"):
        median, worst, rho = _errors([r[basis] for r in complete], measured)
        print(f"{basis:14} median |pred/meas - 1| {median:.1%}, worst {worst:.1%}, "
              f"Spearman rho {fmt(rho)} over {len(complete)} configs")


if __name__ == "__main__":
    sys.exit(main())
