"""`autotune export` and the `exports/` folder of a run: frozen config -> server files.

The mapping of knobs to each engine's fields lives in `autotune.exports`; this module
reads the frozen config, writes files atomically and reports what was dropped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.files import write_atomically


def write_exports(best_path: Path, out_dir: Path) -> list[str]:
    """Write every format that expresses `best_path`'s config without loss into
    `out_dir` (replacing what a previous best left there), and a README saying which
    formats could not. Returns the files written, relative to `out_dir`."""
    from autotune.exports import FORMATS, export, expressible
    from autotune.frozen import load_frozen

    doc = load_frozen(best_path)
    formats = expressible(doc)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Built aside and swapped in, so a reader never sees a mix of two bests' files.
    scratch = Path(tempfile.mkdtemp(prefix=".exports-", dir=out_dir.parent))
    written: list[str] = []
    try:
        lines = [f"Exports of {best_path.name} (trial {doc.get('provenance', {}).get('trial')}).",
                 ""]
        for fmt in FORMATS:
            if fmt not in formats:
                try:
                    export(doc, fmt)
                    reason = "not expressible"
                except AutotuneError as exc:
                    reason = str(exc)
                lines.append(f"{fmt}: not written: {reason}")
                continue
            result = export(doc, fmt)
            for name, text in result.files.items():
                path = scratch / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                written.append(name)
            lines.append(f"{fmt}: {', '.join(result.files)}")
        (scratch / "README.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        old = None
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}-old-{os.getpid()}")
            os.replace(out_dir, old)
        os.replace(scratch, out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return written


def run_export_command(args: argparse.Namespace) -> int:
    from autotune.exports import export
    from autotune.frozen import load_frozen

    options = {}
    if args.draft_tp is not None:
        options["draft_tensor_parallel_size"] = args.draft_tp
    doc = load_frozen(args.config)
    result = export(doc, args.format, lossy=args.lossy, options=options)
    for line in result.dropped:
        print(f"autotune: warning: dropped {line}", file=sys.stderr)
    if args.output is None:
        for text in result.files.values():
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    out = Path(args.output)
    if out.is_dir():
        raise AutotuneError(f"-o {out} is a folder; give a file name")
    names = list(result.files)
    # The primary file goes to -o; siblings (sglang's .sh, trtllm's .yaml) next to it.
    write_atomically(out, _ensure_newline(result.files[names[0]]))
    written = [str(out)]
    for name in names[1:]:
        sibling = out.with_suffix(Path(name).suffix)
        if sibling == out:
            continue
        write_atomically(sibling, _ensure_newline(result.files[name]))
        written.append(str(sibling))
    print(f"autotune: wrote {', '.join(written)}", file=sys.stderr)
    return 0


def _ensure_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"
