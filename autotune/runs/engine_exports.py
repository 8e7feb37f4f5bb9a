"""The `exports/` folder of a `--target all` run: one folder per engine it answers for.

`exports/<engine>/` holds that engine's answer (best.json's `engines.<engine>`): its
config files as the engine reads them and `launch.md` (how to start it with them),
headed by the held-out figure the answer was chosen on, its 90% interval, the engine
release whose drafting rules were reproduced, and the hardware it was measured on; where
that is not the hardware the engine serves on (a GPU engine tuned on a CPU) the notes
say so and give the command that re-tunes on the serving machine. An engine whose answer
is not to speculate (or undecided) gets a README saying so with its evidence: serving it
without speculation is the answer. `exports/README.txt` opens with the per-engine table.
Built aside and swapped in, like the single-engine exports, so a reader never sees a mix.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import autotune.exports as exports
from autotune.backends import BACKEND_RECORDS
from autotune.schema.engines import ENGINE_RECORDS, PROVENANCE, engine_rules
from autotune.frozen.checks import load_frozen_config
from autotune.frozen.record import Figures, FrozenConfig, Validation
# By attribute (`exports_folder.swap_in`): tests/phase_driver.py parks a run there.
from autotune.runs import exports_folder
from autotune.runs.exports_folder import LAUNCH, build_files, format_refusal

README = "README.txt"
# Engines that serve on a GPU: a figure measured on a CPU says little about their speed.
_GPU_ENGINES: tuple[str, ...] = tuple(name for name, engine in ENGINE_RECORDS.items()
                                      if engine.serves_on_gpu)
# Of them, those autotune also measures in on a CPU (vLLM's CPU build, backends/vllm.py).
_CPU_BUILDS: tuple[str, ...] = tuple(name for name in _GPU_ENGINES
                                     if BACKEND_RECORDS[name].on_cpu)
_VERDICTS = {"speculate": "speculate", "do_not_speculate": "do not speculate",
             "undecided": "undecided"}


def write_engine_exports(best_path: Path, out_dir: Path) -> list[str]:
    """Write each engine's answer into `out_dir/<engine>/` and the table into
    `out_dir/README.txt`. Returns the files written, relative to `out_dir`."""
    best = load_frozen_config(best_path)
    answers = best.engine_answers()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".exports-", dir=out_dir.parent))
    written: list[str] = []
    try:
        for engine, answer in answers.items():
            files = _engine_folder(scratch / engine, engine, answer)
            written += [f"{engine}/{name}" for name in files]
        text = (f"Exports of the run's {best_path.name}: one folder per engine, each "
                "holding that engine's own answer, chosen under its drafting rules and "
                "validated on held-out prompts against the same AR baseline.\n\n"
                + answers_table(best, "../best.json", "") + "\n")
        (scratch / README).write_text(text, encoding="utf-8")
        written.append(README)
        exports_folder.swap_in(scratch, out_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return written


def answers_table(best: FrozenConfig, own_file: str = "best.json",
                  folder: str = "exports/") -> str:
    """The per-engine table of a best.json with `engines`: autotune's own answer (the
    ceiling, in `own_file`) first, then each engine's (in `folder<engine>/`)."""
    rows = [_row("autotune (ceiling)", best, own_file)]
    rows += [_row(engine, answer, f"{folder}{engine}/")
             for engine, answer in best.engine_answers().items()]
    return engine_table(rows)


# Where each answer's figure was measured (the engine itself, or autotune's decoder and
# then why it is a prediction), and for an answer raced in the engine itself, what
# autotune's decoder predicted.
_MEASURED_HEADS = ("measured in", "decoder predicted [90%]")


