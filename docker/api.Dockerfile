# API image: FastAPI service, `grader students ...` admin commands and the one-shot migration
# (`alembic upgrade head`). Slim on purpose: the project is installed WITHOUT the `grader`
# extra, so torch and triton are absent; api/ and submissions/ never import them, and a web
# process never touches a GPU. Build context: the repository root (see compose.yaml).
# Secrets are never baked in: they arrive at run time from the .env file (env_file).
# No `# syntax=` line: BuildKit would pull that frontend from Docker Hub (see worker.Dockerfile).
# PYTHON_IMAGE: docker/compose.local.yaml swaps in a locally built Python for hosts without a registry.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# The project lives in /app as in a checkout, installed in editable mode: submissions/migrations.py
# finds alembic.ini and alembic/ beside its package (REPOSITORY_ROOT), which `grader serve`
# (it migrates at start) and `grader worker` (it waits for the newest revision) need. A plain
# install into site-packages would make that root site-packages, whose alembic/ is the library.
WORKDIR /app
COPY pyproject.toml README.md build_hooks.py alembic.ini ./
COPY alembic/ alembic/
COPY grader/ grader/
COPY api/ api/
COPY submissions/ submissions/
# Served as the page /checks (api/pages/checks_doc.py), which every check on a report links to.
COPY docs/checks.md docs/checks.md
# The service dependencies only (no grader extra, so no torch).
RUN pip install --no-cache-dir -e "./[server]" \
    && if python -c "import torch" 2>/dev/null; then echo "torch leaked into the API image" >&2; exit 1; fi

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 grader \
    && useradd --system --uid 10001 --gid grader --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin grader
COPY --from=build /opt/venv /opt/venv
# `alembic upgrade head` (the migrate service) runs from here: alembic.ini and the migration
# scripts beside the project's packages, which the venv imports from here (editable install).
COPY --from=build /app /app
WORKDIR /app
USER 10001:10001
EXPOSE 8000
CMD ["grader", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers-embedded", "0"]
