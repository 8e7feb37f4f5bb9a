"""vLLM on this CPU: autotune's answer for vLLM and vLLM's own n-gram choices, predicted
(autotune's replay and decoder under vLLM's V1 rules) beside measured in vLLM itself.

One timing job, nothing else on the machine:

1. a seeded split of Spec-Bench into search and held-out prompts (stratified by
   category); nothing the search sees is timed below;
2. autotune's answer: `autotune search --target vllm` on the search prompts (its screen
   replays under the `vllm_v1` rules, its finalists race in vLLM itself), unless
   `--answer best.json` gives one; plain decoding when it says not to speculate;
3. on the held-out prompts, in vLLM (its CPU build, compiled unless --eager), every arm
   interleaved per prompt against vLLM without speculation: vLLM's documented n-gram
   example (K 5, n 5..5), K 9 n 2..2, K 3 n 2..2, K 7 n 4..5 and autotune's answer
   (issue 60: the answer is to reach 0.97 of the best of the others);
4. the same arms predicted: the replay tier (the search's screen) and autotune's decoder
   (measured, interleaved against its own AR) under `vllm_v1`.

Prints per arm: vLLM's speedup with its 90% bootstrap interval over prompts, its τ and
accepted/drafted tokens; beside them the replay's and the decoder's speedup and τ.

Usage: python bench/vllm_in_engine.py [--search 24] [--held-out 24]
       [--max-new-tokens 64] [--time-budget 15m] [--answer best.json] [--eager]
       [--seed 0] [--csv FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from autotune.backends import open_backend
from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.schema.engines import rules_for
from autotune.measure import paired
from autotune.measure.measurement import measure_arms
from autotune.models.loading import load_model
from autotune.pipeline.plan import SearchRequest, plan_search
from autotune.pipeline.run import run_search
from autotune.replay.run import Replayer
from autotune.workloads.prompts import Prompt, load_workload, round_robin, split_workload

V1 = rules_for("vllm", "cpu")
# vLLM's documented example and the configs issue 60 holds autotune's answer against
# (each measured in vLLM beside it, in the same run).
ARMS = {"vLLM example K5 n5..5": DecodeConfig(method="ngram", k=5, ngram_min=5, ngram_max=5),
        "K9 n2..2": DecodeConfig(method="ngram", k=9, ngram_min=2, ngram_max=2),
        "K3 n2..2": DecodeConfig(method="ngram", k=3, ngram_min=2, ngram_max=2),
        "K7 n4..5": DecodeConfig(method="ngram", k=7, ngram_min=4, ngram_max=5)}


def _log(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def _answer(seen: list[Prompt], args: argparse.Namespace, folder: Path
            ) -> tuple[DecodeConfig, dict]:
    """autotune's vLLM answer from a search on `seen` (or --answer's best.json), and
    best.json's `validation` (the race's figures, their interval, where it ran)."""
    if args.answer:
        doc = json.loads(Path(args.answer).read_text())
    else:
        source = folder / "search.jsonl"
        source.write_text("".join(json.dumps({"question_id": p.prompt_id,
                                              "category": p.category, "prompt": p.text})
                                  + "\n" for p in seen))
        out = folder / "run"
        plan = plan_search(SearchRequest(
            workload=str(source), target="vllm",
            max_new_tokens=args.max_new_tokens, seed=args.seed, out=str(out),
            time_budget=args.time_budget))
        run_search(plan)
        doc = json.loads((out / "best.json").read_text())
        if args.keep:
            Path(args.keep).write_text(json.dumps(doc, indent=2) + "\n")
    config = config_from_mapping(doc["params"]).validate()
    _log(f"autotune's answer: {doc.get('provenance', {}).get('label') or config.method}; "
         f"decision {(doc.get('validation') or {}).get('decision')}")
    return config, dict(doc.get("validation") or {})


def _figures(measured) -> tuple[float | None, tuple[float, float] | None, float | None]:
    pairs = [run.pair() for run in measured.runs]
    return paired.speedup(pairs), paired.interval(pairs), paired.tau(pairs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--search", type=int, default=24)
    parser.add_argument("--held-out", type=int, default=24)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--time-budget", default="15m")
    parser.add_argument("--answer", help="a best.json for vLLM instead of a search")
    parser.add_argument("--eager", action="store_true", help="vLLM without torch.compile")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv")
    parser.add_argument("--keep", help="write the search's best.json here")
    args = parser.parse_args(argv)

    target = load_model("default", device="cpu", dtype="float32")
    prompts = round_robin(load_workload("spec_bench"), args.search + args.held_out)
    seen, held_out = split_workload(prompts, args.held_out / len(prompts), args.seed)
    _log(f"{len(seen)} search prompts, {len(held_out)} held-out")
    arms = dict(ARMS)
    with tempfile.TemporaryDirectory() as folder:
        began = time.perf_counter()
        answer, validation = _answer(seen, args, Path(folder))
        _log(f"answer in {time.perf_counter() - began:.0f} s")
        if answer.method != "none":
            arms["autotune's answer"] = answer
        ours = {name: dataclasses.replace(config, engine=V1) for name, config in arms.items()}

        backend = open_backend("vllm", target, None, "default", held_out, args.max_new_tokens)
        backend.eager = args.eager
        began = time.perf_counter()
        in_vllm = measure_arms(target, arms, held_out, args.max_new_tokens, seed=args.seed,
                               backend=backend)
        _log(f"in vLLM ({backend.label}) in {time.perf_counter() - began:.0f} s")
        began = time.perf_counter()
        decoded = measure_arms(target, ours, held_out, args.max_new_tokens, seed=args.seed)
        _log(f"in autotune's decoder in {time.perf_counter() - began:.0f} s")
        replayer = Replayer(target, None, held_out, args.max_new_tokens,
                            Path(folder) / "parts.json")
        replayed = {name: replayer.replay(config) for name, config in ours.items()}

    rows = []
    for name, config in arms.items():
        speedup, ci, tau = _figures(in_vllm[name])
        summary = in_vllm[name].summary()
        d_speedup, d_ci, d_tau = _figures(decoded[name])
        r_speedup, _, r_tau = _figures(replayed[name])
        rows.append({
            "arm": name, "config": f"k={config.k} n={config.ngram_min}..{config.ngram_max}",
            "vllm_speedup": speedup, "vllm_ci90": ci, "vllm_tau": tau,
            "vllm_accepted": summary.get("accepted_tokens"),
            "vllm_drafted": summary.get("drafted_tokens"),
            "vllm_ar_ms": summary.get("baseline_latency_ms_per_token"),
            "decoder_speedup": d_speedup, "decoder_ci90": d_ci, "decoder_tau": d_tau,
            "decoder_ar_ms": decoded[name].summary().get("baseline_latency_ms_per_token"),
            "replay_speedup": r_speedup, "replay_tau": r_tau})

    def fmt(value: float | None, spec: str = ".3f") -> str:
        return "-" if value is None else format(value, spec)

    def interval(ci) -> str:
        return "-" if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]"

    print(f"vLLM ({backend.label}) on {len(held_out)} held-out Spec-Bench prompts, "
          f"{args.max_new_tokens} new tokens, greedy, float32")
    print(f"{'arm':24} {'config':14} {'in vLLM [90%]':28} {'tau':>6} {'acc/drafted':>12} "
          f"{'decoder [90%]':28} {'tau':>6} {'replay':>7} {'tau':>6}")
    for row in rows:
        print(f"{row['arm']:24} {row['config']:14} "
              f"{fmt(row['vllm_speedup'])}x {interval(row['vllm_ci90']):18} "
              f"{fmt(row['vllm_tau']):>6} {row['vllm_accepted']}/{row['vllm_drafted']:<6} "
              f"{fmt(row['decoder_speedup'])}x {interval(row['decoder_ci90']):18} "
              f"{fmt(row['decoder_tau']):>6} {fmt(row['replay_speedup'])}x "
              f"{fmt(row['replay_tau']):>6}")
    print(f"AR: vLLM {fmt(rows[0]['vllm_ar_ms'], '.1f')} ms/token, autotune's decoder "
          f"{fmt(rows[0]['decoder_ar_ms'], '.1f')} ms/token")
    _check_interval(validation, rows)
    _against_the_others(rows)
    if args.csv:
        Path(args.csv).write_text(json.dumps(rows, indent=2, default=list) + "\n")
    return 0


def _against_the_others(rows: list[dict]) -> None:
    """Issue 60's done-when: autotune's answer measured in vLLM against the best of the
    fixed configs measured beside it (plain decoding, 1.0, where it answered none)."""
    others = [row for row in rows if row["arm"] != "autotune's answer"]
    best = max(others, key=lambda row: row["vllm_speedup"] or 0.0)
    mine = next((row["vllm_speedup"] for row in rows if row["arm"] == "autotune's answer"),
                1.0)
    if mine is None or not best["vllm_speedup"]:
        return
    ratio = mine / best["vllm_speedup"]
    print(f"autotune's answer in vLLM {mine:.3f}x against the best fixed config's "
          f"{best['vllm_speedup']:.3f}x ({best['arm']}): {ratio:.3f} of it "
          f"({'at least' if ratio >= 0.97 else 'below'} 0.97)")


def _check_interval(validation: dict, rows: list[dict]) -> None:
    """The done-when of issue 50: the answer's speedup measured again in vLLM on prompts
    no search used lies within the interval its search's race gave it."""
    ci = validation.get("ci90")
    if validation.get("decision") != "speculate" or not ci:
        print(f"search's answer: {validation.get('decision')} (no interval to check "
              "against)")
        return
    again = next(r for r in rows if r["arm"] == "autotune's answer")["vllm_speedup"]
    inside = ci[0] <= again <= ci[1]
    print(f"search's answer, raced in {validation.get('measured_by_label') or '?'}: "
          f"{validation.get('speedup'):.3f}x [{ci[0]:.3f}, {ci[1]:.3f}] on "
          f"{validation.get('prompts')} held-out prompts; measured again in vLLM on "
          f"these prompts: {again:.3f}x, {'within' if inside else 'OUTSIDE'} its interval")


if __name__ == "__main__":
    sys.exit(main())
