"""Selection bias: does a search's validated speedup hold when measured afresh?

Per seed:
1. Split the Spec-Bench prompts (`--workload`) into three disjoint JSONL files of the
   same format: search, validation and fresh (seen by neither). The split is seeded and
   stratified by category: each category's prompts are shuffled, the categories are
   put in one seeded order, and each part takes prompts round-robin over that order, so
   the three parts draw on the same categories (the search's, being smallest, are a
   subset of the others') and never share a prompt.
2. Run the real CLI, `python -m autotune.cli.main search --workload SEARCH --validation VALID
   ...`, and read the run's best.json: the chosen config, the search's own figure for
   it (`metrics.speedup`) and the validated one (`validation.speedup`, `ci90`).
3. Re-measure in this process with the product's own `measure_arms`: the chosen config
   and vLLM's default n-gram (the `vllm_ngram` preset of the method registry) as two
   arms against one interleaved AR baseline, repeats pooled, (a) on the validation
   prompts again and (b) on the fresh prompts. The figure and its 90% interval are
   `autotune.measure.paired`'s (`Measurement.summary()`). A "do not speculate" answer is the AR
   baseline: its speedup is 1.0 by definition, so only vLLM's default is measured.

Goals (printed as PASS/FAIL lines with the numbers):
- no winner's curse left: |validated / fresh - 1| <= 5% on the validation prompts, for
  the chosen config (vacuous for "do not speculate": AR is 1.0 both ways) and for vLLM's
  default, a finalist of every joint-space search (its figure in best.json's evidence);
- the chosen config is never below vLLM's default by more than the chosen's interval
  half-width (fresh, validation prompts). For "do not speculate", which has no interval,
  it holds when vLLM's default is not shown faster than the AR baseline (its interval's
  lower end <= 1.0).

Cost: about 15 minutes a seed at the defaults on 2 CPU cores shared with other work
(`--threads 1`; most of it the search's slow layer-skip trials and the validation).

Usage: python bench/selection_bias.py [--seeds 0,1,2] [--search-prompts 4]
       [--validation-prompts 10] [--fresh-prompts 10] [--trials 10]
       [--max-new-tokens 32] [--validation-repeats 2] [--threads N] [--csv FILE]
       [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from _spec_bench import spec_bench

from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.schema.methods import get_method
from autotune.frozen.checks import load_frozen, read_parts
from autotune.measure.measurement import measure_arms
from autotune.models.loading import LoadedModel, load_model
from autotune.workloads.prompts import load_workload

REPO = Path(__file__).resolve().parent.parent
VLLM_PRESET = ("ngram", "vllm_ngram")       # (method, preset name) in the registry
TOLERANCE = 0.05                            # |validated / fresh - 1| goal
PARTS = ("search", "validation", "fresh")


def three_way_split(rows: list[dict[str, Any]], sizes: tuple[int, int, int],
                    seed: int) -> tuple[list[dict[str, Any]], ...]:
    """Disjoint (search, validation, fresh) parts of `rows` (JSONL objects with a
    `category`), seeded and stratified by category: one seeded category order, and each
    part takes its prompts round-robin over it from the categories' shuffled queues."""
    rng = random.Random(seed)
    queues: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        queues.setdefault(str(row.get("category", "default")), []).append(row)
    for members in queues.values():
        rng.shuffle(members)
    order = sorted(queues)
    rng.shuffle(order)
    parts = []
    for size in sizes:
        part: list[dict[str, Any]] = []
        while len(part) < size and any(queues[c] for c in order):
            for category in order:
                if queues[category] and len(part) < size:
                    part.append(queues[category].pop())
        if len(part) < size:
            raise SystemExit(f"the workload has too few prompts for parts of {sizes}")
        parts.append(part)
    return tuple(parts)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def run_search(args: argparse.Namespace, seed: int, files: dict[str, Path],
               run_dir: Path) -> dict[str, Any]:
    """The CLI's search on the search file, validated on the validation file; best.json.
    Its output goes to stderr, so stdout holds only this bench's figures."""
    command = [sys.executable, "-m", "autotune.cli.main", "search",
               "--workload", str(files["search"]), "--validation", str(files["validation"]),
               "--prompts", str(args.search_prompts),
               "--validation-prompts", str(args.validation_prompts),
               "--validation-repeats", str(args.validation_repeats),
               "--trials", str(args.trials), "--max-new-tokens", str(args.max_new_tokens),
               "--device", args.device, "--seed", str(seed), "--out", str(run_dir)]
    env = dict(os.environ)
    if args.threads is not None:            # torch's intra-op pool follows OMP_NUM_THREADS
        env["OMP_NUM_THREADS"] = str(args.threads)
    print("$ " + " ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True, cwd=REPO, stdout=sys.stderr, env=env)
    return load_frozen(run_dir / "best.json")


def vllm_default(target: LoadedModel, like: DecodeConfig) -> DecodeConfig:
    """vLLM's default n-gram from the method registry, sampling as `like` does (one
    baseline pairs arms that sample alike)."""
    method, name = VLLM_PRESET
    preset = next(p for p in get_method(method).presets(target.n_layers) if p.name == name)
    return config_from_mapping({**preset.values, "temperature": like.temperature,
                                "top_p": like.top_p}).validate(target.n_layers)


@dataclass(frozen=True)
class Figure:
    """A paired speedup and its 90% interval (None: no interval, e.g. the AR baseline)."""

    speedup: float
    ci90: tuple[float, float] | None

    @staticmethod
    def of(summary: dict[str, Any]) -> "Figure":
        ci = summary.get("speedup_ci90")
        return Figure(summary["speedup"], (ci[0], ci[1]) if ci else None)

    def half_width(self) -> float:
        return (self.ci90[1] - self.ci90[0]) / 2 if self.ci90 else 0.0

    def text(self) -> str:
        band = f" [{self.ci90[0]:.3f}, {self.ci90[1]:.3f}]" if self.ci90 else ""
        return f"{self.speedup:.3f}{band}"


AR = Figure(1.0, None)


def remeasure(target: LoadedModel, chosen: DecodeConfig | None, path: Path,
              args: argparse.Namespace, seed: int) -> tuple[Figure, Figure, float]:
    """(chosen, vLLM default, the AR baseline's ms/token) on the prompts of `path`,
    against one interleaved AR baseline; the chosen is AR itself (1.0) when it is None
    ("do not speculate")."""
    prompts = load_workload(str(path))
    vllm = vllm_default(target, chosen or DecodeConfig())
    arms = {"vllm_default": vllm, **({"chosen": chosen} if chosen is not None else {})}
    measured = measure_arms(target, arms, prompts, args.max_new_tokens,
                            repeats=args.validation_repeats, seed=seed)
    summaries = {name: m.summary() for name, m in measured.items()}
    for name, summary in summaries.items():
        if summary["lossless"] is False:
            print(f"warning: {name} not lossless on {summary['mismatched_prompts']}",
                  file=sys.stderr)
    chosen_figure = Figure.of(summaries["chosen"]) if chosen is not None else AR
    return (chosen_figure, Figure.of(summaries["vllm_default"]),
            summaries["vllm_default"]["baseline_latency_ms_per_token"])


def one_seed(args: argparse.Namespace, seed: int, rows: list[dict[str, Any]], work: Path,
             target: LoadedModel | None) -> tuple[dict[str, Any], LoadedModel]:
    began = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix=f"seed{seed}-", dir=work))
    parts = three_way_split(rows, (args.search_prompts, args.validation_prompts,
                                   args.fresh_prompts), seed)
    files = {name: folder / f"{name}.jsonl" for name in PARTS}
    for name, part in zip(PARTS, parts):
        write_jsonl(files[name], part)
    doc = run_search(args, seed, files, folder / "run")
    searched = time.monotonic()
    validation = doc.get("validation")
    if not isinstance(validation, dict):
        raise SystemExit(f"{folder / 'run' / 'best.json'} has no validation record")
    speculate = validation["decision"] == "speculate"

    if target is None:
        # Loaded once, after the first search (one copy in memory during it), and not
        # counted in the seed's time: the product's job loads its model in the CLI.
        target = load_model("default", args.device, None, False)
        loaded = time.monotonic()
        began, searched = began + (loaded - searched), loaded
    chosen = read_parts(doc).config if speculate else None
    again, vllm_again, ar_again = remeasure(target, chosen, files["validation"], args, seed)
    unseen, vllm_unseen, ar_unseen = remeasure(target, chosen, files["fresh"], args, seed)
    validated = (Figure(validation["speedup"], tuple(validation["ci90"])
                        if validation.get("ci90") else None))
    finalists = validation.get("finalists", [])
    # The search's own #1 and what validation made of it: the winner's curse, in one cell.
    top = next((f for f in finalists if f.get("role") == "search #1"), None)
    # vLLM's default is a finalist in the joint space (a queued preset): its recorded
    # figure against the fresh one checks the validation even when the answer is AR.
    recorded_vllm = next((f for f in finalists if f.get("preset") == VLLM_PRESET[1]), None)
    row = {
        "seed": seed,
        "chosen": (doc["provenance"].get("label") or "?") if speculate else "baseline (AR)",
        "decision": validation["decision"],
        "search": doc.get("metrics", {}).get("speedup"),
        "search_top": top["label"] if top else None,
        "search_top_search": top["search"].get("speedup") if top else None,
        "search_top_validated": top.get("speedup") if top else None,
        "validated": validated, "fresh_validation": again,
        "ratio": validated.speedup / again.speedup,
        "vllm_validated": (Figure(recorded_vllm["speedup"], tuple(recorded_vllm["ci90"])
                                  if recorded_vllm.get("ci90") else None)
                           if recorded_vllm else None),
        "vllm_validation": vllm_again, "fresh_unseen": unseen, "vllm_unseen": vllm_unseen,
        "ar_ms_validation": ar_again, "ar_ms_unseen": ar_unseen,
        "ar_ms_cli": validation.get("baseline_latency_ms_per_token"),
        "search_s": searched - began, "remeasure_s": time.monotonic() - searched,
        "total_s": time.monotonic() - began, "folder": str(folder),
    }
    print(f"seed {seed} done in {row['total_s']:.0f} s ({folder})", file=sys.stderr, flush=True)
    return row, target


