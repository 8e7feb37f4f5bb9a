"""The summary block at the top of the page: the config the run recommends
(`validation.answer`), how much faster than plain autoregressive decoding it ran (the
validated figure with its interval beside the search's own, or "do not speculate", or the
search's figure called "not validated"), the batch-size schedule in one line when best.json
carries one, and where it was measured (HTML, no figure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState
from pydantic import JsonValue

from autotune.common.records import JsonRecord
from autotune.frozen.record import FrozenConfig
from autotune.records.summary import MeasurementSummary
from autotune.schema.config import KNOBS, DecodeConfig, method_keys
from autotune.schema.engines import ENGINES
from autotune.schema.knobs import WORKLOAD
from autotune.schema.label import describe
from autotune.schema.methods import find_method
from autotune.schema.shape import STATIC, DraftShape
from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.panels.batch_size import PANEL_ID as BATCH_SIZE_PANEL
from autotune.report.documents import RunFacts
from autotune.report.schedule import Schedule, schedule_line
from autotune.report.style import esc, note, num
from autotune.report.trials import (
    DEFAULT_METHOD,
    NO_METRICS,
    ConfigJson,
    complete_trials,
    config_of,
    decoded_config,
    finite,
    metrics_of,
    pick,
    shape_of,
    trial_label,
    trial_method,
    trial_preset,
)
from autotune.report.verdict import NOT_SPECULATING, Verdict, verdict
from autotune.records.trial import BASELINE

# The keys a tree's shape is given by, in the header's order (replacing k and the policy).
_DYNAMIC_KEYS = ("tree_width", "tree_depth", "tree_tokens")
_STATIC_KEYS = ("tree_choices",)
_CHAIN_ONLY_KEYS = ("k", "exit_policy")     # a tree needs exit_policy=fixed; its shape sets the rest

# A config key's value as stored, or the header's text for it (a static tree's size).
KnobJson = JsonValue


@dataclass
class Header:
    """The summary block: the recommended config and where it was measured.

    `best_*` is the recommended config (`validation.answer`: the validated winner, the AR
    baseline for "do not speculate", else the search's best); `best_params` holds only
    the canonical config keys its method reads (plus its exit policy's own knobs).
    `speedup`, `latency_ms_per_token`, `baseline_ms_per_token` are the headline's figures
    (validated ones when validated); `verdict` says what the run recommends and on what
    evidence; `validation` the record's facts as display strings (empty without one).
    `model`, `hardware`, `workload`, `search` are display strings. `schedule`: the
    batch-size schedule in one line (`Batch-size schedule: K=4 at 1–3, off from B=4`),
    None when best.json has none.
    """

    study: str
    objective: str
    best_trial: int | None = None
    best_label: str | None = None
    best_preset: str | None = None
    best_params: dict[str, KnobJson] = field(default_factory=dict)
    best_values: dict[str, float] = field(default_factory=dict)
    speedup: float | None = None
    latency_ms_per_token: float | None = None
    baseline_ms_per_token: float | None = None
    model: dict[str, str] = field(default_factory=dict)
    hardware: dict[str, str] = field(default_factory=dict)
    workload: dict[str, str] = field(default_factory=dict)
    search: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    note: str | None = None
    verdict: Verdict | None = None
    validation: dict[str, str] = field(default_factory=dict)
    schedule: str | None = None


def policy_keys(policy: str) -> tuple[str, ...]:
    """The knobs an exit policy reads (`adaptive`: gamma, target_acceptance, ...)."""
    return tuple(name for name, knob in KNOBS.items() if policy in knob.policies)


def method_params(config: ConfigJson, method: str) -> dict[str, KnobJson]:
    """The keys of `config` (as stored) that matter for its method (all but the
    workload's for a method the registry does not know)."""
    spec = find_method(method)
    if spec is None:
        return {k: v for k, v in config.items() if not (k in KNOBS and KNOBS[k].owner == WORKLOAD)}
    keys = method_keys(spec)
    if keys:
        keys += policy_keys(str(config.get("exit_policy")))
    shape: DraftShape | None = shape_of(config, method)
    if shape is not None and shape.is_tree:
        keys = tuple(k for k in keys if k not in _CHAIN_ONLY_KEYS) + (
            _STATIC_KEYS if shape.kind == STATIC else _DYNAMIC_KEYS)
    out: dict[str, KnobJson] = {"method": method, **{k: config[k] for k in keys if k in config}}
    if shape is not None and shape.kind == STATIC:
        # Up to 255 paths: the header names the tree's size; the exports hold the paths.
        out["tree_choices"] = f"{shape.nodes} paths, depth {shape.levels}"
    return out


def data(study: optuna.Study, objective: ObjectiveInfo, run: RunFacts | None = None,
         best_doc: FrozenConfig | None = None, schedule: Schedule | None = None) -> Header:
    """The header block. The config and its figures come from the study (`verdict`, by
    `validation.answer`; best.json is rebuilt from the same rule, but may be stale);
    model / hardware / workload from best.json, else run.json, else the recommended
    trial's metrics. Missing keys are simply left out. `schedule`: best.json's, read."""
    run, frozen = run or RunFacts(), best_doc or FrozenConfig()
    said = verdict(study, objective, run)
    best = said.trial
    directions = ", ".join(f"{d} {m}" for d, m in zip(objective.directions, objective.metrics))
    head = Header(study=str(run.study or study.study_name),
                  objective=f"{objective.name}: {directions}")
    trials = study.get_trials(deepcopy=False)
    head.counts = {state.name.lower(): n for state in TrialState
                   if (n := sum(t.state == state for t in trials))}
    metrics = NO_METRICS
    config: DecodeConfig | None = None
    if best is not None:
        head.best_trial, head.best_label = best.number, trial_label(best)
        head.best_preset = trial_preset(best)
        head.best_params = method_params(config_of(best), trial_method(best))
        head.best_values = dict(zip(objective.metrics, best.values))
        metrics, config = metrics_of(best), decoded_config(best)
    elif said.status in NOT_SPECULATING:
        # Validation said no and the study holds no AR baseline trial: the answer is
        # still the baseline config.
        head.best_label, head.best_params = "baseline (AR)", {"method": DEFAULT_METHOD}
    elif "config" in frozen.model_fields_set:
        # No trial completed in the study, but best.json holds an answer (a stale one).
        config = frozen.config
        params = config.to_dict()
        head.best_trial = frozen.trial
        head.best_label = frozen.label or describe(params)
        head.best_preset = frozen.provenance.preset if frozen.provenance is not None else None
        head.best_params = method_params(params, config.method)
        if frozen.metrics is not None:
            # best.json's `metrics` are the trial's stored summary.
            metrics = MeasurementSummary.from_json(frozen.metrics.to_json())
    if head.best_trial is None and head.best_label is None:
        head.note = "No trial has completed yet: there is no best config to show."
    if best is not None or said.status in NOT_SPECULATING:
        head.verdict = said
        head.speedup, head.latency_ms_per_token = said.speedup, said.latency_ms_per_token
        head.baseline_ms_per_token = said.baseline_ms_per_token
    else:
        head.speedup = finite(metrics.speedup)
        head.latency_ms_per_token = finite(metrics.latency_ms_per_token)
        head.baseline_ms_per_token = finite(metrics.baseline_latency_ms_per_token)
    head.validation = validation_facts(said)
    if head.baseline_ms_per_token is None:
        # Old or agreement runs: the AR baseline trial's own latency.
        for t in complete_trials(study):
            if trial_preset(t) == BASELINE:
                head.baseline_ms_per_token = finite(metrics_of(t).latency_ms_per_token)
                break
    _where(head, run, frozen, metrics)
    head.schedule = schedule_line(schedule)
    _engine_facts(head, config)
    return head


def _where(head: Header, run: RunFacts, frozen: FrozenConfig, metrics: MeasurementSummary) -> None:
    """Model, hardware, workload and search settings: best.json's records, else run.json's
    facts, else the recommended trial's metrics."""
    head.model = (pick(_json(frozen.model), ("id", "spec", "dtype", "n_layers", "model_type", "sha256"))
                  or pick({"id": run.model or metrics.model, "spec": run.model_spec,
                           "dtype": run.dtype or metrics.dtype,
                           "n_layers": run.n_layers}, ("id", "spec", "dtype", "n_layers")))
    draft_name = (frozen.draft.id if frozen.draft is not None else None) or run.draft or metrics.draft
    if draft_name:
        head.model["draft"] = str(draft_name)
    head.hardware = (pick(_json(frozen.hardware), ("device", "device_name", "cpu", "threads", "cuda",
                                                   "torch", "transformers", "python"))
                     or pick({"device": run.device_type or metrics.device}, ("device",)))
    facts = run.to_json()
    head.workload = (pick(_json(frozen.workload), ("source", "categories", "prompts", "max_new_tokens",
                                                   "temperature", "top_p", "sha256"))
                     or pick({"source": run.workload, **facts}, ("source", "categories", "prompts",
                                                                 "max_new_tokens", "temperature",
                                                                 "top_p")))
    head.search = pick(facts, ("sampler", "seed", "trials", "space", "prune", "updated"))


def _json(part: JsonRecord | None) -> Mapping[str, Any] | None:
    """A best.json part as written (its keys for the header's tables), None without it."""
    return part.to_json() if part is not None else None


def _engine_facts(head: Header, config: DecodeConfig | None) -> None:
    """Whose drafting rules the recommended config was measured under (`--target`), and
    what of that engine our decoder does not reproduce for its method, if anything."""
    if config is None or config.engine not in ENGINES:
        return
    rules = ENGINES[config.engine]
    head.search["rules"] = (f"{rules.label} (--target {rules.name})" if rules.name != "autotune"
                            else "autotune's own decoder (every knob)")
    approximate = rules.approximation(config.method, not config.temperature)
    if approximate and head.note is None:
        head.note = f"Measured approximately as {rules.label} runs it: {approximate}."


def validation_facts(said: Verdict) -> dict[str, str]:
    """The validation record's facts as display strings (empty without a record)."""
    record = said.record
    if record is None:
        return {}
    categories = record.categories
    split = (" (" + ", ".join(f"{k} {v}" for k, v in categories.items()) + ")"
             if categories else "")
    facts = {"status": "current" if said.validated else "stale: not used",
             "decision": record.decision.replace("_", " "),
             "prompts": f"{record.prompts}{split}",
             "repeats": str(record.repeats),
             "source": str(record.source or ""),
             "finalists": str(len(record.finalists)),
             "statistic": record.statistic,
             "created": str(record.created or ""),
             **record.measured_in()}
    return {k: v for k, v in facts.items() if v and v != "None"}


def _config_title(said: Verdict | None) -> str:
    return "Recommended config" if said is not None and said.validated else "Best config"


def _config_line(h: Header) -> str:
    """`Recommended config: <b>label</b> (trial #21, search #1, preset ...)` (HTML)."""
    said = h.verdict
    title = _config_title(said) + (" (search)" if said is not None and not said.validated else "")
    tags = [f"trial #{esc(h.best_trial)}"] if h.best_trial is not None else []
    if said is not None and said.record is not None and said.validated:
        own = said.record.entry(h.best_trial)
        role = own.role if own is not None else None
        if role:
            tags.append(f"finalist {esc(role)}")
    if h.best_preset:
        tags.append(f"preset {esc(h.best_preset)}")
    return (f"{title}: <b>{esc(h.best_label)}</b>"
            + (f" ({', '.join(tags)})" if tags else ""))


def _verdict_line(said: Verdict) -> str:
    """The verdict's headline (HTML), its emphasis drawn bold."""
    text, bold = said.headline, said.emphasis
    if bold and bold in text:
        head, _, tail = text.partition(bold)
        return f"{esc(head)}<b>{esc(bold)}</b>{esc(tail)}"
    return esc(text)


def render(h: Header) -> str:
    """The summary block (HTML, no figure); its heading is the page's title."""
    headline = []
    said = h.verdict
    if said is not None and said.headline:
        headline.append(_verdict_line(said))
    if h.best_label is not None:
        headline.append(_config_line(h))
        figures = []
        if said is None and h.speedup is not None:
            figures.append(f"<b>{h.speedup:.2f}×</b> the AR baseline")
        if h.latency_ms_per_token is not None and not (said is not None and
                                                        said.status in NOT_SPECULATING):
            figures.append(f"{h.latency_ms_per_token:.2f} ms/token")
        if h.baseline_ms_per_token is not None:
            figures.append(f"AR baseline {h.baseline_ms_per_token:.2f} ms/token")
        if figures:
            headline.append(" · ".join(figures))
    if h.schedule:
        # The headline figures are batch size 1's; the schedule says what changes above it.
        headline.append(f'{esc(h.schedule)} (<a href="#panel-{BATCH_SIZE_PANEL}">by batch size</a>)')
    evidence = ""
    if said is not None and said.evidence:
        first, *rest = said.evidence
        evidence = (f'<p class="evidence">{esc(first)}</p><ul class="evidence">'
                    + "".join(f"<li>{esc(line)}</li>" for line in rest) + "</ul>")
    blocks = [(_config_title(said), {k: num(v) for k, v in h.best_params.items()}),
              ("Objective", {"objective": h.objective,
                             **{m: num(v, 4) for m, v in h.best_values.items()}}),
              ("Model", h.model), ("Hardware", h.hardware), ("Workload", h.workload),
              ("Search", {**h.search, **{f"trials {k}": str(v) for k, v in h.counts.items()}})]
    if h.validation:
        blocks.append(("Validation", h.validation))
    dls = []
    for title, items in blocks:
        rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items.items())
        dls.append(f"<div><h3>{esc(title)}</h3><dl>{rows or '<dd>–</dd>'}</dl></div>")
    body = ("".join(f'<p class="headline">{line}</p>' for line in headline) + evidence
            + note(h.note) + f'<div class="summary">{"".join(dls)}</div>')
    return (f'<section class="panel" id="panel-header">\n<h1>autotune report: {esc(h.study)}</h1>\n'
            '<p class="how">The configuration this run recommends, how much faster than plain '
            'autoregressive decoding it ran (re-measured on held-out prompts when validated, '
            'with its 90% interval), and where it was measured.</p>\n'
            f'{body}\n</section>')


PANEL = Panel("header", lambda i: data(i.study, i.objective, i.run, i.best, i.schedule), render)
