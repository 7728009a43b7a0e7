#!/usr/bin/env bash
# Issue 11's GPU measurements in one device call (docs/benchmarks.md, "Record and replay"):
#
#   bash scripts/gpu_trust.sh OUTDIR
#
# 1. `grader check` of the softmax_backward reference with the full benchmark, three times in a
#    row, as a student or a worker runs it: run 0 times the peers, runs 1 and 2 reuse them
#    (peers cached), so runs 1-2 give the upload-to-verdict time, the benchmark's GPU time and
#    the run-to-run spread of the ranked ratios (scripts/trust_figures.py reads them).
# 2. The exploit corpus on the GPU (tests/grader/test_exploits_gpu.py, marker gpu).
# Writes OUTDIR/reference_run{0,1,2}.{json,txt}, exploits_gpu.{txt,xml}, sandbox.txt,
# nvidia_smi.csv. The machine is set up by scripts/gpu_setup.sh (wheels, bubblewrap in .whl/).
set -uo pipefail
OUTDIR="$(realpath -m "${1:?usage: scripts/gpu_trust.sh OUTDIR}")"
mkdir -p "$OUTDIR"
cd "$(dirname "$0")/.." || exit
PYTHON="${PYTHON:-python3}"
# shellcheck source=/dev/null
source scripts/gpu_setup.sh >"$OUTDIR/sandbox.txt" 2>&1
cat "$OUTDIR/sandbox.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv >"$OUTDIR/nvidia_smi.csv" 2>&1 || true
STATUS=0
for i in 0 1 2; do
    started_ms=$(( $(date +%s%N) / 1000000 ))
    timeout 200 "$PYTHON" -m grader check grader/assignments/softmax_backward/reference.py --device cuda \
        --benchmark on --json "$OUTDIR/reference_run$i.json" >"$OUTDIR/reference_run$i.txt" 2>&1
    code=$?
    [ "$code" -eq 0 ] || STATUS=1
    echo "reference run $i: exit $code wall $(( $(date +%s%N) / 1000000 - started_ms )) ms" | tee -a "$OUTDIR/sandbox.txt"
done
timeout "${EXPLOITS_TIMEOUT:-380}" "$PYTHON" -m pytest tests/grader/test_exploits_gpu.py -m gpu -q -p no:cacheprovider -rA \
    --junitxml "$OUTDIR/exploits_gpu.xml" >"$OUTDIR/exploits_gpu.txt" 2>&1 || STATUS=1
tail -8 "$OUTDIR/exploits_gpu.txt"
exit $STATUS
