"""Draft & Verify (Zhang et al., ACL 2024; github.com/dilab-zju/self-speculative-decoding).

Writes the repository's `skip_layers.json` shape keyed by the model id, with its
decoding arguments under `generate_kwargs`; its rules are autotune's.
What was read upstream, where (versions, commits, files, line references):
docs/engines/dv.md; the versions and commits are `PROVENANCE["dv"]` in
autotune/schema/engines.py.
"""

from __future__ import annotations

from typing import TypedDict

from autotune.exports._common import (
    ExportOptions,
    Loss,
    Source,
    chain_only_tree_loss,
    dump_json,
    effective_policy,
    engine_methods,
    fenced,
    method_loss,
    rules_loss,
)

NAME = "dv"
RULES = "autotune"      # the repository drafts and verifies as our decoder does
FILE = "dv.json"
# Draft & Verify's one drafter: the target skipping attention/MLP sublayers.
METHODS = engine_methods("layer_skip")


def check(src: Source) -> list[Loss]:
    losses = [
        method_loss(src, METHODS,
                    "Draft & Verify drafts by skipping the target's attention/MLP sublayers "
                    "only"),
    ]
    if effective_policy(src) == "heuristic":
        losses.append(Loss("exit_policy=heuristic", (),
                           "Draft & Verify has no K schedule; exported as fixed "
                           f"max_step_draft={src.cfg.k}"))
    losses.append(chain_only_tree_loss(src, "Draft & Verify drafts one chain per round, no "
                                            "tree"))
    losses.append(rules_loss(src, RULES))
    return [loss for loss in losses if loss is not None]


class GenerateKwargs(TypedDict, total=False):
    """Keyword arguments of the repo's `exact_self_speculative_generate` / sampling twin
    (the JSON its runner passes through: the interface is that repo's function)."""

    max_step_draft: int
    th_stop_draft: float
    auto_th_stop_draft: bool
    auto_parameters: list[float]
    do_sample: bool
    do_sample_draft: bool
    temperature: float
    top_p: float
    top_k: int


def generate_kwargs(src: Source) -> GenerateKwargs:
    """Keyword arguments of the repo's `exact_self_speculative_generate` / sampling twin."""
    cfg = src.cfg
    policy = effective_policy(src)
    # A threshold of 0 never stops a draft early: that is a fixed K.
    threshold = cfg.gamma if policy in ("confidence", "adaptive") else 0.0
    out: GenerateKwargs = {
        "max_step_draft": src.shape.chain_length,
        "th_stop_draft": threshold,
        "auto_th_stop_draft": policy == "adaptive",
    }
    if policy == "adaptive":
        out["auto_parameters"] = [1, cfg.beta1, cfg.target_acceptance, cfg.epsilon, cfg.beta2]
    if cfg.greedy:
        out["do_sample"] = False
    else:
        # top_k 0 turns the repo's top-k filter off, leaving top-p as the only filter.
        # Our drafts are sampled too (do_sample_draft), from the same filtered distribution.
        out.update({"do_sample": True, "do_sample_draft": True, "temperature": cfg.temperature,
                    "top_p": cfg.top_p, "top_k": 0})
    return out


def render(src: Source, options: ExportOptions) -> dict[str, str]:
    cfg = src.cfg
    entry = {
        "attention": list(cfg.attn_skip),
        "mlp": list(cfg.mlp_skip),
        # essg: exact (greedy) self-speculative generation; sss: its sampling version.
        "generate_fn": "essg" if cfg.greedy else "sss",
        "generate_kwargs": generate_kwargs(src),
    }
    return {FILE: dump_json({src.model_id: entry})}


def launch(src: Source, files: dict[str, str]) -> str:
    lines = [
        "# In a checkout of github.com/dilab-zju/self-speculative-decoding (its",
        "# modeling_llama.LlamaForCausalLM and decoding.py), from this exports folder:",
        "import json",
        "from transformers import AutoTokenizer",
        "from modeling_llama import LlamaForCausalLM",
        "from decoding import generate_fn_mapping",
        "",
        f"entry = json.load(open({FILE!r}))[{src.model_id!r}]",
        f"tokenizer = AutoTokenizer.from_pretrained({src.target!r})",
        f"model = LlamaForCausalLM.from_pretrained({src.target!r})",
        'model.set_skip_layers(entry["attention"], entry["mlp"])',
        'input_ids = tokenizer("Hello", return_tensors="pt").input_ids',
        'output = generate_fn_mapping[entry["generate_fn"]](',
        "    model, tokenizer, input_ids, max_new_tokens=128, early_stop=True,",
        '    **entry["generate_kwargs"])',
        'print(tokenizer.decode(output["generate_ids"][0], skip_special_tokens=True))',
    ]
    # The repository's decoding.py (L5, PROVENANCE["dv"]) imports top_k_top_p_filtering,
    # which transformers 5.x no longer has; its ssd.yml (same commit) pins 4.33.1.
    return (fenced("\n".join(lines), "python")
            + f"\n{FILE} has the shape of the repository's skip_layers.json (its loader "
            "reads only \"attention\" and \"mlp\"); generate_kwargs carry the tuned "
            "threshold, draft length and sampling.\n"
            + "\nRun it in the repository's own environment, not autotune's: its "
            "decoding.py imports `top_k_top_p_filtering` from transformers (L5), which "
            "transformers 5.x no longer has, so it fails to import there; the "
            "repository's ssd.yml pins `transformers==4.33.1` (with torch 1.13.1).\n")
