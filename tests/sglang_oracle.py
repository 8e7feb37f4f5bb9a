"""SGLang's own NGRAM corpus as a test oracle: its C++ sources from the sglang wheel
(`sglang/kernels/jit/csrc/ngram_corpus/`, built just in time by SGLang itself),
compiled here with a C shim (oracles/sglang_ngram_shim.cpp) and driven through ctypes.

The sources come from $AUTOTUNE_SGLANG_NGRAM_SRC (a folder holding them), else from a
sglang wheel pip downloads (`pip download sglang==0.5.23 --no-deps`); without either
the tests that need it skip, unless $AUTOTUNE_REQUIRE_SGLANG is set (CI sets it)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

VERSION = "0.5.23"
INSIDE = "sglang/kernels/jit/csrc/ngram_corpus/"
SOURCES = ("result.cpp", "trie.cpp", "suffix_automaton.cpp", "ngram.cpp")
SHIM = Path(__file__).parent / "oracles" / "sglang_ngram_shim.cpp"


def _cache() -> Path:
    root = Path(os.environ.get("AUTOTUNE_CACHE", Path.home() / ".cache" / "autotune"))
    return root / "oracles" / f"sglang-{VERSION}"


def _sources() -> Path | None:
    given = os.environ.get("AUTOTUNE_SGLANG_NGRAM_SRC")
    if given:
        return Path(given)
    folder = _cache() / "ngram_corpus"
    if (folder / "trie.cpp").exists():
        return folder
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                               "--quiet", "-d", tmp, f"sglang=={VERSION}"],
                              capture_output=True, text=True)
        wheels = list(Path(tmp).glob("sglang-*.whl"))
        if done.returncode != 0 or not wheels:
            return None
        staging = folder.with_name("ngram_corpus.partial")
        staging.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.startswith(INSIDE) and not name.endswith("/"):
                    (staging / name[len(INSIDE):]).write_bytes(wheel.read(name))
        staging.rename(folder)
    return folder


def _unavailable(why: str) -> None:
    if os.environ.get("AUTOTUNE_REQUIRE_SGLANG"):
        pytest.fail(f"SGLang's NGRAM oracle is required here: {why}")
    pytest.skip(f"SGLang's NGRAM oracle: {why}")


def load_oracle() -> ctypes.CDLL:
    """The compiled oracle library (built once per source version, cached)."""
    src = _sources()
    if src is None or not all((src / name).exists() for name in SOURCES):
        _unavailable(f"no sglang {VERSION} NGRAM sources (pip download failed)")
    assert src is not None
    digest = hashlib.sha256(b"".join((src / n).read_bytes() for n in SOURCES)
                            + SHIM.read_bytes()).hexdigest()[:16]
    library = _cache() / f"ngram_oracle-{digest}.so"
    if not library.exists():
        library.parent.mkdir(parents=True, exist_ok=True)
        partial = library.with_suffix(".partial")
        built = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread",
                                "-I", str(src), str(SHIM),
                                *[str(src / n) for n in SOURCES], "-o", str(partial)],
                               capture_output=True, text=True)
        if built.returncode != 0:
            _unavailable(f"g++ failed: {built.stderr.strip().splitlines()[-1:]}")
        partial.rename(library)
    lib = ctypes.CDLL(str(library))
    lib.oracle_new.restype = ctypes.c_void_p
    lib.oracle_new.argtypes = [ctypes.c_int64] * 6
    lib.oracle_free.argtypes = [ctypes.c_void_p]
    lib.oracle_insert.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32),
                                  ctypes.c_int64]
    lib.oracle_match.argtypes = [ctypes.c_void_p, ctypes.c_int64,
                                 ctypes.POINTER(ctypes.c_int32), ctypes.c_int64,
                                 ctypes.c_int64, ctypes.POINTER(ctypes.c_int32),
                                 ctypes.POINTER(ctypes.c_uint8)]
    lib.oracle_erase.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    return lib


class OracleCorpus:
    """SGLang's `Ngram` (one trie, no external corpus) through the shim."""

    def __init__(self, lib: ctypes.CDLL, capacity: int, depth: int, min_breadth: int,
                 max_breadth: int, draft_token_num: int, match_type: str) -> None:
        self.lib, self.n = lib, draft_token_num
        self.ptr = lib.oracle_new(capacity, depth, min_breadth, max_breadth,
                                  draft_token_num, int(match_type == "PROB"))

    def insert(self, tokens: list[int]) -> None:
        array = (ctypes.c_int32 * len(tokens))(*tokens)
        self.lib.oracle_insert(self.ptr, array, len(tokens))

    def draft(self, state: int, tail: list[int], total: int) -> tuple[list[int], list[int]]:
        """(tokens, parents): the root then N-1 nodes, each node's parent index (the
        nearest ancestor in the mask, as SGLang's worker derives it)."""
        array = (ctypes.c_int32 * len(tail))(*tail)
        tokens = (ctypes.c_int32 * self.n)()
        mask = (ctypes.c_uint8 * (self.n * self.n))()
        self.lib.oracle_match(self.ptr, state, array, len(tail), total, tokens, mask)
        parents = []
        for i in range(1, self.n):
            parents.append(max(j for j in range(i) if mask[i * self.n + j]))
        return list(tokens), parents

    def erase(self, state: int) -> None:
        self.lib.oracle_erase(self.ptr, state)

    def close(self) -> None:
        if self.ptr:
            self.lib.oracle_free(self.ptr)
            self.ptr = None
