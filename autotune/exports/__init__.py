"""Exports: turn a frozen config (best.json) into the config files of serving engines.

    export(frozen, "vllm").primary()   # the --speculative-config JSON
    expressible(frozen)                # formats that carry the config without loss

A format either expresses every tuned knob, or `export` raises one line naming each knob
it cannot express; with `lossy=True` those knobs are dropped (or approximated, as the line
says) and listed in `Export.dropped`. A method a format cannot carry at all is an error
even with `lossy`. Draft trees: SGLang expresses a dynamic (EAGLE-2) tree; chain-only
formats drop a tree to its best path under `lossy` (see _common). Sampling settings
(temperature, top_p) are request parameters of the servers, not speculative knobs, so
they never count as lost (how an engine drafts and verifies under sampling can: below).
A per-batch-size schedule (the frozen config's `schedule`: K per batch-size range) goes
to vLLM's num_speculative_tokens_per_batch_size, TensorRT-LLM's draft_len_schedule and,
for an EAGLE chain, SGLang's speculative_adaptive_config; elsewhere in SGLang it is a
loss (see each module).

Engine rules: each format runs its engine's drafting and verification rules
(`FORMAT_ENGINES`; autotune/schema/engines.py). A config measured under other rules
where they matter is not exact there (a non-fatal `engine=` loss): search with `--target
ENGINE` to measure it as the engine runs it. `engine_losses` is that check for a bare
DecodeConfig (the search refuses candidates its `--target` cannot run exactly), and
`approximation` the engine's note on what the measurement does not reproduce.

    launch(frozen, "vllm", export(frozen, "vllm").files)   # the launch.md section
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import did_you_mean
from autotune.schema.config import DecodeConfig
from autotune.schema.engines import engine_rules, retirement
from autotune.exports import dv, hf, llama_server, sglang, trtllm, vllm
from autotune.exports._common import ExportOptions, Loss, Source, read_frozen, routing_loss
from autotune.frozen.record import FrozenConfig


@dataclass(frozen=True)
class Format:
    """One export format, declared once in `FORMAT_RECORDS`: its module (`NAME`, `RULES`:
    whose engine rules it runs, `METHODS`, `check`, `render`, `launch`, optionally
    `builds`) and the title of its section in launch.md. `FORMATS`, `TITLES` and
    `FORMAT_ENGINES` are read from here."""

    module: ModuleType
    title: str

    @property
    def name(self) -> str:
        """The format's name (`--format`), as its module declares it."""
        return str(self.module.NAME)

    @property
    def rules(self) -> str:
        """Whose engine rules the format's engine runs (autotune/schema/engines.py)."""
        return str(self.module.RULES)


# Every format, in the order `--format` and the exports folder list them.
FORMAT_RECORDS: dict[str, Format] = {fmt.name: fmt for fmt in (
    Format(vllm, "vLLM"),
    Format(sglang, "SGLang"),
    Format(hf, "Hugging Face transformers"),
    Format(trtllm, "TensorRT-LLM"),
    Format(dv, "Draft & Verify"),                  # its repository drafts as ours
    Format(llama_server, "llama.cpp's llama-server"),
)}
FORMATS: tuple[str, ...] = tuple(FORMAT_RECORDS)
# Whose engine rules each format runs (Draft & Verify's repository drafts as ours).
FORMAT_ENGINES: dict[str, str] = {name: fmt.rules for name, fmt in FORMAT_RECORDS.items()}
# Section titles of launch.md.
TITLES: dict[str, str] = {name: fmt.title for name, fmt in FORMAT_RECORDS.items()}

_OPTIONS = ("draft_tensor_parallel_size",)
BASELINE_MESSAGE = "the best config is plain autoregressive decoding; there is nothing to export"

__all__ = ["FORMATS", "FORMAT_ENGINES", "FORMAT_RECORDS", "Export", "Format", "approximation",
           "ExportOptions", "engine_losses", "export", "expressible", "launch", "schema"]


@dataclass(frozen=True)
class Export:
    """The files of one format (relative name -> text, primary file first) and one line
    per knob dropped under `lossy=True`. `builds`: files made rather than rendered
    (relative name -> a writer of that file, e.g. llama-server's truncated draft GGUF),
    which a writer of the exports folder runs where it can; the rendered files say how
    to make them elsewhere."""

    format: str
    files: dict[str, str]
    dropped: list[str] = field(default_factory=list)
    builds: dict[str, Callable[[Path], object]] = field(default_factory=dict)

    def primary(self) -> str:
        """Text of the primary (first) file."""
        return next(iter(self.files.values()))


def _check_format(fmt: Any) -> str:
    if fmt in FORMATS:
        return fmt
    if (retired := retirement(fmt)) is not None:     # a retired engine's format went too
        raise AutotuneError(f"export format {retired}")
    hint = did_you_mean(str(fmt).lower(), FORMATS, inline=True)
    raise AutotuneError(f"unknown export format {fmt!r}{hint}; formats: {', '.join(FORMATS)}")


def _check_options(options: ExportOptions | Mapping[str, object] | None) -> ExportOptions:
    """The export's options: a record, or a mapping of option names (a library caller's,
    checked here)."""
    if isinstance(options, ExportOptions):
        return options
    given = dict(options or {})
    for key in given:
        if key not in _OPTIONS:
            hint = did_you_mean(str(key), _OPTIONS, inline=True)
            raise AutotuneError(f"unknown export option {key!r}{hint}; options: "
                                f"{', '.join(_OPTIONS)}")
    return ExportOptions(**given)


def _losses(src: Source) -> dict[str, list[Loss]]:
    return {fmt: _checked(fmt, src) for fmt in FORMATS}