def printed_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    def text(value: Any) -> str:
        return value.text() if isinstance(value, Figure) else (
            f"{value:.3f}" if isinstance(value, float) else "-" if value is None else str(value))

    def top(r: dict[str, Any]) -> str:
        if r["search_top"] is None:
            return "-"
        return (f"{r['search_top']}: {r['search_top_search']:.3f} -> "
                f"{r['search_top_validated']:.3f}")

    columns = {"seed": "seed", "search_top": "search #1: search -> validated",
               "chosen": "chosen", "decision": "decision",
               "search": "search", "validated": "validated [90%]",
               "fresh_validation": "fresh, validation prompts", "ratio": "valid./fresh",
               "vllm_validated": "vLLM default validated",
               "vllm_validation": "vLLM default, validation prompts",
               "fresh_unseen": "fresh, unseen prompts", "vllm_unseen": "vLLM default, unseen"}
    return pd.DataFrame([{title: top(r) if key == "search_top" else text(r[key])
                          for key, title in columns.items()} for r in rows])


def csv_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    out = []
    for r in rows:
        flat: dict[str, Any] = {}
        for key, value in r.items():
            if isinstance(value, Figure):
                flat[key] = value.speedup
                flat[f"{key}_lo"] = value.ci90[0] if value.ci90 else None
                flat[f"{key}_hi"] = value.ci90[1] if value.ci90 else None
            else:
                flat[key] = value
        out.append(flat)
    return pd.DataFrame(out)


