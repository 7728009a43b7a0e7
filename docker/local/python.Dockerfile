# Local stand-in for python:3.11-slim-bookworm on a host without a container registry
# (docker/local/build-base-images.sh builds it; docker/compose.local.yaml uses it for the API
# image and the CPU worker image). Debian's own python3.11 from bookworm, no Docker Hub.
#
# The official image's contract that our Dockerfiles rely on: `python` and `pip` on PATH and a
# pip allowed to install (Debian marks its system Python externally managed, PEP 668, so they
# come from a venv at /opt/python), groupadd/useradd (Debian's passwd package, in minbase).
ARG DEBIAN_IMAGE=kernel-grader-base/debian:bookworm-local
FROM ${DEBIAN_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Versions come from Debian bookworm's mirror on the day of the build (the base is bookworm).
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/python \
    && /opt/python/bin/python --version && /opt/python/bin/pip --version

ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
CMD ["python"]
