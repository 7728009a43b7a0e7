"""Run-to-run spread of graph timing methods on a GPU (issue 11, point 6: ranked ratios within 1%).

    python3 scripts/gpu_timing_spread.py --out OUTDIR [--processes 6] [--budget 0.4]

Times the course reference (grader/assignments/softmax_backward/reference.py) and the named
baseline (bench.py's torch_fp32_expression) on the assignment's 12 benchmark rows, in
``--processes`` fresh processes one after the other (each allocates its own buffers, as each
grading's replay process does), with these methods (seconds per call; K = 4 buffer sets, an L2
flush reads ``flush_bytes``; after every replay the K input sets get new values, as in the
replay process):

- ``subtract``: grader/harness/timing.py ``Timer.graph`` as the grader ranks today: a graph of
  K x (flush, call) + flush, minus a graph of K + 1 flushes, divided by K.
- ``subtract_small_flush``: the same with a flush of 2 x L2 instead of max(4 x L2, 256 MiB).
- ``graph_events``: one graph of K x (flush, event, call, event) + flush, the events recorded
  as graph nodes (``torch.cuda.Event(external=True)``): each sample is one call's own time,
  nothing subtracted.

Writes OUTDIR/process_<i>.json (every row's samples' statistics per method) and
OUTDIR/spread.json, and prints per row and method the spread (max - min) / min of the
process medians, and the headline (geometric mean of baseline / student) per process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = [(65536, 256), (4096, 4096), (1024, 32768), (256, 131072)]
DTYPES = ["float32", "float16", "bfloat16"]
SETS = 4


def _child(out: Path, budget_s: float) -> None:
    import torch

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "grader" / "harness"))
    from timing import DTYPES as TORCH_DTYPES  # noqa: E402
    from timing import PersistingL2, Timer, summarize  # noqa: E402

    from grader.assignments.softmax_backward import bench  # noqa: E402
    from grader.assignments.softmax_backward.reference import softmax_backward  # noqa: E402

    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    opts = {"budget_s": budget_s, "event_budget_s": 0.15, "min_samples": 25, "max_samples": 3000,
            "target_rel_sem": 0.0}
    big = torch.ones(max(4 * l2_bytes, 256 << 20) // 4, device="cuda")
    small = torch.ones(2 * l2_bytes // 4, device="cuda")
    l2 = PersistingL2()
    generator = torch.Generator(device="cuda")
    generator.manual_seed(int.from_bytes(os.urandom(4), "little"))
    result = {"l2_bytes": l2_bytes, "rows": {}}

    def graph_events(timer: Timer, call, sets, after) -> dict:
        stream = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(stream)
        with torch.cuda.stream(side):
            for k in range(sets):
                call(k)
        stream.wait_stream(side)
        torch.cuda.synchronize()
        marks = [(torch.cuda.Event(enable_timing=True, external=True),
                  torch.cuda.Event(enable_timing=True, external=True)) for _ in range(sets)]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for k in range(sets):
                timer.flush()
                marks[k][0].record()
                call(k)
                marks[k][1].record()
            timer.flush()
        for _ in range(2):
            graph.replay()
        torch.cuda.synchronize()
        samples: list[float] = []
        started = time.perf_counter()
        while time.perf_counter() - started < budget_s or len(samples) < 25:
            graph.replay()
            torch.cuda.synchronize()
            samples += [start.elapsed_time(end) * 1e-3 for start, end in marks]
            after()
            if len(samples) >= 3000:
                break
        return summarize(samples, "budget")

    def time_row(shape, dtype) -> dict:
        sets = [list(bench.make_inputs(shape, TORCH_DTYPES[dtype], 1000 + k)) for k in range(SETS)]

        def after() -> None:
            for inputs in sets:
                bench.refill_inputs(inputs, generator)

        entry = {}
        for impl, fn in (("student", softmax_backward), ("baseline", bench.torch_fp32_expression)):
            def call(k, fn=fn):
                return fn(*sets[k])

            for _ in range(3):
                call(0)
            torch.cuda.synchronize()
            for method in ("subtract", "subtract_small_flush", "graph_events"):
                timer = Timer(opts, small if method == "subtract_small_flush" else big, l2)
                t0 = time.perf_counter()
                if method == "graph_events":
                    stats = graph_events(timer, call, SETS, after)
                else:
                    stats, _ = timer.graph(call, SETS, after=after)
                    stats.pop("samples_s", None)
                    timer._keep = None
                stats["stage_s"] = time.perf_counter() - t0
                entry[f"{impl}/{method}"] = stats
        return entry

    for dtype in DTYPES:
        for shape in SHAPES:
            result["rows"][f"{shape[0]}x{shape[1]}/{dtype}"] = time_row(shape, dtype)
            torch.cuda.empty_cache()
    out.write_text(json.dumps(result, indent=1))


def run_in_fresh_processes(script: str, out: Path, count: int, arguments: list[str]) -> list[dict]:
    """Run ``script --out OUT ARGUMENTS --child OUT/process_<i>.json`` ``count`` times, one after
    the other (each a fresh process: its own CUDA context and allocations), and return the JSON
    documents of those that exited 0."""
    out.mkdir(parents=True, exist_ok=True)
    documents = []
    for index in range(count):
        path = out / f"process_{index}.json"
        started = time.perf_counter()
        done = subprocess.run([sys.executable, script, "--out", str(out), *arguments, "--child", str(path)], check=False)
        print(f"process {index}: exit {done.returncode}, {time.perf_counter() - started:.1f} s", flush=True)
        if done.returncode == 0:
            documents.append(json.loads(path.read_text()))
    return documents


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--budget", type=float, default=0.4, help="seconds per implementation, row and method")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.budget)
        return 0
    documents = run_in_fresh_processes(__file__, args.out, args.processes, ["--budget", str(args.budget)])
    if not documents:
        return 1
    methods = ("subtract", "subtract_small_flush", "graph_events")
    spread: dict = {"rows": {}, "headline": {}}
    print(f"{'row':22s}" + "".join(f"{m:>34s}" for m in methods))
    for row in documents[0]["rows"]:
        spread["rows"][row] = {}
        cells = []
        for method in methods:
            student = [d["rows"][row][f"student/{method}"]["median_s"] for d in documents]
            baseline = [d["rows"][row][f"baseline/{method}"]["median_s"] for d in documents]
            ratios = [b / s for b, s in zip(baseline, student)]
            entry = {"student_median_s": student, "baseline_median_s": baseline,
                     "student_spread": (max(student) - min(student)) / min(student),
                     "ratio_spread": (max(ratios) - min(ratios)) / min(ratios)}
            spread["rows"][row][method] = entry
            cells.append(f"{min(student) * 1e6:8.2f} us {entry['student_spread'] * 100:5.2f}% "
                         f"r {entry['ratio_spread'] * 100:5.2f}%")
        print(f"{row:22s}" + "".join(f"{c:>34s}" for c in cells))
    for method in methods:
        heads = [math.exp(sum(math.log(d["rows"][r][f"baseline/{method}"]["median_s"]
                                       / d["rows"][r][f"student/{method}"]["median_s"]) for r in d["rows"])
                          / len(d["rows"])) for d in documents]
        spread["headline"][method] = heads
        print(f"headline {method:22s} " + " ".join(f"{h:.3f}" for h in heads))
    (args.out / "spread.json").write_text(json.dumps(spread, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