def goal_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in rows:
        gap = abs(r["ratio"] - 1)
        lines.append(f"{'PASS' if gap <= TOLERANCE else 'FAIL'} seed {r['seed']}: validated "
                     f"{r['validated'].speedup:.3f} vs fresh {r['fresh_validation'].speedup:.3f}"
                     f" on the validation prompts: |ratio - 1| = {gap:.1%} (goal <= "
                     f"{TOLERANCE:.0%})")
    for r in rows:
        recorded, fresh = r["vllm_validated"], r["vllm_validation"]
        if recorded is None:
            lines.append(f"n/a  seed {r['seed']}: vLLM's default was not a finalist")
            continue
        gap = abs(recorded.speedup / fresh.speedup - 1)
        lines.append(f"{'PASS' if gap <= TOLERANCE else 'FAIL'} seed {r['seed']}: vLLM default "
                     f"validated {recorded.speedup:.3f} vs fresh {fresh.speedup:.3f} on the "
                     f"validation prompts: |ratio - 1| = {gap:.1%} (goal <= {TOLERANCE:.0%})")
    for r in rows:
        chosen, vllm = r["fresh_validation"], r["vllm_validation"]
        if chosen.ci90 is None:         # do not speculate: the AR baseline, no interval
            ok = vllm.ci90 is None or vllm.ci90[0] <= 1.0
            lines.append(f"{'PASS' if ok else 'FAIL'} seed {r['seed']}: chosen = AR baseline "
                         f"1.000; vLLM default {vllm.text()} on the validation prompts "
                         f"({'not ' if ok else ''}shown faster than AR)")
            continue
        floor = vllm.speedup - chosen.half_width()
        lines.append(f"{'PASS' if chosen.speedup >= floor else 'FAIL'} seed {r['seed']}: "
                     f"chosen {chosen.speedup:.3f} >= vLLM default {vllm.speedup:.3f} - "
                     f"half-width {chosen.half_width():.3f} = {floor:.3f} (validation prompts)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default=None,
                        help="Spec-Bench question.jsonl (default: $AUTOTUNE_SPEC_BENCH)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated split/search seeds")
    parser.add_argument("--search-prompts", type=int, default=4)
    parser.add_argument("--validation-prompts", type=int, default=10)
    parser.add_argument("--fresh-prompts", type=int, default=10)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--validation-repeats", type=int, default=2,
                        help="repeats of the CLI's validation and of the fresh re-measures")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch threads of the CLI and of the re-measures (default: "
                             "torch's); 1 keeps a machine shared with other work from "
                             "stalling a 2-thread pool on every operation")
    parser.add_argument("--csv", default=None, metavar="FILE", help="write the table as CSV")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "selection_bias"),
                        metavar="DIR", help="where each seed's prompt files and run go")
    args = parser.parse_args()
    args.workload = str(spec_bench(args.workload))
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    with open(args.workload, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    results, target = [], None
    for seed in seeds:
        row, target = one_seed(args, seed, rows, work, target)
        results.append(row)

    print(f"selection bias: {Path(args.workload).name}, parts search {args.search_prompts} / "
          f"validation {args.validation_prompts} / fresh {args.fresh_prompts} prompts, "
          f"{args.trials} trials, {args.max_new_tokens} new tokens, "
          f"{args.validation_repeats} repeats, torch threads {torch.get_num_threads()}; "
          "speedup = AR / candidate decode time per token, [90% bootstrap interval over "
          "prompts]")
    print(printed_table(results).to_string(index=False))
    print()
    for line in goal_lines(results):
        print(line)
    print()
    for r in results:
        print(f"seed {r['seed']}: {r['total_s']:.0f} s total (search CLI incl. model load and "
              f"validation {r['search_s']:.0f} s, fresh re-measures {r['remeasure_s']:.0f} s); "
              f"AR ms/token: CLI validation {r['ar_ms_cli'] or float('nan'):.1f}, re-measures "
              f"{r['ar_ms_validation']:.1f} (validation) / {r['ar_ms_unseen']:.1f} (unseen); "
              f"{r['folder']}")
    if args.csv:
        csv_table(results).to_csv(args.csv, index=False)
        print(f"table written to {args.csv}")


if __name__ == "__main__":
    main()
