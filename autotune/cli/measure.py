"""`autotune measure`: one config against the AR baseline; with a frozen config, a
re-measurement through the same objective code, printed as recorded vs now.

A frozen config brings its model, draft, workload and objective along; flags given on
the command line override them (and the comparison then says so). With `--in ENGINE`, a
best.json holding that engine's own answer (v5's `engines`) is measured by that answer.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from autotune.cli.engine_answer import answer_for, not_speculating, note_engine_answer
from autotune.common.errors import AutotuneError
from autotune.common.files import write_atomically
from autotune.common.interval import CI_KEY, speedup_text
from autotune.schema.config import (
    config_from_mapping,
    load_config_file,
    parse_assignments,
)
from autotune.schema.methods import get_method
from autotune.common.files import read_json
from autotune.frozen.checks import is_frozen
from autotune.frozen.checks import load_frozen_config
from autotune.frozen.record import FrozenConfig
from autotune.frozen.environment import (
    describe_environment_change,
    hardware_record,
    model_record,
)
from autotune.records.summary import MeasurementSummary
from autotune.search.evaluation import evaluate
from autotune.search.objectives import EvalContext, available_objectives, load_objective
from autotune.workloads.prompts import load_workload, workload_digest

DEFAULT_MAX_NEW_TOKENS = 128
# Rows of the recorded-vs-now table, in order; objective metrics are added in front.
COMPARED = ("latency_ms_per_token", "baseline_latency_ms_per_token", "speedup",
            "mean_accepted_tokens", "acceptance_rate", "draft_time_share", "prefill_ms",
            "peak_memory_mb", "lossless")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return ";".join(",".join(str(x) for x in v) for v in value)   # tree_choices
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value) or "-"
    return str(value)


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
            for row in [head, *rows]]


def _config_row(summary: MeasurementSummary) -> tuple[str, str]:
    return "config", ", ".join(f"{k}={_fmt(v)}" for k, v in (summary.config or {}).items())


def _speedup_cell(summary: MeasurementSummary) -> str:
    """`1.118x [1.065, 1.172]`: the speedup with its 90% interval (`speedup_text`)."""
    ci = summary.ci90
    return speedup_text({"speedup": summary.speedup,
                         CI_KEY: ci.to_json() if ci is not None else None})


def _figure_rows(summary: MeasurementSummary, keys: tuple[str, ...]) -> list[tuple[str, str]]:
    """One (label, text) row per figure; the speedup with its 90% interval."""
    return [("speedup [90% CI]", _speedup_cell(summary))
            if key == "speedup" else (key, _fmt(summary.figure(key))) for key in keys]


def _lossless_rows(summary: MeasurementSummary) -> list[tuple[str, str]]:
    """What `lossless` rests on: its tier, the runs per verdict where any run differed
    from AR, the prompts that differ at a near-tie and those that diverge for real."""
    rows: list[tuple[str, str]] = []
    counts = summary.divergences or {}
    if summary.lossless_tier and summary.lossless is not None:
        rows.append(("lossless_tier", summary.lossless_tier))
    if any(counts.get(kind) for kind in ("near_tie", "real")):
        rows.append(("divergences", ", ".join(f"{k} {v}" for k, v in counts.items())))
    if summary.near_tie_prompts:
        rows.append(("near_tie_prompts", _fmt(summary.near_tie_prompts)))
    if summary.mismatched_prompts:
        rows.append(("mismatched_prompts", _fmt(summary.mismatched_prompts)))
    return rows


def format_summary(figures: MeasurementSummary | Mapping[str, Any]) -> str:
    """The text of `autotune measure`: one `key  value` row per figure (speedup with its
    90% interval over prompts), then the speedup, τ and prompts per category. `figures`:
    the summary, or its JSON (`autotune measure --json`)."""
    summary = MeasurementSummary.of(figures)
    rows = [_config_row(summary)]
    if summary.measured_by_label:
        rows.append(("measured in", summary.measured_by_label))
    rows += _figure_rows(summary, (
        "model", "draft", "device", "dtype", "prompts", "tokens_generated",
        "latency_ms_per_token", "baseline_latency_ms_per_token", "speedup", "prefill_ms",
        "mean_accepted_tokens", "acceptance_rate", "pos_acc", "depth_acceptance",
        "mean_verified_tokens", "draft_time_share", "peak_memory_mb", "lossless"))
    rows += _lossless_rows(summary)
    if summary.mismatched_prompts and summary.lossless_binding is False:
        rows.append(("", "(the engine's multi-token passes round near-ties unlike its "
                         "one-token passes: reported, not held against the config)"))
    if summary.fidelity == "replay":
        rows.insert(1, ("fidelity", "replay (predicted, nothing decoded; τ "
                        + ("exact" if summary.replay_exact else "approximate") + ")"))
        rows.extend(("approximation", note) for note in summary.replay_notes or [])
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    if summary.by_category:
        lines.append("")
        lines.extend(_table(("category", "speedup [90% CI]", "tau", "prompts"), [
            (name, c.speedup_text(), _fmt(c.mean_accepted_tokens), _fmt(c.prompts))
            for name, c in summary.by_category.items()]))
    return "\n".join(lines)


def comparison_rows(recorded: MeasurementSummary, now: MeasurementSummary,
                    metrics: list[str]) -> list[tuple[str, str, str, str]]:
    """(metric, recorded, now, now/recorded) for the objective's metrics and the usual
    figures, skipping those neither side has."""
    rows = []
    for key in dict.fromkeys([*metrics, *COMPARED]):
        old, new = recorded.figure(key), now.figure(key)
        if old is None and new is None:
            continue
        ratio = (f"{new / old:.3f}x" if isinstance(old, (int, float)) and not isinstance(old, bool)
                 and isinstance(new, (int, float)) and old else "")
        rows.append((key, _fmt(old), _fmt(new), ratio))
    return rows


def format_comparison(rows: list[tuple[str, str, str, str]]) -> str:
    return "\n".join(_table(("metric", "recorded", "now", "now/recorded"), rows))


def frozen_defaults(args: argparse.Namespace, doc: FrozenConfig | None) -> list[str]:
    """Fill model, draft and workload flags the user left out from a frozen config (or
    the plain defaults). Returns the flags the user overrode, for the report."""
    model = doc.model if doc is not None else None
    draft = doc.draft if doc is not None else None
    workload = doc.workload if doc is not None else None
    overridden = []
    filled = {
        "model": model.spec if model is not None and model.spec is not None else "default",
        "draft": draft.spec if draft is not None else None,
        "workload": workload.source if workload is not None else "builtin",
        "categories": (",".join(workload.categories)
                       if workload is not None and workload.categories else None),
        "prompts": workload.prompts if workload is not None else None,
        "max_new_tokens": (workload.max_new_tokens if workload is not None
                           else DEFAULT_MAX_NEW_TOKENS),
        "seed": workload.seed if workload is not None and workload.seed is not None else 0,
    }
    for name, value in filled.items():
        given = getattr(args, name, None)
        if given is None:
            setattr(args, name, value)
        elif doc is not None and value is not None and given != value:
            overridden.append(f"--{name.replace('_', '-')}")
    if model is not None and model.dtype and args.dtype is None:
        args.dtype = model.dtype
    return overridden


def _objective_of(doc: FrozenConfig) -> Any:
    """The objective the config was measured with: its file when it still has the
    recorded hash, else the shipped preset of that name, else `latency`."""
    recorded = doc.provenance.objective if doc.provenance is not None else None
    path = recorded.file if recorded is not None else None
    if recorded is not None and path and Path(path).is_file():
        objective = load_objective(path)
        if not recorded.sha256 or objective.sha256 == recorded.sha256:
            return objective
    name = ((recorded.name if recorded is not None else None)
            or (doc.objective.name if doc.objective is not None else None) or "latency")
    return load_objective(name if name in available_objectives() else "latency")


# The figures a validation records for its config (best.json's `validation`).
VALIDATED_FIGURES = ("speedup", "latency_ms_per_token", "baseline_latency_ms_per_token",
                     "mean_accepted_tokens", "acceptance_rate", "lossless")


def _recorded_figures(doc: FrozenConfig, prompts_sha256: str) -> MeasurementSummary:
    """The figures recorded for the config: the search's (`metrics`), with the
    validation's where the prompts measured now are the validation's."""
    recorded = doc.metrics.to_json() if doc.metrics is not None else {}
    validation = doc.validation
    if validation is not None and prompts_sha256 == validation.workload_sha256:
        # Same prompts as the validation: compare with its figures, not the search's.
        written = validation.to_json()
        recorded.update({k: written[k] for k in VALIDATED_FIGURES if k in written})
    return MeasurementSummary.from_json(recorded)


def _validated_prompt_ids(doc: FrozenConfig) -> list[str] | None:
    ids = doc.validation.prompt_ids if doc.validation is not None else None
    return [str(i) for i in ids] if ids else None


def run_measure_command(args: argparse.Namespace) -> int:
    """`autotune measure`, in steps: every input is checked (and refused in one line)
    before torch and the models load, then one of replay, batched, re-measure of a
    frozen config, or a plain measurement runs."""
    measure_in = getattr(args, "measure_in", "autotune")
    doc = _engine_answer(args, _frozen_doc(args.config), measure_in)
    # A validated config is re-measured where its headline figure came from: on its
    # held-out prompts, unless the command line names other prompts.
    held_out = (_validated_prompt_ids(doc) if doc is not None and args.workload is None
                and args.prompts is None and args.categories is None else None)
    overridden = frozen_defaults(args, doc)
    config = _checked_config(args, doc, overridden)
    prompts = _prompts_of(args, held_out)
    objective = _objective_of(doc) if doc is not None else None
    if held_out and objective is not None and doc is not None and doc.validation is not None:
        objective = dataclasses.replace(objective, repeats=doc.validation.repeats or 1)
    batch_size = getattr(args, "batch_size", None)
    _refuse_before_loading(args, config, measure_in, batch_size, len(prompts))
    # torch and transformers load here, once every input above has been checked.
    from autotune.models.loading import load_model
    from autotune.models.trained import load_draft
    target = load_model(args.model, args.device, args.dtype, args.trust_remote_code)
    draft = load_draft(args.draft, target, args.device, args.dtype, args.trust_remote_code)
    if getattr(args, "turns", "first") == "all":
        prompts = _with_later_turns(args, target, prompts)
    if args.replay:
        return _replay(args, config, target, draft, prompts)
    if batch_size is not None:
        return _measure_batched(args, config, target, draft, prompts, batch_size)
    backend = (_open_measure_backend(args, config, measure_in, target, draft, prompts)
               if measure_in != "autotune" else None)
    if doc is not None:
        return _remeasure(args, doc, config, objective, target, draft, prompts, overridden,
                          backend)
    return _measure_plain(args, config, target, draft, prompts, backend)


def _frozen_doc(path: str | None) -> FrozenConfig | None:
    """The frozen config `--config` names, checked; None for a plain config file."""
    if path and Path(path).suffix == ".json" and is_frozen(read_json(path)):
        return load_frozen_config(path)
    return None


def _engine_answer(args: argparse.Namespace, doc: FrozenConfig | None,
                   measure_in: str) -> FrozenConfig | None:
    """`--in ENGINE` on a best.json holding that engine's own answer (v5's `engines`):
    that answer (its knobs, model, workload, held-out prompts and figures), noted on
    stderr. One whose answer is not to speculate (or undecided) carries the AR baseline's
    params: measuring them would time AR against itself, so it is refused in one line,
    unless --set gives knobs of one's own to measure."""
    if doc is None or measure_in == "autotune":
        return doc
    answer, where = answer_for(doc, measure_in)
    if where is None:
        return doc
    refusal = not_speculating(answer)
    if refusal is not None and not args.assignments:
        raise AutotuneError(f"{args.config}: {measure_in}'s own answer ({where}): {refusal}; "
                            f"nothing to measure in {measure_in} (give --set to measure "
                            "other knobs)")
    note_engine_answer("measuring", measure_in, args.config, answer)
    return answer


