"""Logits to probabilities with temperature and top-p, the same for target and draft."""

from __future__ import annotations

import torch


def probabilities(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Softmax of logits [..., V] in float32 after temperature and nucleus (top-p) filtering.

    temperature == 0 means greedy and is treated as temperature 1 here (the greedy path
    uses these only for confidences). top_p keeps the smallest set of tokens whose mass
    reaches top_p, renormalised.
    """
    logits = logits.float()
    if temperature > 0.0:
        logits = logits / temperature
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
