"""The README's main job once per `--target`: what each engine's tuned answer is worth.

For each target engine this runs `autotune search --target ENGINE` (the README's main job
otherwise: default model, multi-fidelity, 32 new tokens, held-out validation) into
`OUT/ENGINE/`, then prints from its best.json and exports/:

- the winner and its validated speedup with the 90% interval (held-out prompts, paired
  against the AR baseline in the same run);
- the engine's documented default among the finalists (re-measured on the same held-out
  prompts in the same run), if the space holds one;
- whether the engine's own export of the winner was written exactly (no `--lossy`).

Figures come from prompts the search never measured. Run it alone on the machine: it
times decoding.

    python bench/engine_targets.py --out /tmp/targets [--targets vllm,hf] [--skip-search]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FORMAT = {"vllm": "vllm.json", "sglang": "sglang/sglang.yaml", "trtllm": "trtllm.yaml",
          "hf": "hf/generation_config.json"}


def _figure(entry: dict[str, Any] | None) -> str:
    if not entry or not isinstance(entry.get("speedup"), (int, float)):
        return "-"
    ci = entry.get("ci90")
    text = f"{entry['speedup']:.3f}x"
    if isinstance(ci, list) and len(ci) == 2:
        text += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    return text


def summarise(engine: str, run: Path) -> dict[str, str]:
    best = json.loads((run / "best.json").read_text())
    validation = best.get("validation") or {}
    finalists = validation.get("finalists") or []
    default = next((f for f in finalists if f.get("preset")), None)
    winner = next((f for f in finalists if f.get("trial") == validation.get("winner")), None)
    # "Do not speculate": the best searched finalist still says what was on offer.
    searched = [f for f in finalists if not f.get("preset")
                and isinstance(f.get("speedup"), (int, float))]
    best_searched = max(searched, key=lambda f: f["speedup"], default=None)
    exported = (run / "exports" / FORMAT[engine]).exists()
    readme = (run / "exports" / "README.txt").read_text().splitlines()
    line = next((x for x in readme if x.startswith(f"{engine}:")), "")
    return {
        "engine": engine,
        "decision": str(validation.get("decision")),
        "winner": (str(best.get("label") or best["params"].get("method")) if winner else
                   f"none (best searched: {best_searched['label']})" if best_searched
                   else "none"),
        "validated": _figure(winner) if winner else _figure(best_searched),
        "default": (f"{default['preset']} {_figure(default)}" if default else "none in space"),
        "export": ("exact" if exported and "--lossy" not in line
                   else "nothing to export" if not winner else line or "not written"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--targets", default="vllm,sglang,trtllm,hf")
    parser.add_argument("--skip-search", action="store_true",
                        help="only summarise runs already in --out")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    rows = []
    for engine in [t for t in args.targets.split(",") if t]:
        run = args.out / engine
        if not args.skip_search:
            start = time.perf_counter()
            code = subprocess.call(["autotune", "search", "--target", engine,
                                    "--max-new-tokens", str(args.max_new_tokens),
                                    "--out", str(run)])
            print(f"{engine}: search exit {code} in {time.perf_counter() - start:.0f} s",
                  file=sys.stderr, flush=True)
            if code != 0:
                continue
        rows.append(summarise(engine, run))
    keys = ["engine", "decision", "winner", "validated", "default", "export"]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(row[k] for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
