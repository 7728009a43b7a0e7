#!/usr/bin/env bash
# Issue 36's GPU steps in one call: grade both attention references (and the correct corpus
# files) on the GPU with their benchmark against their peers (SDPA, its flash backend,
# FlexAttention compiled) and the roofline floor, then the attention corpora's GPU-only check
# (bfloat16_values).
#
#   bash scripts/gpu_attention.sh OUTDIR     (then copy OUTDIR to docs/benchmarks/h200-DATE-attention)
#
# Writes to OUTDIR: <assignment>__<file>.json/.txt per graded file, sandbox.txt, nvidia_smi.csv.
# The machine is set up by scripts/gpu_setup.sh (carried wheels and bubblewrap in .whl/).
# Not run yet: no H200 was lent in the session that added the attention assignments.
set -uo pipefail
OUTDIR="$(realpath -m "${1:?usage: scripts/gpu_attention.sh OUTDIR}")"
mkdir -p "$OUTDIR"
cd "$(dirname "$0")/.." || exit
PYTHON="${PYTHON:-python3}"
# shellcheck source=/dev/null
source scripts/gpu_setup.sh >"$OUTDIR/sandbox.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv >"$OUTDIR/nvidia_smi.csv" 2>&1 || true
STATUS=0
grade() {  # grade ASSIGNMENT FILE [--benchmark on]: one line "exit CODE label" on stdout
    local label code
    label="$1__$(basename "$2" .py)"
    timeout 280 "$PYTHON" -m grader check "$2" --assignment "$1" --device cuda --json "$OUTDIR/$label.json" "${@:3}" \
        >"$OUTDIR/$label.txt" 2>&1
    code=$?
    echo "exit $code $label: $(tail -1 "$OUTDIR/$label.txt")"
}
export -f grade
export OUTDIR PYTHON
# The references alone on the GPU: their benchmark times against the peers must not share it.
for name in attention_forward attention_backward; do
    grade "$name" "grader/assignments/$name/reference.py" --benchmark on | tee -a "$OUTDIR/exits.txt"
done
# The corpora without a benchmark, JOBS at a time (the machine has 16 cores; checks only).
for name in attention_forward attention_backward; do
    for file in tests/corpus/$name/correct/*.py tests/corpus/$name/wrong/*.py; do
        echo "$name $file"
    done
done | xargs -P "${JOBS:-4}" -L 1 bash -c 'grade "$0" "$1"' | tee -a "$OUTDIR/exits.txt"
# grader check exits 0 on passed, 1 on failed/error: a wrong file is expected to exit 1, so the
# script's status is the references' only; each file's verdict is in its .json.
grep -E "^exit [^0] attention_(forward|backward)__reference" "$OUTDIR/exits.txt" && STATUS=1
echo "exit $STATUS" | tee -a "$OUTDIR/sandbox.txt"
exit $STATUS
