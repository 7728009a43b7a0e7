#!/bin/bash
# Entrypoint of docker/local/postgres.Dockerfile: what the official postgres image's entrypoint
# does for this project, and nothing more. On the first start (empty data directory) it runs
# initdb with role POSTGRES_USER (default postgres) and password POSTGRES_PASSWORD (required),
# password authentication (scram-sha-256) for every TCP client, trust on the local socket only,
# then creates database POSTGRES_DB (default: the user's name) in single-user mode, so no
# server ever listens before the database exists. Then it runs the command (`postgres ...`).
# Init scripts (/docker-entrypoint-initdb.d) are not supported: this project has none.
set -euo pipefail

if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set (docs/deployment.md, step 5)}"
    user="${POSTGRES_USER:-postgres}"
    db="${POSTGRES_DB:-$user}"
    echo "postgres-entrypoint: initialising $PGDATA (role $user, database $db)"
    # The password reaches initdb through a pipe, never a file or the command line.
    initdb --pgdata="$PGDATA" --username="$user" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
        --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    printf '%s\n' '' '# postgres-entrypoint: password authentication from any address' \
        'host all all all scram-sha-256' >> "$PGDATA/pg_hba.conf"
    printf '%s\n' '' "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    if [ "$db" != postgres ]; then
        # Identifiers double-quoted, embedded quotes doubled.
        printf 'CREATE DATABASE "%s" OWNER "%s"\n' "${db//\"/\"\"}" "${user//\"/\"\"}" \
            | postgres --single -D "$PGDATA" -c listen_addresses='' postgres >/dev/null
    fi
    echo "postgres-entrypoint: initialised"
fi
exec "$@"