def engine_table(rows: list[dict[str, str]]) -> str:
    """The per-engine table (engine, config, held-out speedup [90%], tau, verdict, where
    it was measured (or why it is a prediction), file; where an engine raced in itself,
    the decoder's prediction beside it), in fixed-width columns."""
    heads: tuple[str, ...] = ("engine", "config", "held-out speedup [90%]", "tau",
                              "verdict", _MEASURED_HEADS[0], "file")
    if any(row.get(_MEASURED_HEADS[1], "-") != "-" for row in rows):
        heads = (*heads[:6], _MEASURED_HEADS[1], heads[6])
    table = [heads, *(tuple(row.get(h, "-") for h in heads) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(heads))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
                     for line in table)


def _row(engine: str, answer: FrozenConfig, file: str) -> dict[str, str]:
    """One table row of an answer: its config (none for do not speculate), its own
    held-out figure (its best finalist's where it does not speculate), tau and verdict."""
    validation = answer.validation
    decision = validation.decision if validation is not None else "not validated"
    shown = _shown(validation)
    config = ((answer.label or "") if decision == "speculate" else _none_label(shown))
    tau = shown.mean_accepted_tokens if shown is not None else None
    predicted = validation.decoder_prediction if validation is not None else None
    return {"engine": engine, "config": config or "-",
            "held-out speedup [90%]": _speedup(shown),
            "tau": f"{tau:.2f}" if isinstance(tau, (int, float)) else "-",
            "verdict": _VERDICTS.get(decision, decision) + _suspect(validation),
            "file": file,
            _MEASURED_HEADS[0]: _measured_in(validation),
            _MEASURED_HEADS[1]: predicted.speedup_text() if predicted is not None else "-"}


def _measured_in(validation: Validation | None) -> str:
    """Where an answer's figures were measured, short: the engine itself, or our decoder
    (and, for an engine's answer, why it is a prediction)."""
    if validation is None:
        return "-"
    return validation.figure_basis().short()


def _suspect(validation: Validation | None) -> str:
    """`, suspect` where the answer's figure is faster than its τ allows."""
    return ", suspect" if validation is not None and validation.suspect else ""


def _none_label(best: Figures | None) -> str:
    """The config cell of an answer that does not speculate: none, and the best finalist
    its figure is of (so the figure is not read as plain decoding's own)."""
    label = best.label if best is not None else None
    return f"none (best tried: {label})" if label else "none (plain decoding)"


def _shown(validation: Validation | None) -> Figures | None:
    """The figures an answer is read by: its own (speculate), else its best finalist's."""
    return validation.shown() if validation is not None else None


def _speedup(figures: Figures | None) -> str:
    return figures.speedup_text() if figures is not None else "-"


def _engine_folder(folder: Path, engine: str, answer: FrozenConfig) -> list[str]:
    """One engine's folder: its files and launch notes, or a README saying not to
    speculate. Returns the files written, relative to `folder`."""
    folder.mkdir(parents=True)
    validation = answer.validation
    header = _header(engine, answer)
    if validation is None or not validation.speculates:
        label = engine_rules(engine).label
        if validation is not None and validation.decision == "undecided":
            verdict = (f"undecided: the figures cannot tell a gain worth having from none. "
                       f"Until a rerun decides, serve {label} without speculative decoding")
        else:
            verdict = (f"do not speculate: serve {label} without speculative decoding; no "
                       "config of its space was shown faster than plain decoding on the "
                       "held-out prompts")
        reason = validation.reason if validation is not None else None
        text = (f"{header}\nAnswer: {verdict} ({reason}).\n"
                f"Its best finalist: {_speedup(_shown(validation))}.\n")
        (folder / README).write_text(text, encoding="utf-8")
        return [README]
    if engine not in exports.expressible(answer):
        # The engine's space is cut to what its exporter writes exactly; a config it
        # still cannot write is said, not written approximately.
        (folder / README).write_text(f"{header}\nNot written: {format_refusal(answer, engine)}\n",
                                     encoding="utf-8")
        return [README]
    result = exports.export(answer, engine)
    for name, text in result.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    built = build_files(result, folder)
    # The header says what the figure is; the section need not say it again.
    launch = exports.launch(answer, engine, result.files, basis=False)
    (folder / LAUNCH).write_text(f"# Launching {engine_rules(engine).label} with its "
                                 f"answer\n\n{header}\n{launch}", encoding="utf-8")
    return [*result.files, *built, LAUNCH]


