# trtllm-spec images (build from the repository root; docs/docker.md has the run commands):
#   docker build --target serve -t trtllm-spec:serve .   # TensorRT-LLM release image + trtllm-spec
#   docker build --target train -t trtllm-spec:train .   # PyTorch + ModelOpt 0.47.0 for drafter training
# Base images and versions are build arguments, e.g. --build-arg TRTLLM_IMAGE=nvcr.io/nvidia/tensorrt-llm/release:1.2.1
# for TensorRT-LLM 1.2 bundles (the image of each release profile: trtllm_spec/core/releases.py).
# Needs BuildKit (Docker's default builder since 23.0). pip settings for a private index or a TLS-intercepting
# proxy go in as build secrets, used by each pip step and never stored in a layer:
#   --secret id=pip.conf,src=FILE (read as PIP_CONFIG_FILE) and --secret id=pip-ca.crt,src=CA_BUNDLE (for its
#   `cert = /run/secrets/pip-ca.crt`); scripts/docker_check.sh builds all targets that way on stand-in bases.

# TensorRT-LLM 1.3.0rc27: the image of the release a default build's bundle is for (engine.trtllm_version: auto
# resolves to 1.3, the newest stable profile; trtllm_spec/core/releases.py). 1.2 bundles: release:1.2.1
ARG TRTLLM_IMAGE=nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc27
ARG PYTORCH_IMAGE=pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime
ARG PYTHON_IMAGE=python:3.12-slim

# ---- wheel: build trtllm-spec (pure Python) once for both targets -------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY trtllm_spec ./trtllm_spec
RUN --mount=type=secret,id=pip.conf --mount=type=secret,id=pip-ca.crt \
    PIP_CONFIG_FILE=/run/secrets/pip.conf pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# ---- serve: NVIDIA's TensorRT-LLM release image with trtllm-spec added ---------------------------------
FROM ${TRTLLM_IMAGE} AS serve
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Every package already in the image stays at its version (constraints from pip freeze), so TensorRT-LLM's
# own pins, nvidia-modelopt~=0.37 among them, are untouched; only trtllm-spec's missing dependencies are added.
RUN --mount=type=bind,from=wheel,source=/dist,target=/tmp/dist \
    --mount=type=secret,id=pip.conf --mount=type=secret,id=pip-ca.crt \
    pip freeze | grep -v -e ' @ ' -e '^-e ' > /tmp/constraints.txt \
    && PIP_CONFIG_FILE=/run/secrets/pip.conf pip install --no-cache-dir --constraint /tmp/constraints.txt /tmp/dist/*.whl \
    && rm -f /tmp/constraints.txt \
    && useradd --create-home --no-log-init --uid 10001 --shell /bin/bash spec \
    && mkdir -p /cache/huggingface /cache/trtllm-spec /bundle \
    && chown -R spec:spec /cache /bundle
ENV HF_HOME=/cache/huggingface TRTLLM_SPEC_CACHE=/cache/trtllm-spec
USER 10001
WORKDIR /bundle
ENTRYPOINT ["trtllm-spec"]
CMD ["--help"]

# ---- train: PyTorch with trtllm-spec[train,triton] and ModelOpt 0.47.0 (build checks its Triton repository)
# ModelOpt is pinned here, apart from the serve image: TensorRT-LLM 1.2/1.3 pin nvidia-modelopt~=0.37
# (their requirements.txt) while drafter training needs 0.47.0. Keep MODELOPT_VERSION equal to the pin of
# the `train` extra in pyproject.toml.
FROM ${PYTORCH_IMAGE} AS train
ARG MODELOPT_VERSION=0.47.0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# DL3013 ignored: the unpinned-looking argument is the local trtllm-spec wheel built above (with its `train`
# extra); its version comes from this build context and its dependencies are pinned in pyproject.toml.
# hadolint ignore=DL3013
RUN --mount=type=bind,from=wheel,source=/dist,target=/tmp/dist \
    --mount=type=secret,id=pip.conf --mount=type=secret,id=pip-ca.crt \
    wheel_file="$(ls /tmp/dist/*.whl)" \
    && PIP_CONFIG_FILE=/run/secrets/pip.conf pip install --no-cache-dir "${wheel_file}[train,triton]" "nvidia-modelopt==${MODELOPT_VERSION}" \
    && useradd --create-home --no-log-init --uid 10001 --shell /bin/bash spec \
    && mkdir -p /cache/huggingface /cache/trtllm-spec /work \
    && chown -R spec:spec /cache /work
ENV HF_HOME=/cache/huggingface TRTLLM_SPEC_CACHE=/cache/trtllm-spec
USER 10001
WORKDIR /work
ENTRYPOINT ["trtllm-spec"]
CMD ["--help"]
