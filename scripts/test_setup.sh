#!/usr/bin/env bash
# The test suite's set-up beyond pip (run by `make test` before the suite): Debian packages,
# axe-core from npm, PostgreSQL started. Idempotent: each step checks first and says what it
# does; `npm ci` runs again only when tests/pages/package-lock.json changed (a stamp). Where a
# step cannot run (not root, no apt-get, no PostgreSQL), it stops before the suite (exit 1)
# with the one command to run, instead of letting hundreds of tests skip or fail.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "test set-up: $*" >&2; }
stop() { say "$1"; say "then run \`make test\` again"; exit 1; }

# What the suite needs from Debian, one line per package: the package, then the command or
# file that shows it is installed, then which tests need it. (bubblewrap is not here: the
# grader extra brings its wheel, grader/sandbox/bwrap.py.) To add a tool, add its line.
APT_NEEDS=(
    "chromium ${GRADER_TEST_CHROMIUM:-/usr/bin/chromium} tests/pages (the browser Playwright drives)"
    "apparmor apparmor_parser tests/docker (parses the worker's AppArmor profile)"
    "npm npm tests/pages (npm ci brings axe-core)"
    "openssl openssl tests/docker (the deployment's secrets)"
    "munge munged tests/service/submissions/test_fleet_slurm.py (the one-node SLURM cluster's authentication)"
    "slurmctld slurmctld tests/service/submissions/test_fleet_slurm.py (its controller)"
    "slurmd slurmd tests/service/submissions/test_fleet_slurm.py (its node)"
    "slurm-client sbatch tests/service/submissions/test_fleet_slurm.py (sbatch, squeue, scancel)"
)

installed() {
    case "$1" in
        /*) [ -x "$1" ] ;;
        *) command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ] ;;
    esac
}

missing=()
for line in "${APT_NEEDS[@]}"; do
    read -r package probe _ <<<"$line"
    installed "$probe" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    command="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
    if ! command -v apt-get >/dev/null 2>&1; then
        stop "missing: ${missing[*]} (Debian's package names) and no apt-get here; install them with this system's package manager"
    fi
    if [ "$(id -u)" -ne 0 ]; then
        stop "missing Debian packages: ${missing[*]}; as root run: sudo sh -c '$command'"
    fi
    say "installing ${missing[*]} (apt-get, as root)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# axe-core for the pages' accessibility checks, pinned by tests/pages/package-lock.json.
stamp=tests/pages/node_modules/.npm-ci-stamp
lock_hash="$(sha256sum tests/pages/package-lock.json | cut -d' ' -f1)"
if [ ! -f tests/pages/node_modules/axe-core/axe.min.js ] || [ "$(cat "$stamp" 2>/dev/null)" != "$lock_hash" ]; then
    say "npm ci in tests/pages (axe-core)"
    (cd tests/pages && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    echo "$lock_hash" >"$stamp"
fi

# PostgreSQL for the tests that run on it too (tests/service): the server the tests name
# (GRADER_TEST_POSTGRES_URL) is theirs to run; the default one, 127.0.0.1:5432, is started
# here when it is installed but not running.
if [ -z "${GRADER_TEST_POSTGRES_URL:-}" ] && ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    clusters=()
    if [ -d /etc/postgresql ]; then
        mapfile -t clusters < <(ls /etc/postgresql)
    fi
    if [ "${#clusters[@]}" -eq 0 ] || ! command -v pg_ctlcluster >/dev/null 2>&1; then
        stop "PostgreSQL is not installed; install it with trust for local TCP connections of the postgres role (the development machines' set-up), or point GRADER_TEST_POSTGRES_URL at a server: GRADER_TEST_POSTGRES_URL=postgresql+psycopg://USER:PASSWORD@HOST:5432/postgres make test"
    fi
    start="pg_ctlcluster --skip-systemctl-redirect ${clusters[0]} main start"
    if [ "$(id -u)" -ne 0 ]; then
        stop "PostgreSQL ${clusters[0]} is installed but not running; run: sudo $start"
    fi
    say "starting PostgreSQL ${clusters[0]} ($start)"
    $start
    for _ in $(seq 1 30); do
        pg_isready -h 127.0.0.1 -p 5432 -q && break
        sleep 1
    done
    pg_isready -h 127.0.0.1 -p 5432 -q || stop "PostgreSQL did not answer on 127.0.0.1:5432 within 30 s; see /var/log/postgresql/"
fi
