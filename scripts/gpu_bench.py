"""Everything the benchmark needs from a GPU, in one process start (one device-machine call).

    python scripts/gpu_bench.py --out DIR [--assignment A] [--runs N] [--cheats] [--corpus] [--budget S]

The tuning experiments that chose the reference's launch plans (--sweep, --tune,
scripts/tune_reference.py, scripts/profile_long_rows.py) lived here until commit 136c5ca; their
figures are in docs/benchmarks/ and docs/benchmarks.md says how they were made.

--runs N  N full benchmarks of the reference kernel as if it were a submission (peers timed
          afresh each run) through grader.benchmark.run_benchmark: DIR/bench_run<i>.json.
          Two runs give the run-to-run spread of the ratios.
--cheats  the known leaderboard tricks (tests/grader/test_benchmark_kernels/) on a few rows,
          reusing the first run's peers: each must end with no score (DIR/cheats.json).
--corpus  the fast correct corpus kernel tests/corpus/softmax_backward/correct/rowblock_split2d.py end to end.

The submission's child runs WITHOUT bubblewrap here (GRADER_SANDBOX=unsafe-none): the lent GPU
machine has no bwrap; everything else is the production path. Results are written as they
come, so a run stopped at its time limit still leaves what it finished. A short table is
printed last.
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

CHEATS = ROOT / "tests" / "grader" / "test_benchmark_kernels"
WORK = "/tmp/gpu_bench_work"


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def write(path: Path, document) -> None:
    path.write_text(json.dumps(document, indent=1, default=str))


def run_full(out_dir: Path, runs: int, budget: float, assignment: str) -> list[dict]:
    from grader.benchmark import BenchmarkOptions, run_benchmark
    from grader.settings import GraderSettings

    # Sandboxed when the caller provides bubblewrap (GRADER_SANDBOX=bwrap), as in production.
    settings = GraderSettings(sandbox=os.environ.get("GRADER_SANDBOX", "unsafe-none"), work_root=WORK)
    Path(settings.work_root).mkdir(parents=True, exist_ok=True)
    options = BenchmarkOptions(budget_s=budget, peers_cache_s=0)
    results = []
    for i in range(runs):
        source = Path(settings.work_root) / f"run{i}"
        source.mkdir(exist_ok=True)
        spec = get_assignment(assignment)
        (source / spec.manifest.module_file).write_text(spec.reference_file.read_text())
        t0 = time.time()
        result = run_benchmark(source, assignment=assignment, settings=settings, options=options)
        result["wall_s"] = time.time() - t0
        result.pop("log", None) if result.get("headline", {}).get("value") else None
        write(out_dir / f"bench_run{i}.json", result)
        results.append(result)
        log(f"run {i}: headline {result['headline']} in {result['wall_s']:.0f} s")
    return results


def run_cheats(out_dir: Path, budget: float, include_corpus: bool) -> dict:
    from grader.benchmark import BenchmarkOptions, benchmark_file, run_peers
    from grader.settings import GraderSettings

    # Sandboxed when the caller provides bubblewrap (GRADER_SANDBOX=bwrap), as in production.
    settings = GraderSettings(sandbox=os.environ.get("GRADER_SANDBOX", "unsafe-none"), work_root=WORK)
    Path(settings.work_root).mkdir(parents=True, exist_ok=True)
    options = BenchmarkOptions(budget_s=budget, peers_cache_s=0, shapes=((65536, 256), (1024, 32768)), dtypes=("float16",),
                               compile_peer=False, save_full=True)
    peers = run_peers(get_assignment("softmax_backward"), options=options, settings=settings)
    files = sorted(CHEATS.glob("*.py"))
    if include_corpus:
        files.append(ROOT / "tests/corpus/softmax_backward/correct/rowblock_split2d.py")
    document = {}
    for path in files:
        try:
            result = benchmark_file(path, output=None, assignment="softmax_backward", settings=settings,
                                    options=options, peers=peers)
            document[path.name] = {"headline": result["headline"], "flags": result["flags"],
                                   "rows": [{"id": r["id"], "flags": r["flags"],
                                             "student_graph_s": (r["impls"]["student"].get("graph") or {}).get("median_s"),
                                             "student_event_s": (r["impls"]["student"].get("event") or {}).get("median_s"),
                                             "wall": r["impls"]["student"].get("wall"),
                                             "speedup": r["speedup_vs_baseline"]} for r in result["rows"]],
                                   "log_tail": ((result.get("log") or {}).get("text") or "")[-1500:]}
        except Exception as exc:  # noqa: BLE001
            document[path.name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        entry = document[path.name]
        log(f"cheat/corpus {path.name}: headline {(entry.get('headline') or {}).get('value')} "
            f"reason {str((entry.get('headline') or {}).get('reason'))[:160]} {entry.get('error', '')}")
        write(out_dir / "cheats.json", document)
    return document


def summary_table(results: list[dict]) -> None:
    """Per row: student graph time, its fraction of copy bandwidth, each peer's graph time and the
    speedups; then the run-to-run spread of the student/baseline ratios."""
    if not results:
        return
    for i, result in enumerate(results):
        bw = (result.get("copy_bandwidth") or {}).get("bytes_per_s") or float("nan")
        print(f"-- run {i}: copy {bw / 1e12:.3f} TB/s, headline {result['headline']['value']}")
        for row in result["rows"]:
            im = row["impls"]
            med = lambda k, m="graph": ((im.get(k) or {}).get(m) or {}).get("median_s") or float("nan")  # noqa: E731
            peers = "  ".join(f"{name} {med(name) * 1e6:.1f}" for name in im if name != "student")
            print(f"{row['id']:22s} student {med('student') * 1e6:9.1f} us "
                  f"BW {row['student_bandwidth_fraction_min'].get('graph', float('nan')):5.2f}  {peers}  "
                  f"speedup graph {row['speedup_vs_baseline'].get('graph', float('nan')):.2f} "
                  f"event {row['speedup_vs_baseline'].get('event', float('nan')):.2f} {'; '.join(row['flags'])[:60]}")
    if len(results) >= 2:
        a, b = results[0]["rows"], results[1]["rows"]
        spreads = []
        for ra, rb in zip(a, b):
            for method in ("graph", "event"):
                x, y = ra["ratio_student_over_baseline"].get(method), rb["ratio_student_over_baseline"].get(method)
                if x and y:
                    spreads.append((abs(x - y) / min(x, y), ra["id"], method))
        if spreads:
            worst = max(spreads)
            print(f"\nrun-to-run spread of student/baseline ratios: max {worst[0]:.2%} ({worst[1]} {worst[2]}), "
                  f"median {sorted(s[0] for s in spreads)[len(spreads) // 2]:.2%}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "out"))
    parser.add_argument("--assignment", default="softmax_backward")
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--budget", type=float, default=0.3)
    parser.add_argument("--cheats", action="store_true")
    parser.add_argument("--corpus", action="store_true")
    parser.add_argument("--order", default="runs,cheats")
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("gpu_bench: no CUDA device; nothing to time", file=sys.stderr)
        return 3
    log("gpu", torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    results = []
    for step in args.order.split(","):
        try:
            if step == "runs" and args.runs:
                results = run_full(out_dir, args.runs, args.budget, args.assignment)
                summary_table(results)
            elif step == "cheats" and (args.cheats or args.corpus):
                run_cheats(out_dir, min(args.budget, 0.2), args.corpus)
        except Exception:  # noqa: BLE001 - one step failing must not lose the others
            log(f"step {step} failed:\n{traceback.format_exc()}")
    summary_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
