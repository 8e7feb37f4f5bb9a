"""llama-server tuned by autotune against the server's own choices, on held-out prompts.

For each workload (default: Spec-Bench and the copy-heavy `copy_edit`) and each
concurrency (default 1 and 4 parallel slots), on the default model's GGUF, one timing
job, nothing else on the machine:

1. a seeded split, stratified by category, into search and held-out prompts; the
   workload's other prompts are never timed: at concurrency C > 1 each timed request
   is served beside C - 1 of them (a companion later timed itself would leave its own
   answer in ngram-mod's shared table);
2. the tuned config: `autotune search --target llama_server --concurrency C` run on
   every prompt but the held-out ones (a JSONL of them: it searches on --search of
   them, holds out its own pool for its finalists' race, serves the rest as
   companions) with `--trials`; its answer is a config, or plain decoding when it says
   "do not speculate" or "undecided";
3. the best single fixed draft cap: every model-free type at llama.cpp's defaults with
   only its cap swept (`k` = --spec-ngram-*-size-m / --spec-ngram-mod-n-max, ngram-mod's
   n_min kept at most k), and draft-simple (a draft of the target's first quarter of
   layers, autotune's truncated GGUF) with only --spec-draft-n-max swept, measured on
   the search prompts; the best is "fixed n-max";
4. on the held-out prompts, interleaved per prompt against the server without
   speculation (every server at the same concurrency): the tuned config, the fixed
   n-max winner and llama.cpp's documented defaults of each type (ngram-mod's are
   `--spec-default`; draft-simple's n_max 3, n_min 0, p_min 0 on that draft).

Prints per workload, concurrency and arm the held-out speedup with its 90% bootstrap
interval over prompts, the server's own clock's speedup, acceptance, and the tuned
config paired against the fixed n-max winner (> 1: tuned faster).

Usage: python bench/llama_server.py [--workloads spec_bench,copy_edit]
       [--concurrency 1,4] [--search 16] [--held-out 16] [--trials 10]
       [--max-new-tokens 64] [--seed 0] [--csv FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from autotune.backends import open_backend
from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.measure import paired
from autotune.measure.measurement import measure_arms
from autotune.models.loading import load_model
from autotune.pipeline.plan import SearchRequest, plan_search
from autotune.pipeline.run import run_search
from autotune.workloads.prompts import Prompt, load_workload, round_robin, split_workload

TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
# llama.cpp's defaults (common/common.h L357-368; --spec-default for ngram-mod).
DEFAULTS = {"ngram-simple": dict(k=48, llama_ngram_size_n=12),
            "ngram-map-k": dict(k=48, llama_ngram_size_n=12),
            "ngram-map-k4v": dict(k=48, llama_ngram_size_n=12, llama_ngram_min_hits=1),
            "ngram-mod": dict(k=64, llama_ngram_mod_n_match=24, llama_ngram_mod_n_min=48),
            "ngram-cache": dict()}
CAPS = (4, 16, 64)
# draft-simple: llama.cpp's defaults (common/common.h L328-333) on the target's first
# quarter (the llama_draft preset's depth); its --spec-draft-n-max swept over DRAFT_CAPS.
DRAFT_SIMPLE = dict(k=3, llama_draft_n_min=0, llama_draft_p_min=0.0)
DRAFT_CAPS = (1, 3, 8)


def _config(spec_type: str, concurrency: int, **knobs) -> DecodeConfig:
    return DecodeConfig(method="llama_ngram", llama_spec_type=spec_type, exit_policy="fixed",
                        engine="llama_server", concurrency=concurrency, **knobs).validate()


def _draft_simple(depth: int, concurrency: int, **knobs) -> DecodeConfig:
    return DecodeConfig(method="llama_draft", exits=(depth,), exit_policy="fixed",
                        engine="llama_server", concurrency=concurrency,
                        **{**DRAFT_SIMPLE, **knobs}).validate()


def _label(config: DecodeConfig) -> str:
    if config.method == "none":
        return "no speculation"
    if config.method == "llama_draft":
        return (f"draft-simple first {config.exits[0]} layers k={config.k} "
                f"n_min={config.llama_draft_n_min} p_min={config.llama_draft_p_min:.2f}")
    # ngram-cache drafts a fixed 8 whatever k (llama_spec.py).
    knobs = [config.llama_spec_type,
             "k=8 (fixed)" if config.llama_spec_type == "ngram-cache" else f"k={config.k}"]
    if "ngram-mod" in config.llama_spec_type:
        knobs.append(f"match={config.llama_ngram_mod_n_match} "
                     f"min={config.llama_ngram_mod_n_min}")
    if any(t in config.llama_spec_type for t in ("ngram-simple", "ngram-map-k")):
        knobs.append(f"n={config.llama_ngram_size_n}")
    return " ".join(knobs)


def _fixed_caps(concurrency: int, depth: int) -> dict[str, DecodeConfig]:
    """Each type at its defaults with only its draft cap swept (ngram-cache has none)."""
    arms = {f"draft-simple k={cap}": _draft_simple(depth, concurrency, k=cap)
            for cap in DRAFT_CAPS}
    for spec_type in TYPES:
        base = DEFAULTS[spec_type]
        if spec_type == "ngram-cache":
            arms[spec_type] = _config(spec_type, concurrency)
            continue
        for cap in CAPS:
            knobs = {**base, "k": cap}
            if spec_type == "ngram-mod":
                knobs["llama_ngram_mod_n_min"] = min(base["llama_ngram_mod_n_min"], cap)
            arms[f"{spec_type} k={cap}"] = _config(spec_type, concurrency, **knobs)
    return arms


def _tuned(seen: list[Prompt], args, concurrency: int, folder: Path) -> DecodeConfig:
    """autotune's own search on every prompt but the held-out ones (`seen`: it searches
    on --search of them, holds out its own pool and serves the rest as companions at
    concurrency > 1): its answer (plain decoding when it recommends nothing)."""
    source = folder / "search.jsonl"
    source.write_text("".join(json.dumps({"question_id": p.prompt_id, "category": p.category,
                                          "prompt": p.text}) + "\n" for p in seen))
    out = folder / f"run-c{concurrency}"
    plan = plan_search(SearchRequest(
        workload=str(source), target="llama_server", concurrency=concurrency,
        trials=args.trials, prompts=args.search, max_new_tokens=args.max_new_tokens,
        validation_prompts=max(2, args.search // 2), validation_pool=max(2, args.search // 2),
        seed=args.seed, out=str(out)))
    run_search(plan)
    best = json.loads((out / "best.json").read_text())
    return config_from_mapping(best["params"]).validate()


def _row(workload: str, concurrency: int, name: str, config: DecodeConfig, measured) -> dict:
    pairs = [run.pair() for run in measured.runs]
    ci = paired.interval(pairs)
    summary = measured.summary()
    return {"workload": workload, "slots": concurrency, "arm": name, "config": _label(config),
            "speedup": paired.speedup(pairs), "ci90_low": ci[0] if ci else None,
            "ci90_high": ci[1] if ci else None,
            "server_clock_speedup": summary.get("engine_speedup"),
            "acceptance": summary.get("acceptance_rate"),
            "ms_per_token": summary.get("latency_ms_per_token"),
            "ar_ms_per_token": summary.get("baseline_latency_ms_per_token")}


def run_case(target, workload: str, concurrency: int, args) -> list[dict]:
    everything = load_workload(workload)
    prompts = round_robin(everything, args.search + args.held_out)
    fraction = args.held_out / (args.search + args.held_out)
    search, held_out = split_workload(prompts, fraction, args.seed)
    held_ids = {p.prompt_id for p in held_out}
    measured_ids = held_ids | {p.prompt_id for p in search}
    # Never timed: served beside the timed requests at concurrency > 1.
    companions = [p for p in everything if p.prompt_id not in measured_ids]
    print(f"{workload} x{concurrency}: {len(search)} search, {len(held_out)} held-out",
          file=sys.stderr, flush=True)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        tuned = _tuned([p for p in everything if p.prompt_id not in held_ids], args,
                       concurrency, Path(folder))
    print(f"{workload} x{concurrency}: autotune search in {time.perf_counter() - began:.0f} s: "
          f"{_label(tuned)}", file=sys.stderr, flush=True)
    backend = open_backend("llama_server", target, None, "default", search + held_out,
                           args.max_new_tokens, companions)
    began = time.perf_counter()
    depth = max(1, target.n_layers // 4)
    sweep = measure_arms(target, _fixed_caps(concurrency, depth), search, args.max_new_tokens,
                         seed=args.seed, backend=backend)
    best_name = max(sweep, key=lambda n: paired.speedup([r.pair() for r in sweep[n].runs])
                    or 0.0)
    fixed = sweep[best_name].config
    print(f"{workload} x{concurrency}: fixed-cap sweep ({len(sweep)} configs) in "
          f"{time.perf_counter() - began:.0f} s: best {best_name}", file=sys.stderr, flush=True)
    arms = {"fixed n-max best": fixed}
    if tuned.method != "none":
        arms["autotune tuned"] = tuned
    arms.update({f"default {t}": _config(t, concurrency, **DEFAULTS[t]) for t in TYPES})
    arms["default draft-simple"] = _draft_simple(depth, concurrency)
    began = time.perf_counter()
    measured = measure_arms(target, arms, held_out, args.max_new_tokens, seed=args.seed,
                            backend=backend)
    print(f"{workload} x{concurrency}: held-out {len(held_out)} prompts x {len(arms) + 1} "
          f"arms in {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    rows = [_row(workload, concurrency, name, config, measured[name])
            for name, config in arms.items()]
    if tuned.method == "none":
        rows.insert(0, {"workload": workload, "slots": concurrency, "arm": "autotune tuned",
                        "config": "no speculation (its answer)", "speedup": 1.0,
                        "ci90_low": 1.0, "ci90_high": 1.0})
    else:
        # Tuned against the fixed n-max winner, paired per prompt (> 1: tuned faster).
        head = [paired.PromptPair(t.prompt_id, t.category, f.candidate.decode_s,
                                  f.candidate.decoded, t.candidate.decode_s,
                                  t.candidate.decoded)
                for t, f in zip(measured["autotune tuned"].runs,
                                measured["fixed n-max best"].runs)]
        ci = paired.interval(head)
        rows.append({"workload": workload, "slots": concurrency,
                     "arm": "tuned vs fixed n-max (paired)", "config": "",
                     "speedup": paired.speedup(head), "ci90_low": ci[0] if ci else None,
                     "ci90_high": ci[1] if ci else None})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="spec_bench,copy_edit")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--search", type=int, default=16)
    ap.add_argument("--held-out", type=int, default=16)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    target = load_model("default")
    rows: list[dict] = []
    for workload in args.workloads.split(","):
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            more = run_case(target, workload.strip(), concurrency, args)
            rows += more
            with pd.option_context("display.width", 250, "display.max_columns", 30,
                                   "display.max_colwidth", 60):
                print(pd.DataFrame(more).to_string(index=False,
                                                   float_format=lambda v: f"{v:.3f}"))
                print(flush=True)
            if args.csv:
                pd.DataFrame(rows).to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
