#!/usr/bin/env bash
# One device call (under 600 s) for what session 11 could not run: scripts/gpu_attention.sh
# (both attention references graded with their benchmark, then every attention corpus file
# without one), on a fresh device machine, so attention_backward's peers are timed inside a
# grading with no peers cache. Then a summary of each reference's benchmark: the headline, how
# an earlier peers child ended (`peers_earlier_endings`) and each row's `peers_process`.
#   bash scripts/gpu_round12.sh          (on the device machine; carry [".whl"]: gpu_wheels.sh)
#   bash scripts/gpu_round12.sh reference   (only attention_backward's reference: when less
#                                            device time is left than the whole call needs)
# Writes /tmp/att and $OUT/att.tgz. The exploit corpus: `bash scripts/gpu_round11.sh exploits`.
mkdir -p /tmp/att
if [ "${1:-all}" = reference ]; then
    # Only the figure #36 waits for (about 4 minutes): attention_backward's reference graded
    # with its benchmark, its peers timed inside the grading with no cache.
    source scripts/gpu_setup.sh > /tmp/att/sandbox.txt 2>&1
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > /tmp/att/nvidia_smi.csv 2>&1
    timeout 400 python3 -m grader check grader/assignments/attention_backward/reference.py --assignment attention_backward \
        --device cuda --benchmark on --json /tmp/att/attention_backward__reference.json > /tmp/att/attention_backward__reference.txt 2>&1
    echo "exit $? attention_backward__reference" > /tmp/att/exits.txt
else
    timeout 560 env JOBS=8 bash scripts/gpu_attention.sh /tmp/att > /tmp/att/run.log 2>&1; echo "script exit $?" >> /tmp/att/run.log
fi
git rev-parse HEAD > /tmp/att/commit.txt 2>/dev/null
python3 - <<'PY' > /tmp/att/summary.txt 2>&1
import json
for n in ("attention_forward", "attention_backward"):
    try:
        d = json.load(open(f"/tmp/att/{n}__reference.json"))
    except Exception as e:
        print(n, "no json", e); continue
    b = d.get("benchmark") or {}
    print(n, d["verdict"], "headline", b.get("headline"), "flags", b.get("flags"))
    print("  earlier endings", str(b.get("peers_earlier_endings"))[:1500])
    for r in b.get("rows", []):
        print(" ", r["id"], {k: (v.get("graph") or {}).get("median_s") or str(v.get("error"))[:100] for k, v in r["impls"].items()})
        print("    process", r.get("peers_process"))
PY
cat /tmp/att/exits.txt /tmp/att/summary.txt
tar czf "$OUT/att.tgz" -C /tmp att
