# syntax=docker/dockerfile:1
# API image: FastAPI service, `grader students ...` admin commands and the one-shot migration
# (`alembic upgrade head`). Slim on purpose: the project is installed WITHOUT the `grader`
# extra, so torch and triton are absent; api/ and submissions/ never import them, and a web
# process never touches a GPU. Build context: the repository root (see compose.yaml).
# Secrets are never baked in: they arrive at run time from the .env file (env_file).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md build_hooks.py ./
COPY grader/ grader/
COPY api/ api/
COPY submissions/ submissions/
# A non-editable install of the service dependencies only (no grader extra, so no torch).
RUN pip install --no-cache-dir "./[server]" \
    && if python -c "import torch" 2>/dev/null; then echo "torch leaked into the API image" >&2; exit 1; fi

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 grader \
    && useradd --system --uid 10001 --gid grader --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin grader
COPY --from=build /opt/venv /opt/venv
# `alembic upgrade head` runs from here: alembic.ini and the migration scripts live beside
# each other, the installed packages come from /opt/venv (no source tree shadows them).
WORKDIR /app
COPY alembic.ini ./
COPY alembic/ alembic/
USER 10001:10001
EXPOSE 8000
CMD ["grader", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers-embedded", "0"]