def _checked_config(args: argparse.Namespace, doc: FrozenConfig | None,
                    overridden: list[str]) -> Any:
    """The config to measure: --config's keys with --set's on top, validated; a --set
    on a frozen config is noted in `overridden` (the comparison says so)."""
    if args.max_new_tokens < 1:
        raise AutotuneError("--max-new-tokens must be at least 1")
    if args.prompts is not None and args.prompts < 1:
        raise AutotuneError("--prompts must be at least 1")
    # A frozen config's knobs are its chosen answer's (an engine's own, for --in ENGINE).
    keys = load_config_file(args.config) if args.config and doc is None else None
    base = doc.config if doc is not None else (
        config_from_mapping(keys) if keys is not None else None)
    assignments = parse_assignments(args.assignments)
    config = config_from_mapping(assignments, base).validate()
    if assignments and doc is not None:
        overridden.append("--set " + ",".join(assignments))
    get_method(config.method).require_draft(args.draft is not None)
    return config


def _categories(args: argparse.Namespace) -> list[str] | None:
    return [c for c in args.categories.split(",") if c] if args.categories else None


def _prompts_of(args: argparse.Namespace, held_out: list[str] | None) -> list[Any]:
    """The prompts to measure: a validated config's held-out ones by id, else the
    workload's (its categories, its count)."""
    if not held_out:
        return load_workload(args.workload, _categories(args), args.prompts)
    by_id = {p.prompt_id: p for p in load_workload(args.workload)}
    missing = [i for i in held_out if i not in by_id]
    if missing:
        raise AutotuneError(f"{args.config}: held-out prompt {missing[0]!r} is not in "
                            f"{args.workload}; give --workload/--prompts to measure on others")
    return [by_id[i] for i in held_out]