def _checked(fmt: str, src: Source) -> list[Loss]:
    """The format's own losses, after the one every format shares: a routed
    per-category drafter (an engine loads one draft per server)."""
    routed = routing_loss(src)
    return ([routed] if routed is not None else []) + FORMAT_RECORDS[fmt].module.check(src)


def _either(formats: list[str]) -> str:
    return formats[0] if len(formats) == 1 else ", ".join(formats[:-1]) + " or " + formats[-1]


def _alternatives(fmt: str, by_format: dict[str, list[Loss]], fatal: bool) -> str:
    """The hint after the colon: formats that do express it, else what else can help."""
    exact = [f for f in FORMATS if f != fmt and not by_format[f]]
    if exact:
        hint = "use --format " + _either(exact)
        return hint if fatal else hint + ", or --lossy"
    if not fatal:
        return "use --lossy"
    lossy = [f for f in FORMATS if f != fmt and not any(x.fatal for x in by_format[f])]
    if lossy:
        return "use --format " + _either(lossy) + " with --lossy"
    return "no export format carries it"


def _notes(losses: list[Loss]) -> str:
    """`; note` for each distinct note of these losses (none for most)."""
    return "".join(f"; {note}" for note in dict.fromkeys(x.note for x in losses if x.note))


def export(frozen: FrozenConfig | Mapping[str, Any], fmt: str, lossy: bool = False,
           options: ExportOptions | Mapping[str, object] | None = None) -> Export:
    """Render `frozen` (a FrozenConfig, or its document) as `fmt`; see the module docstring.

    `options` may carry `draft_tensor_parallel_size` (used by vllm, ignored elsewhere).
    Raises AutotuneError (one line) for an unknown format, the AR baseline, a method the
    format cannot carry, or knobs it cannot express while `lossy` is False.
    """
    fmt = _check_format(fmt)
    options = _check_options(options)
    src = read_frozen(frozen)
    if not src.spec.drafts:
        raise AutotuneError(BASELINE_MESSAGE)
    by_format = _losses(src)
    losses = by_format[fmt]
    fatal = [loss for loss in losses if loss.fatal]
    if fatal:
        what = ", ".join(loss.summary() for loss in fatal)
        raise AutotuneError(f"{fmt} cannot express {what}: "
                            f"{_alternatives(fmt, by_format, fatal=True)}{_notes(fatal)}")
    if losses and not lossy:
        what = ", ".join(loss.summary() for loss in losses)
        raise AutotuneError(f"{fmt} cannot express {what}: "
                            f"{_alternatives(fmt, by_format, fatal=False)}{_notes(losses)}")
    module = FORMAT_RECORDS[fmt].module
    files = module.render(src, options)
    dropped = [line for loss in losses for line in loss.lines(src.cfg)]
    builds = getattr(module, "builds", None)
    return Export(format=fmt, files=files, dropped=dropped,
                  builds=builds(src) if builds is not None else {})


def expressible(frozen: FrozenConfig | Mapping[str, Any]) -> list[str]:
    """Formats (in FORMATS order) that express `frozen` without any loss; [] for the
    AR baseline."""
    src = read_frozen(frozen)
    if not src.spec.drafts:
        return []
    return [fmt for fmt, losses in _losses(src).items() if not losses]


def engine_losses(config: DecodeConfig, fmt: str, has_draft: bool) -> list[str]:
    """One summary line per thing `fmt` cannot express of `config` (fatal or not), for a
    bare config (placeholder model names); [] when the format runs it exactly, and for
    the AR baseline (every engine runs plain decoding)."""
    fmt = _check_format(fmt)
    src = Source(cfg=config, target="TARGET", draft="DRAFT" if has_draft else None,
                 model_id="TARGET")
    if not src.spec.drafts:
        return []
    return [loss.summary() for loss in _checked(fmt, src)]


def approximation(frozen_or_config: Any, fmt: str) -> str | None:
    """The format's engine's note on what our decoder does not reproduce of it for this
    config's method (and sampling), whichever rules the config was measured under: a
    figure measured here is then an approximation of that engine's; None when there is
    no such note. Takes a frozen document or a DecodeConfig."""
    fmt = _check_format(fmt)
    cfg = (frozen_or_config if isinstance(frozen_or_config, DecodeConfig)
           else read_frozen(frozen_or_config).cfg)
    return engine_rules(FORMAT_ENGINES[fmt]).approximation(cfg.method, cfg.greedy)


def launch(frozen: FrozenConfig | Mapping[str, Any], fmt: str, files: Mapping[str, str],
           basis: bool = True) -> str:
    """The Markdown section of exports/launch.md that starts `fmt`'s engine with
    `files` (an `export(frozen, fmt).files`), with the approximation note if any, and
    (`basis`) a line saying so where its figures are autotune's decoder's prediction
    of the engine rather than measured in it (`validation.basis`)."""
    fmt = _check_format(fmt)
    src = read_frozen(frozen)
    record = FORMAT_RECORDS[fmt]
    text = f"## {record.title} ({', '.join(files)})\n\n" + record.module.launch(src, dict(files))
    note = approximation(src.cfg, fmt)
    if note:
        text += f"\nmeasured approximately: {note}.\n"
    validation = FrozenConfig.of(frozen).validation if basis else None
    if validation is not None and validation.figure_basis().predicted:
        text += (f"\nnot measured in {engine_rules(FORMAT_ENGINES[fmt]).label} itself: the "
                 f"figures were {validation.figure_basis().text()}.\n")
    return text


def schema(fmt: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `fmt`'s primary file (SGLang's YAML mapping;
    for hf, each of its generation configs), shipped as package data in
    autotune/exports/schemas/<format>.schema.json."""
    fmt = _check_format(fmt)
    text = resources.files(__name__).joinpath("schemas", f"{fmt}.schema.json").read_text("utf-8")
    return json.loads(text)
