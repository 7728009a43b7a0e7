#!/usr/bin/env bash
# Issue 12's GPU measurements in one call: grade every correct-style kernel (and the reference,
# the int32-offset kernel and the half-precision kernels) with `grader check --device cuda`,
# then run the GPU-only tests.
#
#   bash scripts/gpu_styles.sh OUTDIR
#
# Writes to OUTDIR: summary.json and <label>.json/.txt per graded file (scripts/gpu_styles.py),
# pytest_gpu.txt and pytest_gpu.xml (tests/grader/test_gpu.py), sandbox.txt, nvidia_smi.csv.
# Sandbox: bubblewrap if it runs; else the Debian package carried in .whl/deb/ (as
# scripts/gpu_e2e.sh does); else GRADER_SANDBOX=unsafe-none, said in sandbox.txt.
set -uo pipefail
OUTDIR="$(realpath -m "${1:?usage: scripts/gpu_styles.sh OUTDIR}")"
mkdir -p "$OUTDIR"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
RUN="$(mktemp -d /tmp/gpu-styles.XXXXXX)"
PYTHON="${PYTHON:-python3}"
if [ -z "${SKIP_WHEELS:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$RUN/site" .whl/*.whl
    export PYTHONPATH="$RUN/site:$REPO"
else
    export PYTHONPATH="$REPO"
fi
SANDBOX_NOTE="bubblewrap"
if ! command -v bwrap >/dev/null 2>&1 && ls .whl/deb/bubblewrap_*.deb >/dev/null 2>&1; then
    for deb in .whl/deb/*.deb; do dpkg -x "$deb" "$RUN/root"; done
    cat >"$RUN/bwrap" <<EOS
#!/bin/sh
LD_LIBRARY_PATH="$RUN/root/usr/lib/x86_64-linux-gnu:$RUN/root/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$RUN/root/usr/bin/bwrap" "\$@"
EOS
    chmod +x "$RUN/bwrap"
    export PATH="$RUN:$PATH"
fi
if ! bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc true 2>"$OUTDIR/bwrap_probe.txt"; then
    export GRADER_SANDBOX=unsafe-none
    SANDBOX_NOTE="none (bubblewrap failed its probe; see bwrap_probe.txt)"
fi
echo "sandbox: $SANDBOX_NOTE" | tee "$OUTDIR/sandbox.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv >"$OUTDIR/nvidia_smi.csv" 2>&1 || true

# Both steps are bounded so the whole call stays under the device tool's 600 s per command.
timeout 440 "$PYTHON" scripts/gpu_styles.py --out "$OUTDIR" --jobs "${JOBS:-4}" --timeout-s 420
STYLES=$?
timeout 140 "$PYTHON" -m pytest tests/grader/test_gpu.py -m gpu -q -p no:cacheprovider \
    --junitxml "$OUTDIR/pytest_gpu.xml" >"$OUTDIR/pytest_gpu.txt" 2>&1
TESTS=$?
tail -5 "$OUTDIR/pytest_gpu.txt"
echo "gpu_styles.py exit $STYLES, pytest -m gpu exit $TESTS" | tee -a "$OUTDIR/sandbox.txt"
[ "$STYLES" -eq 0 ] && [ "$TESTS" -eq 0 ]
