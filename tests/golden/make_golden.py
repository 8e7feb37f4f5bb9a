"""Make the golden fixtures (`tests/golden/<case>/run/`) and their expected outputs
(`tests/golden/<case>/expected/`).

    python tests/golden/make_golden.py --expected-only     # re-render expected/ only
    python tests/golden/make_golden.py                     # new searches, then expected/

`tests/test_golden_outputs.py` re-renders every file a run writes (best.json, trials.csv,
the engines' exports, `autotune export`, the summary, the report's data) from each
fixture with the current code and asserts they equal `expected/` byte for byte. That is
how a refactor of the records between the study and best.json (issue 54) proves it
changed no output.

When to regenerate: ONLY when an output change is intended (a new field, a reworded
line), never to make a failing golden test pass. Regenerate with the code whose outputs
are the new reference, look at `git diff tests/golden/` (every change should be the one
intended), and say in the commit what changed. `--expected-only` keeps the committed
fixtures and re-renders `expected/` from them: the usual case. A full run makes new
studies (their figures are timings on this machine, so every number changes) and is
needed only when a fixture must hold something new; `--case` limits it to one case.

The searches (about 30 s each on 2 cores), on the suite's tiny random-weight Llama
(tests/tiny.py, 4 layers), the n-gram space, `--target all` (the default), 3 measured
trials, a screen of 16, held-out validation with the finalists raced, the engines that
run here raced in themselves (HF; vLLM is left out as in the suite, llama-server needs a
GGUF) and K tuned per batch size 1,2:

- `all-engines`: seed 5 scaled x4 (peaked, repetitive continuations) on prompts the
  n-gram drafters match (as tests/test_all_engines.py): every answer speculates.
- `no-gain`: seed 3 unscaled with a 2048-word vocabulary (near-uniform, so no
  continuation repeats) on prompts of distinct tokens: no drafter finds a match, and the
  answers are not to speculate.

Each runs in the fixed scratch folder `/tmp/autotune-golden/<case>/` (the paths that
run.json and the study record stay the same from one regeneration to the next); only the
files rendering reads are kept (`render.FIXTURE_FILES`, the journal gzipped; no weights),
the model is deleted before anything is rendered, `expected/` is rendered twice from the
committed fixture, and the script fails if the two renders differ.
"""

from __future__ import annotations

import argparse
import filecmp
import gzip
import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))        # tiny.py, and golden.render as the test imports it

