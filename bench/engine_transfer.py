"""Does a config tuned in our decoder transfer to the engine? Tuned in the engine instead?

For each engine (`hf`; llama-server has its own bench, bench/llama_server.py), on the
default model and Spec-Bench prompts split three ways by category (seeded): a search
part, and a bench part that no search sees.

1. decoder-tuned: `autotune search --target ENGINE --fidelity multi --validation 0` on
   the search part: every trial measured in autotune's decoder under the engine's
   rules; its answer is the search's best (nothing is validated in the engine).
2. engine-loop: `autotune search --target ENGINE --fidelity engine` on the search part:
   every trial measured in the engine itself, finalists validated there on the search
   part's held-out share; its answer (which may be "do not speculate").
3. Both answers, the engine's documented default speculative setting and the engine
   without speculation are then measured in the engine on the bench part, all arms
   interleaved per prompt, repeats pooled (`measure_arms(..., backend=)`), with the
   paired speedup and its 90% bootstrap interval.

Goals: the engine-loop answer is never below the engine without speculation
and at least the engine's default. Run it alone on the machine: it times decoding.

    python bench/engine_transfer.py --out /tmp/transfer [--engines hf]
        [--max-new-tokens 32] [--bench-prompts 16] [--repeats 2] [--skip-search]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _spec_bench import spec_bench

# Each engine this bench runs, with its documented default speculative setting (a preset).
DEFAULT_PRESET = {"hf": "hf_prompt_lookup"}


def split_files(out: Path, fraction: float, seed: int) -> tuple[Path, Path]:
    """(search part, bench part) of Spec-Bench as JSONL files in `out` (same format)."""
    from autotune.workloads.prompts import load_workload, split_workload
    workload = spec_bench()
    prompts = load_workload(str(workload))
    search, bench = split_workload(prompts, fraction, seed)
    rows = {str(json.loads(line)["question_id"]): line
            for line in workload.read_text().splitlines() if line.strip()}
    files = []
    for name, part in (("search.jsonl", search), ("bench.jsonl", bench)):
        path = out / name
        path.write_text("".join(rows[p.prompt_id] + "\n" for p in part))
        files.append(path)
    return files[0], files[1]


def search(engine: str, run: Path, workload: Path, max_new: int, extra: list[str]) -> None:
    if (run / "best.json").is_file():
        return                                       # done before (rerun to resume)
    start = time.perf_counter()
    command = ["autotune", "search", "--target", engine, "--workload", str(workload),
               "--max-new-tokens", str(max_new), "--out", str(run), *extra]
    code = subprocess.call(command)
    print(f"{engine}: {' '.join(command[1:])}: exit {code} in "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    if code != 0:
        raise SystemExit(f"search failed ({code}): {' '.join(command)}")


def answer(run: Path) -> tuple[str, dict[str, Any] | None]:
    """(label, params or None for "do not speculate") of a run's best.json."""
    from autotune.schema.label import describe
    best = json.loads((run / "best.json").read_text())
    params = best.get("params") or {}
    if params.get("method", "none") == "none":
        return "do not speculate", None
    return describe(params), params


def figure(summary: dict[str, Any]) -> str:
    ci = summary.get("speedup_ci90")
    band = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    return f"{summary['speedup']:.3f}x{band}"


def bench_engine(engine: str, out: Path, search_file: Path, bench_file: Path,
                 args: argparse.Namespace) -> list[dict[str, str]]:
    from autotune.backends import open_backend
    from autotune.schema.config import config_from_mapping
    from autotune.schema.methods import all_methods
    from autotune.measure.measurement import measure_arms
    from autotune.models.loading import load_model
    from autotune.workloads.prompts import load_workload, round_robin

    common = ["--prompts", str(args.prompts)]
    if not args.skip_search:
        search(engine, out / f"{engine}-decoder", search_file, args.max_new_tokens,
               [*common, "--fidelity", "multi", "--validation", "0"])
        search(engine, out / f"{engine}-engine", search_file, args.max_new_tokens,
               [*common, "--fidelity", "engine", "--trials", str(args.engine_trials),
                "--validation-prompts", "8"])
    arms: dict[str, tuple[str, dict[str, Any] | None]] = {
        "decoder-tuned": answer(out / f"{engine}-decoder"),
        "engine-loop": answer(out / f"{engine}-engine")}
    preset = next(p for spec in all_methods() for p in spec.presets(30)
                  if p.name == DEFAULT_PRESET[engine])
    arms["engine default"] = (f"{preset.name}", {**preset.values, "engine": engine})

    target = load_model("default")
    prompts = round_robin(load_workload(str(bench_file)), args.bench_prompts)
    backend = open_backend(engine, target, None, "default", prompts, args.max_new_tokens)
    configs = {name: config_from_mapping(params).validate()
               for name, (_, params) in arms.items() if params is not None}
    start = time.perf_counter()
    measured = measure_arms(target, configs, prompts, args.max_new_tokens,
                            repeats=args.repeats, backend=backend)
    print(f"{engine}: bench measured in {time.perf_counter() - start:.0f} s",
          file=sys.stderr, flush=True)
    rows = []
    baseline_ms = None
    for name, (label, params) in arms.items():
        if params is None:
            rows.append({"engine": engine, "arm": name, "config": label,
                         "speedup": "1 (the engine without speculation)", "tau": "-",
                         "lossless": "-"})
            continue
        summary = measured[name].summary()
        baseline_ms = summary["baseline_latency_ms_per_token"]
        rows.append({"engine": engine, "arm": name, "config": label,
                     "speedup": figure(summary),
                     "tau": f"{summary['mean_accepted_tokens']:.2f}",
                     "lossless": (f"{summary['lossless']} ({len(summary['mismatched_prompts'])}"
                                  f"/{summary['prompts']} differ)")})
    rows.append({"engine": engine, "arm": "no speculation", "config": "AR",
                 "speedup": f"1 ({baseline_ms:.2f} ms/token)" if baseline_ms else "1",
                 "tau": "1", "lossless": "-"})
    backend.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--engines", default="hf", help=", ".join(DEFAULT_PRESET))
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=12,
                        help="search prompts per trial")
    parser.add_argument("--engine-trials", type=int, default=12)
    parser.add_argument("--bench-prompts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--bench-fraction", type=float, default=0.3,
                        help="share of Spec-Bench (by category) kept for the bench part")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-search", action="store_true",
                        help="reuse the runs already in --out")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    unknown = [e for e in engines if e not in DEFAULT_PRESET]
    if unknown:
        parser.error(f"--engines: {', '.join(unknown)} not benched here; engines: "
                     f"{', '.join(DEFAULT_PRESET)}")
    args.out.mkdir(parents=True, exist_ok=True)
    search_file, bench_file = split_files(args.out, args.bench_fraction, args.seed)
    rows = []
    for engine in engines:
        rows += bench_engine(engine, args.out, search_file, bench_file, args)
    keys = ["engine", "arm", "config", "speedup", "tau", "lossless"]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(row[k] for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
