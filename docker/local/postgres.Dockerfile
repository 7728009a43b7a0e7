# Local stand-in for the official postgres image on a host without a container registry
# (docker/local/build-base-images.sh builds it; docker/compose.local.yaml uses it for `db`).
# Debian bookworm's postgresql-15: bookworm has no 16, so a data volume made with this image
# belongs to PostgreSQL 15 (never point it at postgres:16 or back; dump and restore instead).
#
# The contract docker/compose*.yaml expect of the official image, kept here:
# - POSTGRES_PASSWORD (required), POSTGRES_USER, POSTGRES_DB create role and database on the
#   first start with an empty data directory (postgres-entrypoint.sh), PGDATA at
#   /var/lib/postgresql/data (the named volume), password (scram-sha-256) over TCP, trust on
#   the container's own socket (for `docker compose exec db pg_dump ...`);
# - pg_isready, psql, pg_dump, pg_restore on PATH; `postgres -c name=value ...` as the command;
# - the server runs as uid/gid 999 (the key ownership root:999 of compose.db-remote.yaml).
# Unlike the official image it never runs as root: the data directory is created here, owned
# by 999, and Docker copies that ownership into a new named volume.
ARG DEBIAN_IMAGE=kernel-grader-base/debian:bookworm-local
FROM ${DEBIAN_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# uid/gid 999 before the package creates the user; no cluster made by the package's scripts.
RUN groupadd --system --gid 999 postgres \
    && useradd --system --uid 999 --gid postgres --home-dir /var/lib/postgresql --shell /bin/bash postgres \
    && mkdir -p /etc/postgresql-common \
    && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf
# Versions come from Debian bookworm's mirror on the day of the build (the base is bookworm).
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/*

ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
RUN mkdir -p "$PGDATA" /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
    && chmod 0700 "$PGDATA" && chmod 2775 /var/run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
VOLUME /var/lib/postgresql/data
USER 999:999
# SIGINT: PostgreSQL's "fast shutdown" (what the official image uses).
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint.sh"]
CMD ["postgres"]
