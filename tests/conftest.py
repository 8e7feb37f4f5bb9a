"""Shared fixtures: the real default model (loaded once per session) and real prompts."""

from __future__ import annotations

import copy
import os
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


# ------------------------------------------------------------ parallel workers
# The suite runs on pytest-xdist workers (pyproject's addopts: one per core, whole files
# per worker so module fixtures are built once). Each worker gets one torch thread, and
# so do the CLI children it starts (OMP_NUM_THREADS is inherited): two workers with two
# threads each on two cores spin against each other and run several times slower.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

# Files that take minutes, started first so that no worker is left with a long file
# while the other idles at the end. Worker seconds per file in a full run on 2 cores
# (2026-11-26, a loaded machine): lossless_real 836, hf_client 332, search_cli 259,
# llama_draft 169, replay_exact 150, sampling_e2e 76, llama_ngram 57, llama_server 48,
# wheel 46, train_cli 40; every other file under 25. The rest keep their order.
_LONG_FIRST = ("test_lossless_real.py", "test_hf_client.py", "test_search_cli.py",
               "test_llama_draft.py", "test_replay_exact.py", "test_sampling_e2e.py",
               "test_llama_ngram.py", "test_llama_server.py", "test_wheel.py",
               "test_train_cli.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(_LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
