#!/usr/bin/env bash
# Issue 11's speed figures on a GPU machine, in one call (docs/benchmarks.md, "Speed of the
# grading path"):
#
#   bash scripts/gpu_speed.sh OUTDIR
#
# 1. `grader check --benchmark on` on the reference: the first run times the peers (and caches
#    them, as a worker does); then RUNS more with the peers cached; then one with
#    GRADER_PRECOMPILE_THREADS=0 (no compile-only pass) for comparison, when NO_PRECOMPILE=1.
# 2. Upload to verdict through `grader serve` (SQLite, one embedded worker on the GPU): the
#    reference uploaded UPLOADS times, one after the other (scripts/gpu_latency.py).
# The machine is set up by scripts/gpu_setup.sh (carried wheels and bubblewrap in .whl/).
# Writes to OUTDIR: check_*.json/.txt, latency.json, server.log, sandbox.txt, nvidia_smi.csv,
# and OUTDIR.tgz of it all (the device tool returns at most 8 files).
set -uo pipefail
OUTDIR="$(realpath -m "${1:?usage: scripts/gpu_speed.sh OUTDIR}")"
mkdir -p "$OUTDIR"
cd "$(dirname "$0")/.." || exit
PYTHON="${PYTHON:-python3}"
# shellcheck source=/dev/null
source scripts/gpu_setup.sh >"$OUTDIR/sandbox.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv >"$OUTDIR/nvidia_smi.csv" 2>&1 || true
REFERENCE=grader/assignments/softmax_backward/reference.py

check() {  # check LABEL [ENV=VALUE...]
    local label=$1
    shift
    local started
    started=$(date +%s%N)
    env "$@" "$PYTHON" -m grader check "$REFERENCE" --device cuda --benchmark on --json "$OUTDIR/check_$label.json" \
        >"$OUTDIR/check_$label.txt" 2>&1
    echo "check $label: exit $?, wall $(( ($(date +%s%N) - started) / 1000000 )) ms" | tee -a "$OUTDIR/sandbox.txt"
}

check peers_timed
for run in $(seq 1 "${RUNS:-2}"); do check "cached_$run"; done
[ -n "${NO_PRECOMPILE:-}" ] && check no_precompile GRADER_PRECOMPILE_THREADS=0

export GRADER_DATABASE_URL="sqlite:////tmp/gpu-speed-$$.db"
GRADER_INSTRUCTOR_TOKEN="speed-$($PYTHON -c 'import secrets; print(secrets.token_hex(16))')"
export GRADER_INSTRUCTOR_TOKEN
GRADER_DEPLOYMENT_SEED="$($PYTHON -c 'import secrets; print(secrets.randbits(63))')"
export GRADER_DEPLOYMENT_SEED
export GRADER_ENVIRONMENT=development
PORT=8765
"$PYTHON" -m grader serve --host 127.0.0.1 --port "$PORT" --workers-embedded 1 >"$OUTDIR/server.log" 2>&1 &
SERVER=$!
"$PYTHON" scripts/gpu_latency.py --server "http://127.0.0.1:$PORT" --out "$OUTDIR" --file "$REFERENCE" \
    --uploads "${UPLOADS:-3}" 2>&1 | tee "$OUTDIR/latency.txt"
kill "$SERVER" 2>/dev/null
wait "$SERVER" 2>/dev/null
tar czf "$OUTDIR.tgz" -C "$OUTDIR" .
