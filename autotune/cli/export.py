"""`autotune export FILE --format F`: one frozen config as one engine's files, on stdout
or next to `-o FILE`, with a warning line per knob dropped under `--lossy`. A best.json
holding F's own answer (v5's `engines`) exports that one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import autotune.exports as exports  # by attribute: tests/phase_driver.py wraps export
from autotune.cli.engine_answer import answer_for, note_engine_answer
from autotune.common.errors import AutotuneError
from autotune.common.files import write_atomically
from autotune.frozen.checks import load_frozen_config
from autotune.runs.exports_folder import refusal_reason


def run_export_command(args: argparse.Namespace) -> int:
    options = exports.ExportOptions(draft_tensor_parallel_size=args.draft_tp)
    # A best.json answering per engine: the format's engine runs its own answer (its
    # drafting rules, its finalists), not autotune's decoder's at the top level.
    doc, where = answer_for(load_frozen_config(args.config), args.format)
    # Exporting a config measured slower than no speculation would slow the server down.
    refusal = refusal_reason(doc)
    if refusal is not None:
        whose = f"{args.format}'s own answer ({where}): " if where else ""
        raise AutotuneError(f"{args.config}: {whose}{refusal}; nothing exported")
    if where is not None:
        note_engine_answer("exporting", args.format, args.config, doc)
    result = exports.export(doc, args.format, lossy=args.lossy, options=options)
    for line in result.dropped:
        print(f"autotune: warning: dropped {line}", file=sys.stderr)
    if args.output is None:
        several = len(result.files) > 1
        for name, text in result.files.items():
            if several:          # which document is which (stdout stays the files only)
                print(f"autotune: {name}:", file=sys.stderr, flush=True)
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()
        return 0
    out = Path(args.output)
    if out.is_dir():
        raise AutotuneError(f"-o {out} is a folder; give a file name")
    names = list(result.files)
    # The primary file goes to -o; siblings next to it, named by -o's stem and their own
    # suffix (sglang's .sh, trtllm's .yaml), or by their own name where that suffix is
    # taken (HF's assistant_generation_config.json beside the target's).
    write_atomically(out, _ensure_newline(result.files[names[0]]))
    written = [out]
    for name in names[1:]:
        sibling = out.with_suffix(Path(name).suffix)
        if sibling in written:
            sibling = out.parent / Path(name).name
        if sibling in written:
            raise AutotuneError(f"-o {out}: {name} would overwrite {sibling}; give another name")
        write_atomically(sibling, _ensure_newline(result.files[name]))
        written.append(sibling)
    print(f"autotune: wrote {', '.join(map(str, written))}", file=sys.stderr)
    return 0


def _ensure_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"
