#!/usr/bin/env bash
# Issue 12's GPU measurements in one call: grade every correct-style kernel (and the reference,
# the int32-offset kernel and the half-precision kernels) with `grader check --device cuda`,
# then run the GPU-only tests of issue 12.
#
#   bash scripts/gpu_styles.sh OUTDIR
#
# Writes to OUTDIR: summary.json and <label>.json/.txt per graded file (scripts/gpu_styles.py),
# pytest_gpu.txt and pytest_gpu.xml (tests/grader/test_gpu.py), sandbox.txt, nvidia_smi.csv.
# The machine is set up by scripts/gpu_setup.sh (carried wheels and bubblewrap in .whl/).
set -uo pipefail
OUTDIR="$(realpath -m "${1:?usage: scripts/gpu_styles.sh OUTDIR}")"
mkdir -p "$OUTDIR"
cd "$(dirname "$0")/.." || exit
PYTHON="${PYTHON:-python3}"
# shellcheck source=/dev/null
source scripts/gpu_setup.sh >"$OUTDIR/sandbox.txt" 2>&1
echo "GRADER_SANDBOX=${GRADER_SANDBOX:-}" >>"$OUTDIR/sandbox.txt"
cat "$OUTDIR/sandbox.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv >"$OUTDIR/nvidia_smi.csv" 2>&1 || true

# Both steps are bounded so the whole call stays under the device tool's 600 s per command.
timeout 440 "$PYTHON" scripts/gpu_styles.py --out "$OUTDIR" --jobs "${JOBS:-4}" --timeout-s 420
STYLES=$?
timeout 140 "$PYTHON" -m pytest tests/grader/test_gpu.py -m gpu -q -p no:cacheprovider -rA \
    --junitxml "$OUTDIR/pytest_gpu.xml" >"$OUTDIR/pytest_gpu.txt" 2>&1
TESTS=$?
tail -5 "$OUTDIR/pytest_gpu.txt"
echo "gpu_styles.py exit $STYLES, pytest -m gpu exit $TESTS" | tee -a "$OUTDIR/sandbox.txt"
[ "$STYLES" -eq 0 ] && [ "$TESTS" -eq 0 ]
