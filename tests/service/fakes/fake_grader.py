"""A stand-in for `grader check` used by the service tests (no torch, starts fast).

Usage (as the worker calls it): fake_grader.py SOURCE --json - --seed S --device D --benchmark B

Behaviour is chosen by a directive line in the submitted source:
    # fake-grader: verdict=failed speedup=1.5 sleep=2 exit=3 ...
Keys: verdict (passed|failed|error), error_kind, exit (override exit code), sleep (seconds),
sleep_once (path: sleep an hour unless the path exists; creates it), kill (SIGKILL itself),
garbage (print non-JSON), speedup (benchmark headline), log_bytes (size of the child log),
stderr_bytes, record (path: write argv, env names and cwd there as JSON).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from grader.contract import SCHEMA_VERSION, ResultDocument


def main() -> int:
    source_path = Path(sys.argv[1])
    args = sys.argv[2:]
    seed = int(args[args.index("--seed") + 1])
    source = source_path.read_text(encoding="utf-8")
    match = re.search(r"#\s*fake-grader:(.*)", source)
    options = dict(item.split("=", 1) for item in match.group(1).split()) if match else {}

    if "record" in options:
        Path(options["record"]).write_text(json.dumps({
            "argv": sys.argv, "env": sorted(os.environ), "cwd": os.getcwd(),
            "source_name": source_path.name, "stdin_is_devnull": _stdin_is_devnull(),
        }))
    if "sleep_once" in options:
        marker = Path(options["sleep_once"])
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(3600)
    if "sleep" in options:
        time.sleep(float(options["sleep"]))
    if "stderr_bytes" in options:
        sys.stderr.write("E" * int(options["stderr_bytes"]))
        sys.stderr.flush()
    if options.get("kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    if options.get("garbage"):
        print("this is not JSON")
        return 0

    verdict = options.get("verdict", "passed")
    passed = verdict == "passed"
    checks = [
        {"name": "autograd_fp32", "passed": verdict != "failed", "skipped": False,
         "message": "ok" if verdict != "failed" else "max abs error 0.5 > 1e-05 at (3, 7)",
         "max_abs_err": 1e-7 if verdict != "failed" else 0.5, "tolerance": "1e-05 (fake)"},
        {"name": "bf16_rows", "passed": False, "skipped": True,
         "message": "bfloat16 not supported by the CPU interpreter"},
    ]
    if verdict == "error":
        checks = []
    benchmark = None
    if passed and "speedup" in options:
        benchmark = {"headline": {"name": "geomean_speedup_vs_baseline_graph",
                                  "value": float(options["speedup"])}, "rows": []}
    log_text = "L" * int(options.get("log_bytes", 10))
    # Built through the one typed definition the real grader writes (grader/contract.py), so
    # the fake can never drift from the contract the worker validates.
    document = ResultDocument.model_validate({
        "schema": SCHEMA_VERSION,
        "assignment": "softmax_backward",
        "verdict": verdict,
        "error": None if verdict != "error" else {
            "kind": options.get("error_kind", "import"), "message": "ImportError: no module x"},
        "checks": checks,
        "benchmark": benchmark,
        "device": "cpu (fake)",
        "versions": {"python": sys.version.split()[0], "grader": "fake"},
        "seed": seed,
        "sandbox": "none (unsafe)",
        "duration_s": 0.01,
        "timings_s": {"child": 0.0, "oracles": 0.0, "benchmark": 0.0},
        "log": {"text": log_text, "truncated": False, "total_bytes": len(log_text)},
    }).model_dump(mode="json", by_alias=True)
    json.dump(document, sys.stdout)
    if "exit" in options:
        return int(options["exit"])
    return {"passed": 0, "failed": 1, "error": 2}[verdict]


def _stdin_is_devnull() -> bool:
    try:
        return os.path.samefile("/dev/stdin", os.devnull) or sys.stdin.read() == ""
    except OSError:
        return True


if __name__ == "__main__":
    sys.exit(main())
