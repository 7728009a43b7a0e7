"""Everything the grader needs measured on a GPU, in one process start (one device-machine call).

    python scripts/gpu_bench.py --out DIR [--runs N] [--files F ...] [--budget S] [--rows quick|full]

--runs N        N gradings of each assignment's reference (checks, then the benchmark: the reference
                recorded, replayed and timed by the trusted replay process; peers timed afresh in
                every run) through grader.runner.grade_source: DIR/<assignment>_run<i>.json. Two runs
                give the run-to-run spread of the ranked ratios.
--assignments   which assignments' references --runs grades (default: all in the manifest).
--files F ...   grade these files with the benchmark on (e.g. the exploit corpus and the correct
                corpus): DIR/files.json (verdict, failed checks, headline or the reason for none, flags,
                timings). A file named NAME@ASSIGNMENT is graded as that assignment.
--checks-only   grade --files without the benchmark (correctness on the GPU, with times).
--rows quick    a reduced benchmark (two rows, fp16) for the exploit files; full: the assignment's rows.

The sandbox is bubblewrap when the caller puts it on PATH (GRADER_SANDBOX=bwrap, as in
production), else none. Results are written as they come, so a run stopped at its time limit
still leaves what it finished. The tuning experiments that chose the reference's launch plans
lived in scripts/tune_reference.py until commit 136c5ca; their figures are in docs/benchmarks/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402

from grader.assignments import get_assignment  # noqa: E402
from grader.benchmark import BenchmarkOptions  # noqa: E402
from grader.manifest import MANIFESTS  # noqa: E402
from grader.runner import grade_source  # noqa: E402
from grader.settings import GraderSettings  # noqa: E402

WORK = "/tmp/gpu_bench_work"


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def write(path: Path, document) -> None:
    path.write_text(json.dumps(document, indent=1, default=str))


def settings() -> GraderSettings:
    Path(WORK).mkdir(parents=True, exist_ok=True)
    return GraderSettings(sandbox=os.environ.get("GRADER_SANDBOX", "unsafe-none"), work_root=WORK)


def summary(document) -> dict:
    """The parts of a result document worth keeping for a file run."""
    bench = document.benchmark
    headline = bench.headline.model_dump() if bench is not None and bench.headline is not None else None
    rows = (bench.model_dump().get("rows") or []) if bench is not None else []
    return {
        "verdict": document.verdict.value,
        "error": document.error.model_dump() if document.error else None,
        "failed": {c.name: c.message[:600] for c in document.checks if not c.passed and not c.skipped},
        "skipped": [c.name for c in document.checks if c.skipped],
        "headline": headline,
        "benchmark_error": bench.error if bench is not None else None,
        "rows": [{"id": r["id"], "flags": r["flags"], "ranked": r["ranked"],
                  "student_graph_s": ((r["impls"].get("student") or {}).get("graph") or {}).get("median_s"),
                  "speedup": r["speedup_vs_baseline"]} for r in rows],
        "timings_s": document.timings_s,
        "duration_s": document.duration_s,
        "log_tail": document.log.text[-1500:],
    }


def run_references(out_dir: Path, runs: int, budget: float, assignments: list[str]) -> list[dict]:
    results = []
    for name in assignments:
        spec = get_assignment(name)
        options = BenchmarkOptions(budget_s=budget, peers_cache_s=0)
        for i in range(runs):
            started = time.time()
            document = grade_source(spec.reference_file.read_bytes(), assignment=name, device="cuda",
                                    settings=settings(), benchmark="on", benchmark_options=options, seed=i)
            record = document.model_dump(mode="json", by_alias=True)
            record["wall_s"] = time.time() - started
            write(out_dir / f"{name}_run{i}.json", record)
            results.append(record)
            head = (record.get("benchmark") or {}).get("headline") or {}
            log(f"{name} run {i}: {record['verdict']} headline {head.get('value')} reason {head.get('reason')} "
                f"in {record['wall_s']:.1f} s (timings {record['timings_s']})")
    return results


def run_files(out_dir: Path, files: list[str], budget: float, rows: str, checks_only: bool) -> dict:
    document = {}
    for item in files:
        path_text, _, assignment = item.partition("@")
        assignment = assignment or "softmax_backward"
        path = Path(path_text)
        options = BenchmarkOptions(budget_s=budget, peers_cache_s=3600, compile_peer=rows == "full")
        if rows == "quick":
            options = BenchmarkOptions(budget_s=budget, peers_cache_s=3600, compile_peer=False,
                                       shapes=((65536, 256), (1024, 32768)), dtypes=("float16",))
        started = time.time()
        try:
            result = grade_source(path.read_bytes(), assignment=assignment, device="cuda", settings=settings(),
                                  benchmark="off" if checks_only else "on", benchmark_options=options)
            document[item] = summary(result)
        except Exception as exc:  # noqa: BLE001 - one file failing must not lose the others
            document[item] = {"exception": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        document[item]["wall_s"] = time.time() - started
        entry = document[item]
        log(f"{item}: {entry.get('verdict')} failed {sorted(entry.get('failed', {}))} headline "
            f"{(entry.get('headline') or {}).get('value')} {str((entry.get('headline') or {}).get('reason'))[:200]} "
            f"{entry.get('exception', '')} in {entry['wall_s']:.1f} s")
        write(out_dir / "files.json", document)
    return document


def spread(results: list[dict]) -> None:
    """Run-to-run spread of the student/baseline ratios between consecutive runs of one reference."""
    by_assignment: dict[str, list[dict]] = {}
    for result in results:
        by_assignment.setdefault(result["assignment"], []).append(result)
    for name, runs in by_assignment.items():
        spreads = []
        for a, b in zip(runs, runs[1:]):
            rows_a = (a.get("benchmark") or {}).get("rows") or []
            rows_b = (b.get("benchmark") or {}).get("rows") or []
            for ra, rb in zip(rows_a, rows_b):
                for method in ("graph", "event"):
                    x, y = ra["ratio_student_over_baseline"].get(method), rb["ratio_student_over_baseline"].get(method)
                    if x and y:
                        spreads.append((abs(x - y) / min(x, y), ra["id"], method))
        for method in ("graph", "event"):
            values = [s for s in spreads if s[2] == method]
            if values:
                worst = max(values)
                log(f"{name}: run-to-run spread of student/baseline ratios ({method}): max {worst[0]:.2%} "
                    f"({worst[1]}), median {sorted(v[0] for v in values)[len(values) // 2]:.2%}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "out"))
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--assignments", nargs="*", default=sorted(MANIFESTS))
    parser.add_argument("--budget", type=float, default=0.25)
    parser.add_argument("--files", nargs="*", default=[])
    parser.add_argument("--rows", choices=["quick", "full"], default="quick")
    parser.add_argument("--checks-only", action="store_true")
    parser.add_argument("--order", default="runs,files")
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("gpu_bench: no CUDA device; nothing to time", file=sys.stderr)
        return 3
    log("gpu", torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    for step in args.order.split(","):
        try:
            if step == "runs" and args.runs:
                spread(run_references(out_dir, args.runs, args.budget, args.assignments))
            elif step == "files" and args.files:
                run_files(out_dir, args.files, args.budget, args.rows, args.checks_only)
        except Exception:  # noqa: BLE001 - one step failing must not lose the others
            log(f"step {step} failed:\n{traceback.format_exc()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
