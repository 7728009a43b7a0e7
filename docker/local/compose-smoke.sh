#!/usr/bin/env bash
# `make compose-smoke`: the Compose deployment end to end, for real, on a host without a
# container registry (docs/deployment.md, "A host without a container registry"):
#   engine up (start-engine.sh) -> local base images (build-base-images.sh, cached) -> the API
#   CPU worker and TLS proxy images built -> `docker compose -f docker/compose.yaml -f
#   docker/compose.cpu.yaml -f docker/compose.local.yaml -f docker/compose.tls.yaml up -d` ->
#   /healthz ok inside the api container and denied (403) by the proxy, the pages over HTTPS
#   (a throw-away certificate), plain HTTP only a redirect,
#   the API's own port unpublished -> the sandbox check of the guide's step 6
#   -> a student made with `grader students add` inside the api container -> the reference
#   solution uploaded over HTTPS through the proxy and graded by the CPU worker in its
#   bubblewrap sandbox (expected: passed, with the Triton of worker.Dockerfile) -> `down -v`
#   -> nothing of the project left (containers, volumes, networks). Exit 0 only if all of it held.
#
# It never touches a deployment on the same host: it runs from a copy of this checkout (the
# files git tracks or would track, plus the staged torch wheel) in COMPOSE_SMOKE_DIR, with an
# .env of fresh random secrets made there (mode 0600, deleted with the copy), under its own
# Compose project name (COMPOSE_SMOKE_PROJECT), publishing the proxy on 127.0.0.1 and free ports.
# It does rebuild the shared image tags kernel-grader-api:local, kernel-grader-worker:cpu and
# kernel-grader-proxy:local.
#
# Usage (as root; make compose-smoke passes PYTHON and the log):
#   docker/local/compose-smoke.sh [--log FILE] [--cold]
#     --cold   first remove this project's images, the local base images and the BuildKit cache
#              (`docker builder prune -af`: all of the engine's build cache) to time a cold run.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
here="$repo/docker/local"
PYTHON="${PYTHON:-$repo/.venv/bin/python}"
PROJECT="${COMPOSE_SMOKE_PROJECT:-kernel-grader-smoke}"
RUN_DIR="${COMPOSE_SMOKE_DIR:-/var/tmp/kernel-grader-compose-smoke}"
SUBMISSION="${COMPOSE_SMOKE_FILE:-grader/assignments/softmax_backward/reference.py}"
export GRADER_CPU_TORCH_VERSION="${GRADER_CPU_TORCH_VERSION:-2.13.0+cpu}"
cold=0
log_file=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cold) cold=1 ;;
        --log) log_file="$2"; shift ;;
        *) echo "usage: $0 [--log FILE] [--cold]" >&2; exit 2 ;;
    esac
    shift
done
if [ -n "$log_file" ]; then
    mkdir -p "$(dirname "$log_file")"
    exec > >(tee "$log_file") 2>&1
fi

