"""Why a peers child left rows untimed: run attention_backward's peers child alone on its rows
and print its exit status, the end of its log and each row's per-implementation errors.

    python3 scripts/gpu_peers_probe.py [ASSIGNMENT]      (on the GPU machine, after gpu_setup.sh)

Session 10 (2026-12-05): the H200 runs of attention_backward's benchmark timed the peers of its
float16 rows only; the bfloat16 rows came back with no peer and no error.
"""

from __future__ import annotations

import json
import sys

from grader.assignments import get_assignment
from grader.benchmark.children import run_peers
from grader.benchmark.options import BenchmarkOptions, benchmark_rows


def main() -> int:
    assignment = get_assignment(sys.argv[1] if len(sys.argv) > 1 else "attention_backward")
    options = BenchmarkOptions(peers_cache_s=0)
    rows = benchmark_rows(assignment.benchmark, options)
    document = run_peers(assignment, options=options, rows=rows)
    print("returncode", document.get("returncode"), "error", document.get("error"), "duration", document.get("duration_s"))
    print("log tail:", (document.get("log_tail") or "")[-3000:])
    for row in document.get("rows", []):
        print(row.get("id"), "row error:", row.get("error"),
              json.dumps({name: {k: str(v)[:300] for k, v in impl.items() if k in ("error", "fatal", "flags")}
                          for name, impl in row.get("impls", {}).items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
