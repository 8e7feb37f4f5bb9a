"""The `exports/` folder of a run: each engine's files for the best config it expresses.

The mapping of knobs to each engine's fields lives in `autotune.exports`; this module
picks, per format, the best trial the format expresses, writes the files atomically,
says in a README what each holds and why a format got another trial or none, and writes
`launch.md`: one section per written format with the command (or Python) that starts
the engine with those files. Where the chosen config was measured under the engine's own
rules but only approximately (`exports.approximation`), both say so next to the format.
A best config with a per-batch-size schedule (`schedule`) gets a README line saying
which batch sizes were measured; one whose schedule never speculates is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import autotune.exports as exports
from autotune.common.errors import AutotuneError
from autotune.schema.label import describe
from autotune.frozen.checks import load_frozen_config
from autotune.frozen.record import FrozenConfig, Validation
from autotune.frozen.schedule import Schedule, read_schedule

LAUNCH = "launch.md"


def _trial_line(doc: FrozenConfig) -> str:
    """`trial #N (label, metric value)` for the README."""
    values = (doc.objective.values if doc.objective is not None else None) or {}
    shown = ", ".join(f"{k} {v:.4g}" for k, v in values.items() if isinstance(v, (int, float)))
    return (f"trial #{doc.trial} ({describe(doc.config.to_dict())}"
            + (f"; {shown}" if shown else "") + ")")


def write_exports(best_path: Path, out_dir: Path,
                  fallbacks: Sequence[FrozenConfig | Mapping[str, Any]] = ()) -> list[str]:
    """Write each format's files into `out_dir` (replacing what a previous best left
    there), with a README saying what each file holds.

    A format gets the best config when it expresses it without loss; otherwise the
    best of `fallbacks` (frozen configs of other trials, best first) that it does
    express, so a vLLM user gets the fastest config vLLM can actually run, and the
    README says which trial that is and what the best one needed. `launch.md` (written
    when any format is) starts each engine. Returns the files written, relative to
    `out_dir`, launch.md last."""
    best = load_frozen_config(best_path)
    others = [FrozenConfig.of(doc) for doc in fallbacks]
    refusal = refusal_reason(best)
    # A config slower than plain decoding is no advice: only those that beat it (on the
    # held-out prompts when validated), and nothing at all when the answer is not to
    # speculate (validated, or a schedule with K = 0 at every tuned batch size).
    settled = refusal and (_validation(best) or _never_speculates(best))
    candidates = [] if settled else [
        *([] if refusal else [best]),
        *(d for d in others if d.trial != best.trial and refusal_reason(d) is None)]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Built aside and swapped in, so a reader never sees a mix of two bests' files.
    scratch = Path(tempfile.mkdtemp(prefix=".exports-", dir=out_dir.parent))
    written: list[str] = []
    sections: list[str] = []
    try:
        lines = [f"Exports of the run's {best_path.name}: {_headline(best)}",
                 *_schedule_lines(best), ""]
        for fmt in exports.FORMATS:
            chosen = next((d for d in candidates if fmt in exports.expressible(d)), None)
            if chosen is None:
                why = refusal if refusal and (_validation(best) or not candidates) else (
                    format_refusal(best, fmt) + ("; no other trial it expresses beat the AR "
                                          "baseline" if fallbacks else ""))
                lines.append(f"{fmt}: not written: {why}")
                continue
            result = exports.export(chosen, fmt)
            for name, text in result.files.items():
                path = scratch / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                written.append(name)
            built = build_files(result, scratch)
            written += built
            line = f"{fmt}: {', '.join([*result.files, *built])}"
            if chosen is not best:
                line += (f": {_trial_line(chosen)}, the best trial {fmt} expresses exactly "
                         f"(for the best trial: {format_refusal(best, fmt)})")
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
        swap_in(scratch, out_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return written


def build_files(result: exports.Export, scratch: Path) -> list[str]:
    """Make the format's built files (a draft model file); one that cannot be made is
    left to the launch notes' command, never a failed export."""
    made = []
    for name, build in result.builds.items():
        path = scratch / name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            build(path)
        except (AutotuneError, OSError):
            continue
        made.append(name)
    return made