def _refuse_before_loading(args: argparse.Namespace, config: Any, measure_in: str,
                           batch_size: int | None, n_prompts: int) -> None:
    """One-line refusals of what cannot run here (--batch-size, --in, --replay), while
    nothing heavy has loaded yet."""
    if batch_size is not None:
        _check_batched(args, config, measure_in, n_prompts)
    if measure_in != "autotune":
        if args.replay or args.trace:
            raise AutotuneError(f"--in {measure_in} decodes in the engine: --replay and "
                                "--trace read autotune's decoder only")
        from autotune.backends import unavailable
        why = unavailable(measure_in, args.model, args.draft)
        if why is not None:
            raise AutotuneError(f"--in {measure_in}: it cannot measure here: {why}")
    if args.replay:
        from autotune.replay import replay_refusal
        reason = replay_refusal(config)
        if reason is not None:
            raise AutotuneError(f"--replay: {reason}")


def _with_later_turns(args: argparse.Namespace, target: Any, prompts: list[Any]) -> list[Any]:
    """`--turns all`: each multi-turn prompt followed by its later turns, the earlier
    ones answered by the target's own greedy decode."""
    from autotune.measure.conversations import with_later_turns

    def answered(done: int, total: int) -> None:
        print(f"autotune: answering earlier turns {done}/{total}", file=sys.stderr,
              flush=True)

    return with_later_turns(target, prompts, args.max_new_tokens, answered)


