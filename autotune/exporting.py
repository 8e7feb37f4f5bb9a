"""The `exports/` folder of a run: each engine's files for the best config it expresses.

The mapping of knobs to each engine's fields lives in `autotune.exports`; this module
picks, per format, the best trial the format expresses, writes the files atomically,
says in a README what each holds and why a format got another trial or none, and writes
`launch.md`: one section per written format with the command (or Python) that starts
the engine with those files. Where the chosen config was measured under the engine's own
rules but only approximately (`exports.approximation`), both say so next to the format.
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

LAUNCH = "launch.md"


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
    README says which trial that is and what the best one needed. `launch.md` (written
    when any format is) starts each engine. Returns the files written, relative to
    `out_dir`, launch.md last."""
    best = load_frozen(best_path)
    best_trial = (best.get("provenance") or {}).get("trial")
    refusal = refusal_reason(best)
    # A config slower than plain decoding is no advice: only those that beat it (on the
    # held-out prompts when validated), and nothing at all when the answer is not to
    # speculate.
    candidates = [] if refusal and _validation(best) else [
        *([] if refusal else [best]),
        *(d for d in fallbacks
          if (d.get("provenance") or {}).get("trial") != best_trial
          and refusal_reason(d) is None)]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Built aside and swapped in, so a reader never sees a mix of two bests' files.
    scratch = Path(tempfile.mkdtemp(prefix=".exports-", dir=out_dir.parent))
    written: list[str] = []
    sections: list[str] = []
    try:
        lines = [f"Exports of the run's {best_path.name}: {_headline(best)}", ""]
        for fmt in exports.FORMATS:
            chosen = next((d for d in candidates if fmt in exports.expressible(d)), None)
            if chosen is None:
                why = refusal if refusal and (_validation(best) or not candidates) else (
                    _reason(best, fmt) + ("; no other trial it expresses beat the AR "
                                          "baseline" if fallbacks else ""))
                lines.append(f"{fmt}: not written: {why}")
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
            note = exports.approximation(chosen, fmt)
            if note:
                lines.append(f"  measured approximately: {note}")
            sections.append(exports.launch(chosen, fmt, result.files))
        if sections:
            lines += ["", f"{LAUNCH}: how to start each engine with its files"]
            text = ("# Launching the exported configs\n\nPaths are relative to this "
                    "folder.\n\n" + "\n".join(sections))
            (scratch / LAUNCH).write_text(text, encoding="utf-8")
            written.append(LAUNCH)
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


def _validation(doc: dict[str, Any]) -> dict[str, Any] | None:
    found = doc.get("validation")
    return found if isinstance(found, dict) else None


def refusal_reason(doc: dict[str, Any]) -> str | None:
    """Why `doc` must not be deployed, or None. Validated: the answer is "do not
    speculate", or its own held-out interval does not lie above 1.0. Not validated: its
    figures are replay predictions, or its search speedup is not above 1.0 (no measured
    speedup: nothing to hold against it)."""
    from autotune.validation import DO_NOT_SPECULATE, shown_faster
    validation = _validation(doc)
    if validation is not None:
        if validation.get("decision") == DO_NOT_SPECULATE:
            return f"the validated answer is not to speculate: {validation.get('reason')}"
        if not shown_faster(validation):
            return (f"not shown faster than the AR baseline on the held-out prompts "
                    f"({_figure(validation)})")
        return None
    metrics = doc.get("metrics") or {}
    if metrics.get("fidelity") == "replay":
        # A replayed trial never decoded: its figures are predictions, and whether the
        # decoder is lossless with it was never checked.
        return ("its figures are replay predictions, never measured: validate it "
                "(--validation) or search with --fidelity multi")
    speedup = metrics.get("speedup")
    if isinstance(speedup, (int, float)) and speedup <= 1.0:
        return f"measured {speedup:.3f}x the AR baseline in the search: slower than no speculation"
    return None


def _figure(validation: dict[str, Any]) -> str:
    speedup, ci = validation.get("speedup"), validation.get("ci90")
    text = f"{speedup:.3f}x" if isinstance(speedup, (int, float)) else "no speedup"
    if isinstance(ci, list) and len(ci) == 2:
        text += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    if validation.get("lossless") is False:
        text += ", not lossless"
    return text


def _headline(best: dict[str, Any]) -> str:
    """The README's first line: the answer, validated or not."""
    validation = _validation(best)
    if validation is None:
        return (f"best {_trial_line(best)}; NOT validated on held-out prompts (the search's "
                "own figure)")
    if validation.get("decision") == "do_not_speculate":
        return f"do not speculate: {validation.get('reason')}. Nothing is written."
    return (f"best {_trial_line(best)}, validated {_figure(validation)} on "
            f"{validation.get('prompts')} held-out prompts x {validation.get('repeats')} "
            f"repeats (90% interval)")


def _reason(doc: dict[str, Any], fmt: str) -> str:
    try:
        exports.export(doc, fmt)
    except AutotuneError as exc:
        return str(exc)
    return "not expressible"
