"""Hugging Face transformers: generation configs for assisted generation.

Writes `hf/generation_config.json`, `hf/assistant_generation_config.json` (a separate
draft model) and `hf/generate_kwargs.json` (early exit); trees are a loss.
What was read upstream, where (versions, commits, files, line references):
docs/engines/hf.md; the versions and commits are `PROVENANCE["hf"]` in
autotune/schema/engines.py.
"""

from __future__ import annotations

import json
from typing import Any

from autotune.exports._common import (
    ExportOptions,
    Loss,
    Source,
    chain_only_tree_loss,
    dump_json,
    effective_policy,
    engine_methods,
    fenced,
    method_knobs,
    method_loss,
    policy_knobs,
    rules_loss,
)

NAME = "hf"
RULES = "hf"
FOLDER = "hf"
TARGET_FILE = "generation_config.json"
ASSISTANT_FILE = "assistant_generation_config.json"
KWARGS_FILE = "generate_kwargs.json"
FILE = f"{FOLDER}/{TARGET_FILE}"
ASSISTANT = f"{FOLDER}/{ASSISTANT_FILE}"
KWARGS = f"{FOLDER}/{KWARGS_FILE}"
# transformers' candidate generators autotune measures: an assistant model, the target's
# own first layers (assistant_early_exit), prompt lookup.
METHODS = engine_methods("draft_model", "sorted_exit", "ngram")


def check(src: Source) -> list[Loss]:
    cfg = src.cfg
    losses: list[Loss | None] = []
    unsupported = method_loss(src, METHODS,
                              "transformers drafts with an assistant model, the target's own "
                              "first layers (early exit) or prompt lookup; it cannot skip "
                              "single attention/MLP sublayers in an assistant pass",
                              heads="transformers drafts with an assistant model, the "
                                    "target's first layers or prompt lookup; a head over the "
                                    "target's features is none of them (serve it with vLLM "
                                    "or SGLang)")
    if unsupported is not None:
        return [unsupported]
    if src.spec.stack_role(src.draft is not None) == "draft":
        # assistant_early_exit truncates the target itself, never a separate draft model;
        # and it reads the target's own final norm and LM head, so trained exit adapters
        # (a --draft folder of `train-draft --kind exits`) are lost too. The Source names
        # the draft only by its path, so one line covers both.
        return [Loss(f"method={cfg.method}", (*method_knobs(src.spec), "draft"),
                     "transformers' early exit runs the target's own first layers, not a "
                     "separate draft model, and reads the target's own head, not trained "
                     "exit adapters", fatal=True)]
    if cfg.method == "sorted_exit" and len(cfg.exits) > 1:
        losses.append(Loss(f"exits={list(cfg.exits)}", ("thresholds",),
                           "transformers exits at one layer only; exported "
                           f"assistant_early_exit={cfg.exits[-1]} (the deepest exit, which "
                           "always emits)"))
    if cfg.method == "ngram" and cfg.ngram_min > 1:
        losses.append(Loss(f"ngram_min={cfg.ngram_min}", (),
                           "transformers' prompt lookup has no minimum n-gram size; it "
                           "tries max_matching_ngram_size down to 1"))
    policy = effective_policy(src)
    if cfg.method == "ngram" and policy != "fixed":
        losses.append(Loss(f"exit_policy={policy}", policy_knobs(policy),
                           "transformers' prompt lookup always proposes "
                           f"prompt_lookup_num_tokens; exported as fixed k={cfg.k}"))
    elif policy == "adaptive":
        # γ0 survives as the confidence threshold; the rule's other knobs are dropped.
        kept = policy_knobs("confidence")
        if src.spec.needs_draft:
            instead = ("exported as the starting confidence threshold "
                       f"assistant_confidence_threshold={cfg.gamma} (γ0), which "
                       "transformers re-tunes from an ROC curve after every round (with "
                       "scikit-learn installed)")
        else:
            instead = ("exported as a confidence threshold fixed at γ0 "
                       f"(assistant_confidence_threshold={cfg.gamma})")
        losses.append(Loss("exit_policy=adaptive",
                           tuple(k for k in policy_knobs("adaptive") if k not in kept),
                           f"transformers has no adaptive γ rule; {instead}"))
    losses.append(chain_only_tree_loss(src, "transformers' assisted generation verifies one "
                                            "chain of candidates, no tree"))
    losses.append(rules_loss(src, RULES))
    return [loss for loss in losses if loss is not None]


