"""Does where a row's buffers land in device memory move its graph time? (issue 11, point 6)

    python3 scripts/gpu_placement.py --out OUTDIR [--processes 2] [--allocations 6] [--budget 0.4]

The per-row run-to-run spread of a grading's graph times (docs/benchmarks.md, "Speed of the
grading path, second pass") is larger than their sampling noise predicts on the 26 us rows.
This script times the course reference with the grader's own ``Timer.graph`` (K = 4 buffer
sets, 256 MiB L2 flush, new input values after every replay, as the replay process does) on
the rows that spread most, in ``--processes`` fresh processes. In each process every row gets
``--allocations`` fresh allocations of its buffer sets (after a spacer of a random size, so that
they land elsewhere), and each allocation is timed twice. If the medians of one allocation's
two timings agree while allocations differ, placement is what moves the time.

Writes OUTDIR/placement.json (every timing's median, n and relative SEM) and prints per row:
the spread (max - min) / min over the allocations of their first timing, and the largest
difference between an allocation's two timings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from gpu_timing_spread import run_in_fresh_processes  # scripts/ is on sys.path when this file runs

REPO = Path(__file__).resolve().parents[1]
ROWS = [((65536, 256), "float16"), ((65536, 256), "bfloat16"), ((4096, 4096), "float16"),
        ((4096, 4096), "bfloat16"), ((65536, 256), "float32")]
SETS = 4


def _child(out: Path, allocations: int, budget_s: float) -> None:
    import torch

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "grader" / "harness"))
    from timing import DTYPES as TORCH_DTYPES  # noqa: E402
    from timing import PersistingL2, Timer  # noqa: E402

    from grader.assignments.softmax_backward import bench  # noqa: E402
    from grader.assignments.softmax_backward.reference import softmax_backward  # noqa: E402

    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    opts = {"budget_s": budget_s, "event_budget_s": 0.15, "min_samples": 25, "max_samples": 3000,
            "target_rel_sem": 0.0}
    timer = Timer(opts, torch.ones(max(4 * l2_bytes, 256 << 20) // 4, device="cuda"), PersistingL2())
    generator = torch.Generator(device="cuda")
    generator.manual_seed(int.from_bytes(os.urandom(4), "little"))
    result: dict = {"rows": {}}
    for shape, dtype in ROWS:
        timings = []
        for allocation in range(allocations):
            spacer = torch.empty(int.from_bytes(os.urandom(3), "little") * 4, dtype=torch.uint8, device="cuda")
            sets = [list(bench.make_inputs(shape, TORCH_DTYPES[dtype], 1000 * allocation + k)) for k in range(SETS)]

            def after(sets=sets) -> None:
                for inputs in sets:
                    bench.refill_inputs(inputs, generator)

            def call(k, sets=sets):
                return softmax_backward(*sets[k])

            for _ in range(3):
                call(0)
            pair = []
            for _ in range(2):
                stats, _ = timer.graph(call, SETS, after=after)
                timer._keep = None
                pair.append({"median_s": stats["median_s"], "n": stats["n"],
                             "rel_sem": stats["sem_s"] / stats["mean_s"]})
            timings.append({"spacer_bytes": spacer.numel(), "y_ptr": sets[0][0].data_ptr(), "timings": pair})
            del sets, spacer, after, call
            torch.cuda.empty_cache()
        result["rows"][f"{shape[0]}x{shape[1]}/{dtype}"] = timings
    out.write_text(json.dumps(result, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--allocations", type=int, default=6)
    parser.add_argument("--budget", type=float, default=0.4, help="seconds per timing")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.allocations, args.budget)
        return 0
    documents = run_in_fresh_processes(__file__, args.out, args.processes,
                                       ["--allocations", str(args.allocations), "--budget", str(args.budget)])
    summary: dict = {}
    for row in (documents[0]["rows"] if documents else {}):
        firsts, repeats = [], []
        for document in documents:
            for allocation in document["rows"][row]:
                a, b = (t["median_s"] for t in allocation["timings"])
                firsts.append(a)
                repeats.append(abs(a - b) / min(a, b))
        summary[row] = {"first_medians_s": firsts, "allocation_spread": (max(firsts) - min(firsts)) / min(firsts),
                        "largest_repeat_difference": max(repeats)}
        print(f"{row:22s} {min(firsts) * 1e6:7.2f}-{max(firsts) * 1e6:7.2f} us over {len(firsts)} allocations: "
              f"spread {summary[row]['allocation_spread'] * 100:5.2f}%, same allocation twice: at most "
              f"{summary[row]['largest_repeat_difference'] * 100:5.2f}%")
    (args.out / "placement.json").write_text(json.dumps({"processes": documents, "summary": summary}, indent=1))
    return 0 if documents else 1


if __name__ == "__main__":
    sys.exit(main())