def _open_measure_backend(args: argparse.Namespace, config: Any, measure_in: str,
                          target: Any, draft: Any, prompts: list[Any]) -> Any:
    """`--in ENGINE`: the engine's backend, sized for `prompts`."""
    from autotune.backends import open_backend
    # At concurrency > 1 (llama-server): the workload's other prompts, never timed,
    # are served beside the timed ones.
    companions = ([p for p in load_workload(args.workload, _categories(args))
                   if p.prompt_id not in {q.prompt_id for q in prompts}]
                  if config.concurrency > 1 else [])
    backend = open_backend(measure_in, target, draft, args.model, prompts,
                           args.max_new_tokens, companions, args.draft)
    print(f"autotune: measuring in {backend.label}", file=sys.stderr, flush=True)
    return backend


def _measure_plain(args: argparse.Namespace, config: Any, target: Any, draft: Any,
                   prompts: list[Any], backend: Any) -> int:
    """A plain config (not frozen) against the AR baseline, one line per prompt."""
    from autotune.measure.measurement import measure

    def progress(index: int, run: Any, so_far: Any) -> None:
        print(f"[{index + 1}/{len(prompts)}] {run.prompt_id} ({run.category}): "
              f"{len(run.candidate.tokens)} tokens", file=sys.stderr, flush=True)

    result = measure(target, config, prompts, args.max_new_tokens, args.seed, draft,
                     on_prompt=progress, backend=backend)
    summary = result.record()
    if args.trace:
        write_atomically(Path(args.trace), json.dumps(result.traces()))
    print(json.dumps(summary.to_json()) if args.json else format_summary(summary))
    return 0