def _header(engine: str, answer: FrozenConfig) -> str:
    """What the answer was chosen on: its held-out figure and interval, the engine
    release whose rules were reproduced, the hardware, and where that hardware is not
    the engine's, the command that re-tunes on the serving machine."""
    validation = answer.validation
    shown = _shown(validation)
    rules = engine_rules(engine).label
    release = PROVENANCE[engine].version if engine in PROVENANCE else ""
    hardware = answer.hardware
    device = ((hardware.device_name or hardware.device) if hardware is not None
              else None) or "unrecorded hardware"
    kind = hardware.device if hardware is not None else "?"
    speculates = validation is not None and validation.speculates
    label = answer.label
    estimator = (validation.estimator if validation is not None
                 and "estimator" in validation.model_fields_set else "measured")
    lines = [
        f"Config: {label if speculates and label else _none_label(shown)}",
        f"Held-out speedup: {_speedup(shown)} over "
        f"{validation.prompts if validation is not None else None} "
        f"measured held-out prompts ({estimator}; 90% interval), "
        f"mean accepted tokens "
        f"{_tau(shown)}",
        f"Drafting rules reproduced: {rules}{f' ({release})' if release else ''}"]
    if validation is not None:
        lines.append(f"Figure: {validation.figure_basis().text()}")
        if validation.suspect:
            lines.append("Suspect: this figure is faster than its mean accepted tokens "
                         "allow (its baseline ran slower than its own decoding explains: "
                         "other work on the cores?); rerun on a quiet machine")
    in_engine = validation is not None and validation.measured_in_engine
    predicted = validation.decoder_prediction if validation is not None else None
    if validation is not None and in_engine:
        lines.append(f"Measured on: {device} ({kind}), in "
                     f"{validation.measured_by_label or rules} itself, against its "
                     "own decoding without speculation")
        if predicted is not None:
            lines.append(f"Predicted by autotune's decoder under {rules}'s rules (the same "
                         f"finalists, the same prompts): {predicted.speedup_text()}, "
                         f"{_VERDICTS.get(predicted.decision, '?')}")
    else:
        lines.append(f"Measured on: {device} ({kind}), in "
                     f"autotune's decoder under {rules}'s rules")
    if engine in _GPU_ENGINES and kind == "cpu":
        model = (answer.model.spec if answer.model is not None else None) or "MODEL"
        if in_engine:
            lines.append(f"This figure holds for {rules}'s CPU build on this machine; on a "
                         f"GPU re-tune there with `autotune search --target {engine} "
                         f"--model {model} --device cuda`")
        elif engine in _CPU_BUILDS:
            # The engine runs on this kind of machine too: the figure above is our
            # decoder's prediction of it, and the engine itself can check it here.
            lines.append(f"{rules} also runs on a CPU (its CPU build), where this figure "
                         f"is a prediction: measure it in {rules} itself with `autotune "
                         f"measure --in {engine} --config best.json` (after ./setup.sh "
                         f"--engines {engine}), or search with --target {engine} to race "
                         f"in it; on a GPU re-tune there with `autotune search --target "
                         f"{engine} --model {model} --device cuda`")
        else:
            lines.append(f"{rules} serves on a GPU and this figure was measured on a CPU: "
                         f"re-tune on the serving machine with `autotune search --target "
                         f"{engine} --model {model} --device cuda`")
    return "\n".join(lines) + "\n"


def _tau(figures: Figures | None) -> str:
    tau = figures.mean_accepted_tokens if figures is not None else None
    return f"{tau:.2f}" if isinstance(tau, (int, float)) else "-"