# As tests/conftest.py sets them for the suite's searches, before autotune is imported:
# vLLM takes minutes to start and does not run the tiny model; HF is raced in itself
# (the conftest leaves that out, test_all_engines.py puts it back, as here).
os.environ["AUTOTUNE_VLLM_PYTHON"] = "/nonexistent/vllm-is-left-out-of-the-golden-run"
os.environ["AUTOTUNE_ENGINE_RACES"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

from golden.render import (  # noqa: E402  (after the environment above)
    CASES,
    FIXTURE_FILES,
    JOURNAL_GZ,
    expected_outputs,
    fixture_run,
    output_files,
    render_outputs,
)

SCRATCH = Path("/tmp/autotune-golden")
# no-gain's vocabulary: with 64 words a 16-token continuation repeats a token by chance,
# and a one-token n-gram match is enough for a draft to be accepted.
NO_GAIN_VOCAB = 2048


def _prompts(case: str) -> list[dict[str, Any]]:
    """The case's workload. The tiny tokenizer knows the words t0..t63."""
    if case == "all-engines":
        # Repetitive (as tests/test_all_engines.py): every engine's n-gram drafter matches.
        lines = [{"category": "rep", "prompt": f"a{i} b{i} c{i} d{i} a{i} b{i} c{i} d{i} "
                                               f"a{i} b{i}"} for i in range(8)]
        return lines + [{"category": "mix", "prompt": f"x{i} y{i} z{i} x{i} y{i} z{i} x{i} "
                                                      f"y{i}"} for i in range(8)]
    # Distinct tokens of a large vocabulary in a fixed random order: nothing for an
    # n-gram drafter to match, in the prompt or in the near-uniform continuation.
    draw = random.Random(0)
    return [{"category": ("a", "b")[i % 2],
             "prompt": " ".join(f"t{t}" for t in draw.sample(range(1, NO_GAIN_VOCAB), 10))}
            for i in range(16)]


def search(case: str) -> Path:
    """Run `case`'s search in SCRATCH/case; return its run folder."""
    import torch
    from tiny import llama_model, save_tiny

    from autotune.cli.main import main

    torch.set_num_threads(1)
    root = SCRATCH / case
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    os.environ["AUTOTUNE_CACHE"] = str(root / "cache")     # no reference from elsewhere
    hf = (llama_model(seed=5, layers=4, scale=4.0) if case == "all-engines"
          else llama_model(seed=3, layers=4, vocab=NO_GAIN_VOCAB, scale=1.0))
    model = save_tiny(hf, root / "model")
    workload = root / "prompts.jsonl"
    workload.write_text("".join(json.dumps(x) + "\n" for x in _prompts(case)))
    run = root / "run"
    code = main(["search", "--model", str(model), "--workload", str(workload),
                 "--space", "ngram", "--trials", "3", "--screen", "16",
                 "--max-new-tokens", "16", "--prompts", "4", "--validation", "0.5",
                 "--validation-prompts", "4", "--validation-pool", "6",
                 "--finalists", "1", "--batch-sizes", "1,2", "--schedule-k", "1,2",
                 "--out", str(run), "--study", f"golden-{case}", "--no-prune"])
    if code != 0:
        raise SystemExit(f"{case}: the golden search failed (exit code {code})")
    # Rendering must need no weights: the model goes before anything is rendered.
    shutil.rmtree(model)
    return run


def keep_fixture(case: str, run: Path) -> None:
    """Copy what rendering reads from `run` into tests/golden/<case>/run/."""
    from autotune.search.storage import JOURNAL_NAME

    fixture = fixture_run(case)
    shutil.rmtree(fixture, ignore_errors=True)
    fixture.mkdir(parents=True)
    for name in FIXTURE_FILES:
        if (run / name).is_file():
            shutil.copyfile(run / name, fixture / name)
    # mtime=0: the same journal gives the same bytes (no time in the gzip header).
    (fixture / JOURNAL_GZ).write_bytes(
        gzip.compress((run / JOURNAL_NAME).read_bytes(), compresslevel=9, mtime=0))


def render_expected(case: str) -> None:
    """Render expected/ from the committed fixture, twice, and insist both agree."""
    work = SCRATCH / case / "render"
    shutil.rmtree(work, ignore_errors=True)
    first = render_outputs(fixture_run(case), work / "1")
    second = render_outputs(fixture_run(case), work / "2")
    names = output_files(first)
    if names != output_files(second):
        raise SystemExit(f"{case}: two renders of the fixture wrote different files")
    _, differ, errors = filecmp.cmpfiles(first, second, names, shallow=False)
    if differ or errors:
        raise SystemExit(f"{case}: two renders of the fixture differ in {differ + errors}: "
                         "an output is not deterministic; fix that before making goldens")
    expected = expected_outputs(case)
    shutil.rmtree(expected, ignore_errors=True)
    shutil.copytree(first, expected, copy_function=shutil.copyfile)
    total = sum((expected / n).stat().st_size for n in names)
    fixture = sum(p.stat().st_size for p in fixture_run(case).iterdir())
    print(f"{case}: fixture {fixture / 1e3:.0f} kB; expected {len(names)} files, "
          f"{total / 1e3:.0f} kB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expected-only", action="store_true",
                        help="keep the committed fixtures; re-render expected/ only")
    parser.add_argument("--case", choices=CASES, action="append",
                        help="only this case (repeatable; default: every case)")
    args = parser.parse_args()
    for case in args.case or CASES:
        if not args.expected_only:
            keep_fixture(case, search(case))
        render_expected(case)


if __name__ == "__main__":
    main()
