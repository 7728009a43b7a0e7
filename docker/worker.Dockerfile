# syntax=docker/dockerfile:1
# GPU worker image: `grader worker` claims jobs from PostgreSQL and grades each submission in a
# bubblewrap sandbox. CUDA PyTorch base (it already carries torch and the matching triton),
# plus bubblewrap, a C toolchain for Triton, and this project with the `[grader]` extra.
# Build context: the repository root (see compose.yaml). No secret is baked in.
#
# The base is pinned by tag; bump BASE_IMAGE and TORCH_VERSION together. compose.cpu.yaml
# builds the same file on python:3.11-slim with the CPU wheel of torch instead (laptops, no GPU).
ARG BASE_IMAGE=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ARG TORCH_VERSION=2.7.1
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DEBIAN_FRONTEND=noninteractive

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# bubblewrap: the per-submission sandbox (`bwrap --unshare-all`, scrubbed env, ro binds).
# gcc + libc6-dev: Triton compiles a small C launcher the first time a kernel runs, at run
#   time, inside the sandbox too; the base image has no compiler.
# Versions come from the base image's distribution release (pinned by the tag above).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && bwrap --version && cc --version | head -n 1 \
    && bwrap --help 2>&1 | grep -- --size >/dev/null  # the grader sizes its tmpfs (bwrap >= 0.6)

# The CUDA base already has torch (and the triton it was built with); a CPU base gets the CPU
# wheel. Then pin whatever torch/triton are present so that installing the project can never
# swap them for another build from PyPI.
RUN python -c "import torch" 2>/dev/null \
    || pip install --no-cache-dir --index-url "${TORCH_CPU_INDEX}" "torch==${TORCH_VERSION}"
RUN pip list --format=freeze | grep -E '^(torch|triton)==' > /tmp/pins.txt && cat /tmp/pins.txt

WORKDIR /src
COPY pyproject.toml README.md build_hooks.py ./
COPY grader/ grader/
COPY api/ api/
COPY submissions/ submissions/
RUN KERNEL_GRADER_BUNDLE_REFERENCE=1 pip install --no-cache-dir --constraint /tmp/pins.txt ".[server,grader]" \
    && python -c "import torch, triton, grader; print('torch', torch.__version__, 'triton', triton.__version__)" \
    && rm -rf /src /tmp/pins.txt

RUN groupadd --system --gid 10001 grader \
    && useradd --system --uid 10001 --gid grader --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin grader
# The container root is read-only (compose.yaml); every cache goes to the /tmp tmpfs.
# The grader gives each sandboxed child its own private Triton cache on top of this.
ENV HOME=/tmp/home \
    XDG_CACHE_HOME=/tmp/cache \
    TRITON_HOME=/tmp/triton \
    TRITON_CACHE_DIR=/tmp/triton/cache \
    TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor \
    CUDA_CACHE_PATH=/tmp/nv-compute-cache
WORKDIR /tmp
USER 10001:10001
CMD ["grader", "worker"]
