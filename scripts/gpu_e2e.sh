#!/usr/bin/env bash
# The whole service on a GPU machine, in one call: set up, serve, submit, wait, record.
#
#   scripts/gpu_e2e.sh OUTDIR
#
# Expects (carried into the lent GPU machine, which has no network):
#   .whl/*.whl      the service's Python dependencies that machine lacks (Python 3.12 wheels)
#   .whl/deb/*.deb  bubblewrap and its libraries (Debian 12 packages), unpacked into a folder
#                   of this run, never into /
# Writes to OUTDIR: check_reference.json (grader check --device cuda on the reference),
# submissions.json, leaderboard.json, leaderboard.csv, timings.json, server.log.
set -euo pipefail
OUTDIR="$(realpath -m "${1:?usage: scripts/gpu_e2e.sh OUTDIR}")"
mkdir -p "$OUTDIR"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
RUN="$(mktemp -d /tmp/gpu-e2e.XXXXXX)"

PYTHON="${PYTHON:-python3}"
if [ -z "${SKIP_WHEELS:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$RUN/site" .whl/*.whl
    export PYTHONPATH="$RUN/site:$REPO"
else
    export PYTHONPATH="$REPO"
fi

# Sandbox: bubblewrap from the carried Debian package, unpacked into this run's folder.
SANDBOX_NOTE="bubblewrap"
if ! command -v bwrap >/dev/null 2>&1 && ls .whl/deb/bubblewrap_*.deb >/dev/null 2>&1; then
    for deb in .whl/deb/*.deb; do dpkg -x "$deb" "$RUN/root"; done
    cat >"$RUN/bwrap" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$RUN/root/usr/lib/x86_64-linux-gnu:$RUN/root/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$RUN/root/usr/bin/bwrap" "\$@"
EOF
    chmod +x "$RUN/bwrap"
    export PATH="$RUN:$PATH"
fi
if ! bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc true 2>"$OUTDIR/bwrap_probe.txt"; then
    echo "bubblewrap cannot run here: $(cat "$OUTDIR/bwrap_probe.txt"); falling back to GRADER_SANDBOX=unsafe-none" | tee -a "$OUTDIR/bwrap_probe.txt"
    export GRADER_SANDBOX=unsafe-none
    SANDBOX_NOTE="none (bubblewrap failed its probe; see bwrap_probe.txt)"
fi
echo "sandbox: $SANDBOX_NOTE" | tee "$OUTDIR/sandbox.txt"
bwrap --version >>"$OUTDIR/sandbox.txt" 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv >"$OUTDIR/nvidia_smi.csv" 2>&1 || true

# 1. The grader alone on the GPU (issue 2's recorded run), checks then benchmark. This also
#    times the peers (baseline, aten, reference, torch.compile) once; a worker reuses that
#    result for 6 hours, so later gradings pay only for their own kernel.
set +e
"$PYTHON" -m grader check grader/assignments/softmax_backward/reference.py --device cuda --benchmark on \
    --json "$OUTDIR/check_reference.json" \
    >"$OUTDIR/check_reference.txt" 2>&1
echo "grader check --device cuda exit: $?" | tee -a "$OUTDIR/check_reference.txt"
set -e

# 2. The service: grader serve on SQLite with one embedded worker on the GPU.
export GRADER_DATABASE_URL="sqlite:///$RUN/grader.db"
GRADER_INSTRUCTOR_TOKEN="e2e-instructor-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
export GRADER_INSTRUCTOR_TOKEN
GRADER_DEPLOYMENT_SEED="$(python3 -c 'import secrets; print(secrets.randbits(63))')"
export GRADER_DEPLOYMENT_SEED
export GRADER_ENVIRONMENT=development
export GRADER_CHILD_TIMEOUT_S=60  # the hostile infinite loop is stopped after 60 s
GRADER_SECRET_FOR_LEAK_TEST="leak-canary-$(python3 -c 'import secrets; print(secrets.token_hex(8))')"
export GRADER_SECRET_FOR_LEAK_TEST
PORT=8765
"$PYTHON" -m grader serve --host 127.0.0.1 --port "$PORT" --workers-embedded 1 >"$OUTDIR/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
set +e
"$PYTHON" scripts/gpu_e2e.py --server "http://127.0.0.1:$PORT" --out "$OUTDIR" --sandbox "$SANDBOX_NOTE"
STATUS=$?
kill $SERVER 2>/dev/null || true
wait $SERVER 2>/dev/null || true
tar czf "$OUTDIR.tgz" -C "$OUTDIR" .  # one file back: the device tool returns at most 8
exit $STATUS
