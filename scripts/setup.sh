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
if [ "${1:-}" = "--dev" ]; then extras="$extras,dev"; fi
.venv/bin/python -m pip install -q -e ".[$extras]"
echo "trtllm-spec installed in .venv ($(.venv/bin/trtllm-spec --version))"
# --dev also builds llama.cpp's native llama-server once (cached under the trtllm-spec cache per CPU; a few
# minutes on 2 cores the first time): the tests' real OpenAI-compatible server and the second engine
if [ "${1:-}" = "--dev" ]; then .venv/bin/trtllm-spec assets build-llamacpp; fi