def _check_batched(args: argparse.Namespace, config: Any, measure_in: str,
                   n_prompts: int) -> None:
    """One-line refusals for `--batch-size` before any model loads."""
    if args.batch_size < 1:
        raise AutotuneError("--batch-size must be at least 1")
    for flag, given in (("--in", measure_in != "autotune"), ("--replay", args.replay),
                        ("--trace", bool(args.trace))):
        if given:
            raise AutotuneError(f"--batch-size runs autotune's batched decoder; it does not "
                                f"combine with {flag}")
    if config.is_tree:
        raise AutotuneError("--batch-size drafts chains only: a draft tree "
                            "(tree_width > 0) runs at batch size 1")
    if n_prompts < args.batch_size:
        raise AutotuneError(f"--batch-size {args.batch_size} needs at least "
                            f"{args.batch_size} prompts; the workload gives {n_prompts}")


def _measure_batched(args: argparse.Namespace, config: Any, target: Any, draft: Any,
                     prompts: list[Any], batch_size: int) -> int:
    """`--batch-size B`: throughput against batched AR at the same B, batch by batch."""
    from autotune.measure.batched import measure_batched

    def progress(index: int, run: Any) -> None:
        print(f"[batch {index + 1}] {run.batch_id}: {run.candidate.decoded} tokens",
              file=sys.stderr, flush=True)

    result = measure_batched(target, config, prompts, batch_size, args.max_new_tokens,
                             args.seed or 0, draft, on_batch=progress)
    summary = result.summary()
    print(json.dumps(summary) if args.json else format_batched_summary(summary))
    return 0


def format_batched_summary(figures: Mapping[str, Any]) -> str:
    """The text of `autotune measure --batch-size`: one `key  value` row per figure.
    `figures`: `BatchMeasurement.summary()`, a measurement's summary with the batch's
    own figures (throughput, batches) beside the usual ones."""
    summary = MeasurementSummary.of(figures)
    rows = [_config_row(summary), *_figure_rows(summary, (
        "batch_size", "batches", "prompts", "unused_prompts", "tokens_per_s",
        "ar_tokens_per_s", "speedup", "latency_ms_per_token",
        "baseline_latency_ms_per_token", "mean_accepted_tokens", "acceptance_rate",
        "mean_verify_width", "lossless"))]
    rows += _lossless_rows(summary)
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _replay(args: argparse.Namespace, config: Any, target: Any, draft: Any,
            prompts: list[Any]) -> int:
    """`--replay`: the same keys as a measurement, predicted by the replay tier."""
    from autotune.replay import PARTS_FILE
    from autotune.replay.reference import cache_dir
    from autotune.replay.run import Replayer

    replayer = Replayer(target, draft, prompts, args.max_new_tokens, cache_dir() / PARTS_FILE)
    reason = replayer.can_replay(config)
    if reason is not None:
        raise AutotuneError(f"--replay: {reason}")
    summary = replayer.summary(config)
    if args.trace:
        write_atomically(Path(args.trace), json.dumps(replayer.replay(config).traces()))
    print(json.dumps(summary) if args.json else format_summary(summary))
    return 0


def _remeasure(args: argparse.Namespace, doc: FrozenConfig, config: Any, objective: Any,
               target: Any, draft: Any, prompts: list[Any], overridden: list[str],
               backend: Any = None) -> int:
    """Evaluate a frozen config with its objective (repeats and all) and compare."""
    if args.trace:
        raise AutotuneError("--trace is not available with a frozen config; "
                            "use --set to measure its knobs as a plain config")
    print(f"autotune: re-measuring {args.config} with objective {objective.name!r} on "
          f"{len(prompts)} prompts x {args.max_new_tokens} tokens", file=sys.stderr, flush=True)
    context = EvalContext(target=target, draft=draft, prompts=prompts,
                          max_new_tokens=args.max_new_tokens, seed=args.seed, memo={},
                          backend=backend)
    now = evaluate(objective, context, config)
    recorded = _recorded_figures(doc, workload_digest(prompts))
    notes = describe_environment_change(
        doc, model_record(target, args.model), hardware_record(target.device),
        draft=model_record(draft, args.draft) if draft is not None else None,
        prompts_sha256=workload_digest(prompts), prompts_count=len(prompts))
    if overridden:
        notes.append("overridden on the command line: " + ", ".join(overridden))
    violation = objective.violation(now, config)
    if violation:
        notes.append(f"constraint violated now: {violation}")
    rows = comparison_rows(recorded, now, list(objective.metrics))
    if args.json:
        print(json.dumps({"config": args.config, "objective": objective.name,
                          "recorded": recorded.to_json(), "now": now.to_json(),
                          "notes": notes}, default=str))
    else:
        print(format_comparison(rows))
        for note in notes:
            print(f"note: {note}")
    return 0