log() { printf '[smoke %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
timings=()
phase_name=""
phase_start=$SECONDS
phase() {
    [ -z "$phase_name" ] || timings+=("$(printf '%-28s %5d s' "$phase_name" $((SECONDS - phase_start)))")
    phase_name="$1"; phase_start=$SECONDS
    [ "$1" = end ] || log "== $1"
}

# The Triton the worker must grade with: worker.Dockerfile's TRITON_VERSION (the Makefile's
# TRITON_SPEC pins the same, tests/docker checks it).
triton_version="$(sed -n 's/^ARG TRITON_VERSION=//p' "$repo/docker/worker.Dockerfile")"

log "kernel-grader compose smoke: $(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet HEAD -- . 2>/dev/null || echo ' (+ uncommitted changes)')," \
    "$(uname -srm), $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB, cold=$cold"

phase "engine"
"$here/start-engine.sh"
log "docker $(docker version --format 'client {{.Client.Version}}, server {{.Server.Version}}'), storage $(docker info --format '{{.Driver}}'), compose $(docker compose version --short)"

compose=(docker compose --project-name "$PROJECT" --project-directory "$RUN_DIR/docker"
         -f "$RUN_DIR/docker/compose.yaml" -f "$RUN_DIR/docker/compose.cpu.yaml"
         -f "$RUN_DIR/docker/compose.local.yaml" -f "$RUN_DIR/docker/compose.tls.yaml")

# Whatever an interrupted earlier run left of this project goes first.
docker compose --project-name "$PROJECT" down -v --remove-orphans >/dev/null 2>&1 || true
if [ "$cold" = 1 ]; then
    phase "cold: remove caches"
    mapfile -t ours < <(docker image ls --format '{{.Repository}}:{{.Tag}}' \
        | grep -E '^(kernel-grader-base/|kernel-grader-api:local$|kernel-grader-worker:cpu$)' || true)
    [ "${#ours[@]}" -eq 0 ] || docker image rm --force "${ours[@]}" >/dev/null
    docker builder prune -af >/dev/null
    log "removed ${#ours[@]} images and the build cache"
fi

phase "base images"
"$here/build-base-images.sh"

phase "stage the run directory"
rm -rf "$RUN_DIR"
mkdir -p "$RUN_DIR"
trap 'rm -rf "$RUN_DIR"' EXIT
# The working tree as git sees it (tracked and untracked-but-not-ignored files): no .env, .venv,
# var/ or staged wheels of this checkout come along.
# (--ignore-failed-read: a tracked file deleted in the working tree is skipped.)
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$RUN_DIR"
# The CPU wheel of torch, from wherever pip finds it on this host (here: its local wheel folder).
wheel_cache="$repo/var/compose-smoke/wheels"
mkdir -p "$wheel_cache"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheel_cache" "torch==$GRADER_CPU_TORCH_VERSION"
wheel_pattern="torch-${GRADER_CPU_TORCH_VERSION//+/?}-*.whl"     # "+" is "_" or "+" in file names
# shellcheck disable=SC2086  # the pattern is meant to glob
cp "$wheel_cache"/$wheel_pattern "$RUN_DIR/docker/wheels/"
log "staged $(cd "$RUN_DIR/docker/wheels" && ls -- *.whl)"
# Fresh secrets for this run only; nothing of them is printed.
secret() { python3 -c 'import secrets; print(secrets.token_hex(32))'; }
db_password="$(secret)"
umask 077
cat > "$RUN_DIR/.env" <<ENV
POSTGRES_PASSWORD=$db_password
GRADER_DATABASE_URL=postgresql+psycopg://grader:$db_password@db:5432/grader
GRADER_INSTRUCTOR_TOKEN=$(secret)
GRADER_DEPLOYMENT_SEED=$(secret)
GRADER_ENVIRONMENT=production
ENV
umask 022
unset db_password
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# The production profile (compose.tls.yaml): only the TLS proxy is published, on 127.0.0.1 and
# free ports, with a throw-away self-signed certificate for localhost made here.
export GRADER_HTTPS_BIND=127.0.0.1 GRADER_PROXY_BASE_IMAGE=kernel-grader-base/python:3.11-bookworm-local
GRADER_HTTPS_PORT="$(free_port)"; GRADER_HTTP_PORT="$(free_port)"
export GRADER_HTTPS_PORT GRADER_HTTP_PORT GRADER_TLS_DIR="$RUN_DIR/tls"
mkdir -p "$GRADER_TLS_DIR"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$GRADER_TLS_DIR/server.key" -out "$GRADER_TLS_DIR/server.crt" 2>/dev/null
chmod 0644 "$GRADER_TLS_DIR/server.key"   # the proxy's uid 10002 reads it; it lives for this run only
# The smoke's Python clients trust that certificate and nothing else (urllib reads
# SSL_CERT_FILE; set for them only: Go's docker CLI would read it too).
TLS_CA="$GRADER_TLS_DIR/server.crt"
BASE_URL="https://localhost:$GRADER_HTTPS_PORT"
log ".env with fresh secrets in $RUN_DIR (0600); the API behind the TLS proxy at $BASE_URL"

phase "build api + worker images"
app_images=(kernel-grader-api:local kernel-grader-worker:cpu kernel-grader-proxy:local)
previous_ids="$(docker image inspect --format '{{.Id}}' "${app_images[@]}" 2>/dev/null || true)"
"${compose[@]}" --progress plain build
# The images these tags named before, now untagged: removed (with the vfs storage driver each
# is gigabytes of full layer copies). Images still used by a container stay.
current_ids="$(docker image inspect --format '{{.Id}}' "${app_images[@]}")"
for id in $previous_ids; do
    grep -qxF "$id" <<<"$current_ids" || docker image rm "$id" >/dev/null 2>&1 || true
done

on_exit() {
    status=$?
    set +e
    if [ "$status" != 0 ]; then
        log "FAILED (exit $status): state and logs of the stack"
        "${compose[@]}" ps -a
        "${compose[@]}" logs --no-color --tail 200
    fi
    log "docker compose down -v"
    "${compose[@]}" down -v --remove-orphans --timeout 30
    rm -rf "$RUN_DIR"
    exit "$status"
}
trap on_exit EXIT

phase "up until healthy"
"${compose[@]}" up -d
# /healthz is staff-only behind the proxy (docker/proxy/nginx.conf denies it), so health is
# read inside the API's container; the proxy is then checked to refuse it and to serve the
# pages over TLS.
health=""
for _ in $(seq 1 300); do
    health="$("${compose[@]}" exec -T api python -c 'import json, urllib.request
print(json.dumps(json.load(urllib.request.urlopen("http://127.0.0.1:8000/healthz", timeout=5))))' </dev/null 2>/dev/null || true)"
    case "$health" in *'"status": "ok"'*) break ;; esac
    sleep 1
