"""Hugging Face transformers: a `generation_config.json` for assisted generation.

Field names from transformers' GenerationConfig (src/transformers/generation/
configuration_utils.py, checked against transformers 5.23): `num_assistant_tokens`,
`num_assistant_tokens_schedule` ("constant" | "heuristic" | "heuristic_transient"),
`assistant_confidence_threshold`, `prompt_lookup_num_tokens`, `max_matching_ngram_size`,
`assistant_early_exit`, `do_sample`, `temperature`, `top_p`. Behaviour from
generation/candidate_generator.py of the same version.

The draft model itself is not part of a generation config: pass it to
`generate(assistant_model=...)`. Prompt lookup ignores the assistant-token schedule and
the confidence threshold, so only a fixed k is expressible for n-grams.

Draft trees: assisted generation verifies one chain of candidate tokens per round (every
CandidateGenerator.get_candidates in generation/candidate_generator.py, 5.23, returns one
candidate sequence; no GenerationConfig field describes a tree), so a tree of more than one
path is a loss, dropped under `lossy` to its best path: num_assistant_tokens = the tree's
depth.
"""

from __future__ import annotations

from typing import Any

from autotune.exports._common import (
    Loss,
    Source,
    chain_only_tree_loss,
    dump_json,
    effective_policy,
    engine_methods,
    method_knobs,
    method_loss,
    policy_knobs,
)

NAME = "hf"
FILE = "hf/generation_config.json"
# transformers' candidate generators autotune measures: an assistant model, the target's
# own first layers (assistant_early_exit), prompt lookup.
METHODS = engine_methods("draft_model", "sorted_exit", "ngram")


def check(src: Source) -> list[Loss]:
    cfg = src.cfg
    losses: list[Loss] = []
    unsupported = method_loss(src, METHODS,
                              "transformers drafts with an assistant model, the target's own "
                              "first layers (early exit) or prompt lookup; it cannot skip "
                              "single attention/MLP sublayers in an assistant pass")
    if unsupported is not None:
        return [unsupported]
    if src.spec.stack_role(src.draft is not None) == "draft":
        # assistant_early_exit truncates the target itself, never a separate draft model.
        return [Loss(f"method={cfg.method}", (*method_knobs(src.spec), "draft"),
                     "transformers' early exit runs the target's own first layers, not a "
                     "separate draft model", fatal=True)]
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
        losses.append(Loss("exit_policy=adaptive",
                           tuple(k for k in policy_knobs("adaptive") if k not in kept),
                           "transformers has no adaptive γ rule; exported as a confidence "
                           f"threshold fixed at γ0 (assistant_confidence_threshold="
                           f"{cfg.gamma})"))
    tree = chain_only_tree_loss(src, "transformers' assisted generation verifies one chain "
                                     "of candidates, no tree")
    if tree is not None:
        losses.append(tree)
    return losses


def generation_config(src: Source) -> dict[str, Any]:
    """The generation-config mapping (plain JSON values), after lossy fallbacks."""
    cfg = src.cfg
    out: dict[str, Any] = {}
    # Sampling belongs to the workload, but a generation config carries it: keep it
    # consistent with what was tuned (greedy leaves temperature/top_p unset, which
    # strict validation requires).
    if cfg.greedy:
        out["do_sample"] = False
    else:
        out.update({"do_sample": True, "temperature": cfg.temperature, "top_p": cfg.top_p})
    if cfg.method == "ngram":
        out["prompt_lookup_num_tokens"] = cfg.k
        out["max_matching_ngram_size"] = cfg.ngram_max
        return out
    if cfg.method == "sorted_exit":
        out["assistant_early_exit"] = cfg.exits[-1] if len(cfg.exits) > 1 else cfg.exits[0]
    out["num_assistant_tokens"] = src.shape.chain_length
    policy = effective_policy(src)
    # Our heuristic schedule restarts from k for every prompt; "heuristic" would carry K
    # over between generate() calls on the same assistant, "heuristic_transient" resets.
    out["num_assistant_tokens_schedule"] = (
        "heuristic_transient" if policy == "heuristic" else "constant")
    if policy in ("confidence", "adaptive"):
        # Note: with a separate draft model and scikit-learn installed, transformers
        # re-tunes this threshold from an ROC curve as it goes; γ is its starting point.
        out["assistant_confidence_threshold"] = cfg.gamma
    return out


def render(src: Source, options: dict[str, Any]) -> dict[str, str]:
    return {FILE: dump_json(generation_config(src))}
