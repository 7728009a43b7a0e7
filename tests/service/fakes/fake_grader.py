"""A stand-in for `grader check` used by the service tests (no torch, starts fast).

Usage (as the worker calls it): fake_grader.py SOURCE --json - --seed S --device D --benchmark B,
or, started ahead of its job: fake_grader.py --job-on-stdin --json - --device D --benchmark B and
the job ({"source": ..., "seed": ..., "assignment": ...}) as one line on stdin.

Behaviour is chosen by a directive line in the submitted source:
    # fake-grader: verdict=failed speedup=1.5 sleep=2 exit=3 ...
Keys: verdict (passed|failed|error), error_kind, exit (override exit code), sleep (seconds),
sleep_once (path: sleep an hour unless the path exists; creates it), stages (compiling:0.5,checks:30:
write each stage to GRADER_STAGE_FILE as the real grader does, then stay in it that long), kill (SIGKILL itself),
garbage (print non-JSON), speedup (benchmark headline), log_bytes (size of the child log), log_omitted (bytes the
grader says it already cut from that log),
stderr_bytes, record (path: write argv, env names, GRADER_WORK_ROOT and cwd there as JSON), bench_rows (with
speedup: that many benchmark rows shaped as grader/benchmark/score.py writes them: impls with
graph medians, floor_s_min, scope), html (1: the check message, error message, traceback and
captured output carry HTML and <script> tags, for the pages' escaping tests), nan (1: the
failed check's err/tol is infinity and its max abs error NaN, as for NaN outputs), runs
(path: append this process's pid, one line per grading started), wait_for (path: wait, up to
120 s, until it exists, then finish), document (name: print documents/<name>.json, a result the
real grader wrote: flipped_sign is `grader check --device cpu` of
tests/corpus/softmax_backward/wrong/flipped_sign.py; a name under docs/ is a document recorded
on a GPU, e.g. docs/benchmarks/h200-20261201-round6/run3-diagnosis/B2, the softmax_backward
reference with its benchmark on an H200).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from grader.report.document import SCHEMA_VERSION, ResultDocument


def main() -> int:
    if "--job-on-stdin" in sys.argv:
        # Started ahead of its job (the worker's WarmGrader): the job is one JSON line on stdin.
        line = sys.stdin.readline()
        if not line.strip():
            return 0
        job = json.loads(line)
        source_path, seed = Path(job["source"]), int(job["seed"])
    else:
        source_path = Path(sys.argv[1])
        args = sys.argv[2:]
        seed = int(args[args.index("--seed") + 1])
    source = source_path.read_text(encoding="utf-8")
    match = re.search(r"#\s*fake-grader:(.*)", source)
    options = dict(item.split("=", 1) for item in match.group(1).split()) if match else {}

    if "record" in options:
        Path(options["record"]).write_text(json.dumps({
            "argv": sys.argv, "env": sorted(os.environ), "cwd": os.getcwd(), "pid": os.getpid(),
            "source_name": source_path.name, "stdin_is_devnull": _stdin_is_devnull(),
            "work_root": os.environ.get("GRADER_WORK_ROOT"),
        }))
    if "runs" in options:
        with open(options["runs"], "a") as runs:
            runs.write(f"{os.getpid()}\n")
    if "wait_for" in options:
        deadline = time.monotonic() + 120
        while not Path(options["wait_for"]).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if "stages" in options:  # stages=compiling:0.5,checks:30: enter each, stay that many seconds
        from grader.stages import GradingStage, stage_file_writer

        write = stage_file_writer(Path(os.environ["GRADER_STAGE_FILE"]))
        for item in options["stages"].split(","):
            stage, seconds = item.split(":")
            write(GradingStage(stage))
            time.sleep(float(seconds))
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

    if "document" in options:
        # A document the real grader wrote (tests/service/fakes/documents/<name>.json), as it was.
        name = options["document"]
        folder = REPOSITORY if name.startswith("docs/") else DOCUMENTS
        document = ResultDocument.model_validate_json((folder / f"{name}.json").read_text(encoding="utf-8"))
        document = document.model_copy(update={"seed": seed})
        sys.stdout.write(document.to_json(indent=None))
        return int(document.exit_code)

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
                                  "value": float(options["speedup"]),
                                  "baseline": "torch_fp32_expression"},
                     "baseline": {"name": "torch_fp32_expression"},
                     "rows": _benchmark_rows(int(options.get("bench_rows", 0)),
                                             float(options["speedup"]))}
    log_text = "L" * int(options.get("log_bytes", 10))
    error = None if verdict != "error" else {
        "kind": options.get("error_kind", "import"), "message": "ImportError: no module x"}
    if options.get("nan") and verdict == "failed":
        checks[0].update(max_err_over_tolerance=float("inf"), max_abs_err=float("nan"))
    if options.get("html"):
        checks[0]["message"] = f"{checks[0]['message']} {HTML_PAYLOAD}"
        log_text = f"student printed: {HTML_PAYLOAD}\n"
        error = {"kind": options.get("error_kind", "crash"),
                 "message": f"the call raised {HTML_PAYLOAD}",
                 "traceback": ("Traceback (most recent call last):\n"
                               '  File "/harness/check_child.py", line 140, in run\n'
                               "    out = fn(y, g)\n"
                               '  File "/work/softmax_backward.py", line 6, in softmax_backward\n'
                               f"    raise ValueError('{HTML_PAYLOAD}')\n"
                               f"ValueError: {HTML_PAYLOAD}\n")}
    # Built through the one typed definition the real grader writes (grader/report/document.py), so
    # the fake can never drift from the contract the worker validates.
    document = ResultDocument.model_validate({
        "schema": SCHEMA_VERSION,
        "assignment": "softmax_backward",
        "verdict": verdict,
        "error": error,
        "checks": checks,
        "benchmark": benchmark,
        "device": "cpu (fake)",
        "versions": {"python": sys.version.split()[0], "grader": "fake"},
        "seed": seed,
        "sandbox": "none (unsafe)",
        "duration_s": 0.01,
        "timings_s": {"child": 0.0, "oracles": 0.0, "benchmark": 0.0},
        "log": {"text": log_text, "truncated": "log_omitted" in options, "total_bytes": len(log_text),
                "omitted_bytes": int(options.get("log_omitted", 0))},
    })
    # As the real grader writes it (non-finite floats as the strings "Infinity"/"NaN").
    sys.stdout.write(document.to_json(indent=None))
    if "exit" in options:
        return int(options["exit"])
    return {"passed": 0, "failed": 1, "error": 2}[verdict]


DOCUMENTS = Path(__file__).parent / "documents"
REPOSITORY = Path(__file__).resolve().parents[3]
#: What the html directive puts into every student-controlled string of the document.
HTML_PAYLOAD = '<script>window.__pwned = 1</script><b>bold</b><img src=x onerror="window.__pwned=2">'


def _benchmark_rows(count: int, speedup: float) -> list[dict]:
    """Rows as grader/benchmark/score.py writes them (the fields the pages read)."""
    rows = []
    for index in range(count):
        m, n = 4096 * (index + 1), 1024
        baseline_s = 80e-6 * (index + 1)
        student_s = baseline_s / speedup
        rows.append({
            "id": f"{m}x{n}/float32", "shape": [m, n], "dtype": "float32",
            "floor_s_min": 0.6 * student_s,
            "impls": {
                "student": {"graph": {"median_s": student_s}},
                "torch_fp32_expression": {"graph": {"median_s": baseline_s}},
                "aten_softmax_backward_data": {"graph": {"median_s": 0.5 * baseline_s}},
                "reference": {"graph": {"median_s": 0.9 * student_s}},
            },
            "speedup_vs_baseline": {"graph": speedup},
            "flags": [], "ranked": True,
            "scope": f"{m}x{n} float32. Timed: the call on contiguous inputs (fake grader).",
        })
    return rows


def _stdin_is_devnull() -> bool:
    try:
        return os.path.samefile("/dev/stdin", os.devnull) or sys.stdin.read() == ""
    except OSError:
        return True


if __name__ == "__main__":
    sys.exit(main())
