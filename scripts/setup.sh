#!/usr/bin/env bash
# Create .venv and install trtllm-spec with its extras.   Usage: scripts/setup.sh [--dev]
#
# torch is installed first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
# On machines without the local CPU wheel, point TORCH_SPEC at PyTorch's CPU index, e.g.
#   TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# shellcheck disable=SC2086
.venv/bin/python -m pip install -q ${TORCH_SPEC:-torch==2.13.0}
extras="train,triton"
# --dev adds the test tools and the llama.cpp server (serve extra) the openai backend's tests run for real
if [ "${1:-}" = "--dev" ]; then extras="$extras,dev,serve"; fi
# llama-cpp-python compiles llama.cpp from its sdist. Not with -march=native: on a VM whose CPU reports AMX but
# traps its instructions (seen here: SIGILL at tileloadd in libggml-cpu on the first prompt of several tokens) a
# native build crashes, so build for x86-64-v3 (AVX2/FMA/F16C, what both CPU kinds here run); CMAKE_ARGS overrides.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
.venv/bin/python -m pip install -q -e ".[$extras]"
echo "trtllm-spec installed in .venv ($(.venv/bin/trtllm-spec --version))"
