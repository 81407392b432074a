#!/usr/bin/env bash
# The GPU check of issue 14 (scripts/gpu/gpu_check.md): <= 10 minutes on one GPU, no network. Tiny random models
# are built on the spot; training (50 bf16 steps on cuda, x2 processes under ddp and fsdp when 2 GPUs are
# visible), regeneration and a lossless measurement each print tokens/s beside the CPU figure.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# --trtllm-forms: inside NVIDIA's TensorRT-LLM container, which bundle forms the installed release reads
# (docs/trtllm_compat.md, "Not settled here"); needs no model and no network
if [ "${1:-}" = "--trtllm-forms" ]; then exec timeout 300 "$PY" scripts/gpu/trtllm_forms.py; fi
exec timeout 600 "$PY" scripts/gpu/gpu_check.py --device cuda "$@"