def swap_in(scratch: Path, out_dir: Path) -> None:
    """Replace `out_dir` by the finished `scratch` folder (the previous one moved aside
    first, then removed): a reader sees the old exports or the new ones, never a mix."""
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}-old-{os.getpid()}")
        os.replace(out_dir, old)
    os.replace(scratch, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _validation(doc: FrozenConfig) -> Validation | None:
    return doc.validation


def _schedule(doc: FrozenConfig) -> Schedule | None:
    # The frozen reader's own check (a loaded document passed it already).
    return read_schedule(doc.schedule)


def _never_speculates(doc: FrozenConfig) -> bool:
    schedule = _schedule(doc)
    return schedule is not None and schedule.max_k == 0


def _schedule_lines(doc: FrozenConfig) -> list[str]:
    """The README's line on a per-batch-size schedule (none without one). hf and dv
    decode one request at a time, so they run the batch-1 config: transformers 5.23.0
    generation/utils.py L4029 "assisted generate is only supported for batch_size = 1";
    Draft & Verify's decoding.py @ f69f2a750c83a34097e975afcef1d6a85229f58f calls
    `.item()` on one row's draft probability."""
    schedule = _schedule(doc)
    if schedule is None:
        return []
    sizes = ", ".join(map(str, schedule.batch_sizes))
    return [f"Per-batch-size K for {schedule.method}: {schedule.describe()}; measured at "
            f"batch sizes {sizes} (best.json's schedule.points: each K's speedup, the "
            "held_out rows confirmed on prompts the choice never saw). Beyond batch size "
            f"{schedule.largest} nothing was measured: vLLM carries the last K on, "
            "TensorRT-LLM uses its implicit tail (launch.md), SGLang carries the last K on "
            "for an EAGLE chain and runs one K at every batch size for its other methods; "
            "hf and dv decode one request at a time and run the batch-1 config."]


def refusal_reason(doc: FrozenConfig | Mapping[str, Any]) -> str | None:
    """Why `doc` must not be deployed, or None. Validated: the answer is "do not
    speculate", or its own held-out interval does not lie above 1.0. A per-batch-size
    schedule with K = 0 at every tuned batch size: never speculate. Not validated: its
    figures are replay predictions, or its search speedup is not above 1.0 (no measured
    speedup: nothing to hold against it)."""
    from autotune.search.finalists import DO_NOT_SPECULATE, UNDECIDED
    from autotune.records.validation import FinalistFigures
    doc = FrozenConfig.of(doc)
    validation = doc.validation
    if validation is not None and validation.decision == DO_NOT_SPECULATE:
        return f"the validated answer is not to speculate: {validation.reason}"
    if validation is not None and validation.decision == UNDECIDED:
        return f"the validation is undecided: {validation.reason}"
    schedule = _schedule(doc)
    if schedule is not None and schedule.max_k == 0:
        sizes = ", ".join(map(str, schedule.batch_sizes))
        return (f"its per-batch-size schedule never speculates: K=0 at every tuned batch "
                f"size ({sizes})")
    if validation is not None:
        if not FinalistFigures.from_json(validation.to_json()).shown_faster():
            return (f"not shown faster than the AR baseline on the held-out prompts "
                    f"({_figure(validation)})")
        return None
    metrics = doc.metrics
    if metrics is not None and metrics.fidelity == "replay":
        # A replayed trial never decoded: its figures are predictions, and whether the
        # decoder is lossless with it was never checked.
        return ("its figures are replay predictions, never measured: validate it "
                "(--validation) or search with --fidelity multi")
    speedup = metrics.speedup if metrics is not None else None
    if isinstance(speedup, (int, float)) and speedup <= 1.0:
        return f"measured {speedup:.3f}x the AR baseline in the search: slower than no speculation"
    return None


def _figure(validation: Validation) -> str:
    text = validation.speedup_text(missing="no speedup")
    if validation.lossless is False:
        text += ", not lossless"
    return text


def _headline(best: FrozenConfig) -> str:
    """The README's first line: the answer, validated or not."""
    validation = _validation(best)
    if validation is None:
        return (f"best {_trial_line(best)}; NOT validated on held-out prompts (the search's "
                "own figure)")
    if validation.decision == "do_not_speculate":
        return f"do not speculate: {validation.reason}. Nothing is written."
    if validation.decision == "undecided":
        return f"undecided: {validation.reason}. Nothing is written."
    where = f"{validation.prompts} held-out prompts x {validation.repeats} repeats"
    if validation.estimator == "ppi++":
        where = (f"a pool of {validation.pool_prompts} held-out prompts, "
                 f"prediction-powered ({where} measured)")
    return f"best {_trial_line(best)}, validated {_figure(validation)} on {where} (90% interval)"


def format_refusal(doc: FrozenConfig, fmt: str) -> str:
    try:
        exports.export(doc, fmt)
    except AutotuneError as exc:
        return str(exc)
    return "not expressible"