done
case "$health" in
    *'"status": "ok"'*) log "GET /healthz in the api container -> $health" ;;
    *) log "no healthy API with a live worker after 300 s: ${health:-no answer}"; exit 1 ;;
esac
SSL_CERT_FILE="$TLS_CA" python3 - "$BASE_URL" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(f"{sys.argv[1]}/healthz", timeout=10)
    sys.exit("the proxy serves /healthz to anyone; it must deny it")
except urllib.error.HTTPError as refused:
    if refused.code != 403:
        sys.exit(f"GET https://.../healthz -> {refused.code}, expected 403 (staff only)")
    print("GET https://.../healthz ->", refused.code, "(denied to the public, as configured)")
with urllib.request.urlopen(f"{sys.argv[1]}/sign-in", timeout=10) as page:
    print("GET https://.../sign-in ->", page.status)
    if page.status != 200:
        sys.exit("the sign-in page is not served over TLS")
PY
"${compose[@]}" ps -a --format 'table {{.Service}}\t{{.Image}}\t{{.Status}}'
# Plain HTTP only redirects to TLS, and the API itself is not published.
python3 - "$GRADER_HTTP_PORT" <<'PY'
import http.client, sys
connection = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
connection.request("GET", "/healthz")
answer = connection.getresponse()
if answer.status != 301 or not answer.getheader("Location", "").startswith("https://"):
    sys.exit(f"plain HTTP answered {answer.status} {answer.getheader('Location')}, not a redirect to TLS")
print("GET http://.../healthz ->", answer.status, answer.getheader("Location"))
PY
# `compose port` prints ":0" (or nothing) for a port that is not published.
published="$("${compose[@]}" port api 8000 2>/dev/null || true)"
case "$published" in
    "" | *:0) log "the API's own port is not published (only the proxy's are)" ;;
    *) log "the API's port is published beside the proxy: $published"; exit 1 ;;
