"""The `exports/` folder of a run: each engine's files for the best config it expresses.

The mapping of knobs to each engine's fields lives in `autotune.exports`; this module
picks, per format, the best trial the format expresses, writes the files atomically and
says in a README what each holds and why a format got another trial or none.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

# Used as `exports.export`, not imported by name, so that wrapping the module's function
# (tests/phase_driver.py parks a run there) takes effect whenever it is wrapped.
import autotune.exports as exports
from autotune.errors import AutotuneError
from autotune.frozen import load_frozen


def _trial_line(doc: dict[str, Any]) -> str:
    """`trial #N (label, metric value)` for the README."""
    from autotune.run_folder import describe      # run_folder loads optuna and pandas
    provenance = doc.get("provenance") or {}
    values = (doc.get("objective") or {}).get("values") or {}
    shown = ", ".join(f"{k} {v:.4g}" for k, v in values.items() if isinstance(v, (int, float)))
    return (f"trial #{provenance.get('trial')} ({describe(doc['params'])}"
            + (f"; {shown}" if shown else "") + ")")


def write_exports(best_path: Path, out_dir: Path,
                  fallbacks: Sequence[dict[str, Any]] = ()) -> list[str]:
    """Write each format's files into `out_dir` (replacing what a previous best left
    there), with a README saying what each file holds.

    A format gets the best config when it expresses it without loss; otherwise the
    best of `fallbacks` (frozen configs of other trials, best first) that it does
    express, so a vLLM user gets the fastest config vLLM can actually run, and the
    README says which trial that is and what the best one needed. Returns the files
    written, relative to `out_dir`."""
    best = load_frozen(best_path)
    best_trial = (best.get("provenance") or {}).get("trial")
    # A fallback slower than plain decoding is no advice: only those that beat it.
    candidates = [best, *(d for d in fallbacks
                          if (d.get("provenance") or {}).get("trial") != best_trial
                          and _beats_baseline(d))]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Built aside and swapped in, so a reader never sees a mix of two bests' files.
    scratch = Path(tempfile.mkdtemp(prefix=".exports-", dir=out_dir.parent))
    written: list[str] = []
    try:
        lines = [f"Exports of the run's {best_path.name}: best {_trial_line(best)}.", ""]
        for fmt in exports.FORMATS:
            chosen = next((d for d in candidates if fmt in exports.expressible(d)), None)
            if chosen is None:
                lines.append(f"{fmt}: not written: {_reason(best, fmt)}"
                             + ("; no other trial it expresses beat the AR baseline"
                                if fallbacks else ""))
                continue
            result = exports.export(chosen, fmt)
            for name, text in result.files.items():
                path = scratch / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                written.append(name)
            line = f"{fmt}: {', '.join(result.files)}"
            if chosen is not best:
                line += (f": {_trial_line(chosen)}, the best trial {fmt} expresses exactly "
                         f"(for the best trial: {_reason(best, fmt)})")
            lines.append(line)
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


def _beats_baseline(doc: dict[str, Any]) -> bool:
    """Measured faster than the interleaved AR baseline (True when not measured)."""
    speedup = (doc.get("metrics") or {}).get("speedup")
    return not isinstance(speedup, (int, float)) or speedup > 1.0


def _reason(doc: dict[str, Any], fmt: str) -> str:
    try:
        exports.export(doc, fmt)
    except AutotuneError as exc:
        return str(exc)
    return "not expressible"