def _sampling(src: Source) -> dict[str, Any]:
    cfg = src.cfg
    # Greedy leaves temperature/top_p unset (strict validation requires it); sampling
    # turns off the default top-k filter (top_k 50), which we never tuned.
    if cfg.greedy:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": cfg.temperature, "top_p": cfg.top_p,
            "top_k": 0}


def _assistant_fields(src: Source) -> dict[str, Any]:
    """What AssistedCandidateGenerator reads from the assistant's generation config."""
    policy = effective_policy(src)
    return {
        "num_assistant_tokens": src.shape.chain_length,
        # Our heuristic schedule restarts from k for every prompt, as
        # "heuristic_transient" does ("heuristic" carries K over between generate calls).
        "num_assistant_tokens_schedule": (
            "heuristic_transient" if policy == "heuristic" else "constant"),
        # 0.0 turns confidence stopping (and the ROC re-tuning) off; unset would be 0.4.
        "assistant_confidence_threshold": (
            src.cfg.gamma if policy in ("confidence", "adaptive") else 0.0),
    }


def generation_configs(src: Source) -> dict[str, dict[str, Any]]:
    """File name -> generation-config mapping (plain JSON values), after the lossy
    fallbacks: the target's always, the assistant's for a separate draft model, the
    generate() arguments for early exit."""
    cfg = src.cfg
    target = _sampling(src)
    if cfg.method == "ngram":
        target["prompt_lookup_num_tokens"] = cfg.k
        target["max_matching_ngram_size"] = cfg.ngram_max
        return {FILE: target}
    if cfg.method == "sorted_exit":
        # The assistant is the target itself: its draft-length fields in the target's
        # file; the exit layer is an argument of generate() (see the module docstring).
        target.update(_assistant_fields(src))
        return {FILE: target, KWARGS: {"assistant_early_exit": cfg.exits[-1]}}
    return {FILE: target, ASSISTANT: _assistant_fields(src)}


def render(src: Source, options: ExportOptions) -> dict[str, str]:
    return {name: dump_json(data) for name, data in generation_configs(src).items()}


def snippet(src: Source, files: dict[str, str]) -> str:
    """Python that loads each generation config onto the model that reads it."""
    lines = [
        *(["import json", ""] if KWARGS in files else []),
        "from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig",
        "",
        "def tuned(name):",
        f"    # {FOLDER}/<name>, from this exports folder",
        f"    return GenerationConfig.from_pretrained({FOLDER!r}, "
        "config_file_name=name).to_diff_dict()",
        "",
        f"tokenizer = AutoTokenizer.from_pretrained({src.target!r})",
        f"model = AutoModelForCausalLM.from_pretrained({src.target!r})",
        f"model.generation_config.update(**tuned({TARGET_FILE!r}))",
    ]
    call = "model.generate(**inputs, max_new_tokens=128)"
    if ASSISTANT in files:
        lines += [
            f"assistant_model = AutoModelForCausalLM.from_pretrained({src.draft!r})",
            "# transformers reads num_assistant_tokens, its schedule and the confidence",
            "# threshold from the assistant's own generation config.",
            f"assistant_model.generation_config.update(**tuned({ASSISTANT_FILE!r}))",
        ]
        call = "model.generate(**inputs, assistant_model=assistant_model, max_new_tokens=128)"
    if KWARGS in files:
        lines += [
            "# The exit layer is an argument of generate(): on model.generation_config the",
            "# draft's own inner generate() would inherit it and draft with early exit too.",
            f"with open({KWARGS!r}) as f:",
            "    early_exit = json.load(f)",
        ]
        call = "model.generate(**inputs, **early_exit, max_new_tokens=128)"
    lines += [
        'inputs = tokenizer("Hello", return_tensors="pt")',
        f"output = {call}",
        "print(tokenizer.decode(output[0], skip_special_tokens=True))",
    ]
    return "\n".join(lines) + "\n"


def launch(src: Source, files: dict[str, str]) -> str:
    target = json.loads(files[FILE])
    sampling = ("greedy (do_sample false)" if not target.get("do_sample") else
                f"temperature {target['temperature']}, top_p {target['top_p']}, top_k 0")
    return (fenced(snippet(src, files), "python")
            + f"\nSampling is in {FILE}: {sampling}.\n")