esac
log "in the worker: $("${compose[@]}" exec -T worker python -c 'import torch, triton, numpy; print("torch", torch.__version__, "triton", triton.__version__, "numpy", numpy.__version__)' < /dev/null)"

phase "sandbox check (step 6)"
# The guide's check, as the worker's user: bwrap must start, the sandbox must see only its own
# PIDs, and the network must be unreachable.
# (Up to three tries: once, on the 2026-12-01 warm run, `exec` returned without any output at
# all, not even bwrap's; an empty answer is retried, any other is judged.)
for _ in 1 2 3; do
    set +e
    sandbox_out="$("${compose[@]}" exec -T worker \
        bwrap --unshare-all --die-with-parent --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp \
        python -c "import os, socket; print('pids:', [p for p in os.listdir('/proc') if p.isdigit()]); socket.create_connection(('db', 5432), 2)" \
        2>&1 < /dev/null)"
    set -e
    [ -z "$sandbox_out" ] || break
    log "exec returned no output; again in 2 s"
    sleep 2
done
printf '%s\n' "$sandbox_out"
if ! grep -q '^pids:' <<<"$sandbox_out" || grep -q '^bwrap:' <<<"$sandbox_out" \
        || ! grep -qE 'gaierror|Temporary failure in name resolution|Network is unreachable' <<<"$sandbox_out"; then
    log "the sandbox check did not show bwrap running without network"; exit 1
fi
# Which bwrap the grader itself picks (docs/deployment.md, "Which bwrap"): the image's, by name.
sandbox_used="$("${compose[@]}" exec -T worker grader sandbox < /dev/null 2>&1)" || true
log "in the worker: $sandbox_used"
if ! grep -qE '^sandbox: bubblewrap [0-9.]+ \(GRADER_BWRAP\), /usr/bin/bwrap: passed its probe$' <<<"$sandbox_used"; then
    log "grader sandbox did not name the image's bwrap"; exit 1
fi

phase "student + graded upload"
student_token="$("${compose[@]}" exec -T api grader students add "smoke-$(date -u +%Y%m%d%H%M%S)" < /dev/null | head -n 1)"
[ -n "$student_token" ] || { log "grader students add printed no token"; exit 1; }
SSL_CERT_FILE="$TLS_CA" python3 "$here/smoke_client.py" --base-url "$BASE_URL" --no-health-wait \
    --student-token "$student_token" --file "$RUN_DIR/$SUBMISSION" \
    --expect-status passed --expect-triton "$triton_version"
"${compose[@]}" logs --no-color worker | tail -n 15
# The result was spooled to the volume, then stored and removed (submissions/spool.py): the
# worker's log has no "cannot spool" warning, and the spool is writable and empty.
if "${compose[@]}" logs --no-color worker | grep -q "cannot spool"; then
    log "the worker could not write its result spool"; exit 1
fi
spool_left="$("${compose[@]}" exec -T worker sh -c 'test -w /var/lib/kernel-grader/spool && ls -A /var/lib/kernel-grader/spool' < /dev/null)" \
    || { log "the worker's result spool is not writable"; exit 1; }
[ -z "$spool_left" ] || { log "results left in the spool: $spool_left"; exit 1; }

phase "down -v"
trap - EXIT
"${compose[@]}" down -v --remove-orphans --timeout 30
left="$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")$(docker network ls -q --filter "label=com.docker.compose.project=$PROJECT")"
rm -rf "$RUN_DIR"
if [ -n "$left" ]; then log "left behind after down: $left"; exit 1; fi
log "nothing of project $PROJECT is left (containers, volumes, networks)"

phase end
log "images: $(docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^kernel-grader-(api:local|worker:cpu|base/[a-z]+:[^ ]*-local) ' | paste -sd ',' | sed 's/,/, /g')"
log "timings (total $SECONDS s):"
printf '  %s\n' "${timings[@]}"
log "COMPOSE SMOKE PASSED"
