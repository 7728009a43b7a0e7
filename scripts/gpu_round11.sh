#!/usr/bin/env bash
# The GPU steps session 11 could not run (no device machine was lent on 2026-12-05 from 07:15 UTC):
#  1. attention_backward's reference graded with its benchmark (no peers cache): its headline, and,
#     when a peers child ended early, how (`peers_earlier_endings`) and each row's `peers_process`
#     (open descriptors, threads, peak RSS, free work space): the two leads of docs/benchmarks.md;
#  2. the same peers child alone (scripts/gpu_peers_probe.py), for comparison;
#  3. the whole GPU exploit corpus after the contract's re-judging from the trusted replay
#     (tests/grader/test_exploits_gpu.py, `-m gpu`).
# Then, in a third call, `JOBS=8 bash scripts/gpu_attention.sh OUTDIR`: the attention corpora on
# the GPU after session 11's changes (attention_backward's full-precision float16 case, the
# training calls replayed and compared element by element), none of them run on a GPU yet.
#   bash scripts/gpu_round11.sh bench       steps 1 and 2 (about 5 minutes)
#   bash scripts/gpu_round11.sh exploits    step 3 (one device call each: a call may run 600 s)
# On the device machine; writes /tmp/r11 and $OUT/r11-<step>.tgz.
# Run from the repository root with the wheels carried (carry [".whl"]; bash scripts/gpu_wheels.sh).
export PYTHONUNBUFFERED=1
source scripts/gpu_setup.sh > /tmp/r11setup.txt 2>&1
R=/tmp/r11; mkdir -p "$R"; cp /tmp/r11setup.txt "$R/"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$R/nvidia_smi.csv" 2>&1
git rev-parse HEAD > "$R/commit.txt" 2>/dev/null
if [ "${1:-bench}" = bench ]; then
GRADER_PEERS_CACHE_DIR="$(mktemp -d)" timeout 400 python3 -m grader check grader/assignments/attention_backward/reference.py \
    --assignment attention_backward --device cuda --benchmark on --json "$R/attention_backward__reference.json" \
    > "$R/attention_backward__reference.txt" 2>&1
echo "exit $? attention_backward reference" | tee "$R/exits.txt"
python3 - <<'PY' | tee "$R/summary.txt"
import json
b = json.load(open('/tmp/r11/attention_backward__reference.json'))['benchmark']
print('headline', b['headline'])
print('earlier endings', b.get('peers_earlier_endings'))
print('flags', b.get('flags'))
for r in b['rows']:
    print(r['id'], r.get('peers_process'), {k: (v.get('graph') or {}).get('median_s') or str(v.get('error'))[:80]
                                            for k, v in r['impls'].items()})
PY
timeout 300 python3 scripts/gpu_peers_probe.py attention_backward > "$R/peers_probe.txt" 2>&1
echo "exit $? peers probe" | tee -a "$R/exits.txt"
else
timeout 560 python3 -m pytest -m gpu tests/grader/test_exploits_gpu.py -q -p no:cacheprovider > "$R/exploits_gpu.txt" 2>&1
echo "exit $? exploits gpu" | tee -a "$R/exits.txt"
tail -5 "$R/exploits_gpu.txt"
fi
tar czf "$OUT/r11-${1:-bench}.tgz" -C /tmp r11
