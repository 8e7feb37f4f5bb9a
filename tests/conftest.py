"""Shared fixtures: the real default model (loaded once per session) and real prompts."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable, Iterator

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


# ------------------------------------------------------------ AR references
# The default model's greedy AR tokens, decoded once per test run and shared by every
# file that compares against them (tests/lossless.py's files, test_llama_ngram.py): a
# folder of the run's base temp that the pytest-xdist workers share, one file per
# (prompt, max_new_tokens) written under a file lock. Workers that need the same prompts
# split them: a prompt another worker is decoding is taken up last, by then read back.
Reference = Callable[[list[list[int]], int], list[list[int]]]


@pytest.fixture(scope="session")
def ar_reference(default_model: LoadedModel, tmp_path_factory, request) -> Reference:
    from filelock import FileLock, Timeout

    from autotune.schema.config import DecodeConfig
    from autotune.decoding.decoder import SpeculativeDecoder

    root = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):        # a worker: the run's shared folder
        root = root.parent
    folder = root / "ar-references"
    folder.mkdir(exist_ok=True)
    decoder = SpeculativeDecoder(default_model, DecodeConfig())
    memo: dict[str, list[int]] = {}

    def one(key: str, ids: list[int], max_new: int, wait: bool) -> bool:
        path = folder / f"{key}.json"
        try:
            with FileLock(f"{path}.lock", timeout=-1 if wait else 0):
                if not path.exists():
                    tokens = decoder.generate(ids, max_new, time.perf_counter).tokens
                    path.write_text(json.dumps({"prompt": ids, "max_new": max_new,
                                                "tokens": tokens}))
        except Timeout:
            return False
        stored = json.loads(path.read_text())
        assert stored["prompt"] == ids and stored["max_new"] == max_new
        memo[key] = stored["tokens"]
        return True

    def reference(prompts: list[list[int]], max_new: int) -> list[list[int]]:
        keys = [hashlib.sha256(json.dumps([ids, max_new]).encode()).hexdigest()[:20]
                for ids in prompts]
        later = [(key, ids) for key, ids in zip(keys, prompts)
                 if key not in memo and not one(key, ids, max_new, wait=False)]
        for key, ids in later:
            one(key, ids, max_new, wait=True)
        return [list(memo[key]) for key in keys]

    return reference


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

# vLLM's engines take a minute or more each to start and do not run the tiny models, so
# the searches of the suite (`--target all` races an engine in itself where it runs) leave
# vLLM out: its interpreter is named as a path that is no executable. The tests of vLLM
# itself (test_vllm_oracle.py) put the real one back with `real_vllm`.
# The first import (pytest-xdist's controller) keeps what the machine had in a variable
# of its own: the workers it starts inherit the left-out path, not the real one.
if "AUTOTUNE_SUITE_VLLM_PYTHON" not in os.environ:
    os.environ["AUTOTUNE_SUITE_VLLM_PYTHON"] = os.environ.get("AUTOTUNE_VLLM_PYTHON", "")
_REAL_VLLM_PYTHON = os.environ["AUTOTUNE_SUITE_VLLM_PYTHON"] or None
os.environ["AUTOTUNE_VLLM_PYTHON"] = "/nonexistent/vllm-is-left-out-of-the-suite's-searches"


@contextlib.contextmanager
def real_vllm() -> Iterator[None]:
    """vLLM as the machine has it (see above), for the tests of vLLM itself."""
    with pytest.MonkeyPatch.context() as patch:
        if _REAL_VLLM_PYTHON is None:
            patch.delenv("AUTOTUNE_VLLM_PYTHON", raising=False)
        else:
            patch.setenv("AUTOTUNE_VLLM_PYTHON", _REAL_VLLM_PYTHON)
        yield


# The main job races every engine that runs here again in itself after its main race
# (HF's generate() on the real model costs twice our decoder's time per token): the
# suite's searches leave that out, the tests of the races (test_all_engines.py) put it
# back for their own search.
os.environ["AUTOTUNE_ENGINE_RACES"] = "0"


# Files that take minutes, started first (longest first) so that no worker is left with a
# long file while the other idles at the end. Worker seconds per file, one torch thread
# each, on 2 cores (2026-11-27, after the smaller workloads of issue 42 item 6; from each
# file's time alone scaled to the last full run): search_cli ~200, lossless_methods ~165,
# lossless_trees ~155, lossless_real ~155, replay_exact ~135, llama_draft ~120,
# hf_client ~100, sampling_e2e ~76, wheel ~46, train_cli ~40, llama_server ~35,
# llama_ngram ~25; every other file under 25. vllm_oracle (three vLLM engines started,
# eager, one thread each) took 471 s with -n 0 beside four other jobs on the 2 cores.
# The rest keep their order.
_LONG_FIRST = ("test_vllm_oracle.py", "test_search_cli.py", "test_lossless_methods.py",
               "test_lossless_trees.py", "test_lossless_real.py", "test_replay_exact.py", "test_llama_draft.py",
               "test_hf_client.py", "test_sampling_e2e.py", "test_wheel.py",
               "test_train_cli.py", "test_llama_server.py", "test_llama_ngram.py")


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist (3.x) queues the files by their number of tests unless told not to,
    # which would put many short files before the long ones and undo _LONG_FIRST.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(_LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
