"""Shared fixtures: the real default model (loaded once per session) and real prompts."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from autotune.models.llama import LlamaForward
from autotune.models.loading import LoadedModel, load_model
from autotune.workloads.prompts import Prompt, load_workload


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private AUTOTUNE_CACHE (references, `measure --replay`'s cost parts)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("AUTOTUNE_CACHE", str(folder))
    return folder


def real_prompts(limit: int) -> list[Prompt]:
    """Spec-Bench prompts (the copy autotune ships), round-robin across categories."""
    return load_workload("spec_bench", limit=limit)


@pytest.fixture(scope="session")
def default_model() -> LoadedModel:
    return load_model("default", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def truncated_draft(default_model: LoadedModel) -> LoadedModel:
    """A separate, smaller draft: a copy of the default model's first 10 layers + head.

    No second small model with the same vocabulary exists offline; a truncated copy is
    a real draft with its own weights and cache whose distribution differs from the
    target's, so rejections happen.
    """
    hf = copy.deepcopy(default_model.hf_model)
    hf.model.layers = hf.model.layers[:10]
    hf.config.num_hidden_layers = 10
    return LoadedModel(name="smollm2-first10", path="(in memory)", hf_model=hf,
                       tokenizer=default_model.tokenizer, forward=LlamaForward(hf),
                       device=torch.device("cpu"), dtype=torch.float32)
