"""``grader benchmark PATH``: time a file on the GPU and print the per-row table.

Exit codes (grader.report.document.BenchmarkExitCode): 0 a ranked score, 1 the kernel earned no score,
2 the benchmark failed, 3 no GPU (it never reports interpreter timings).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from grader.assignments import get_assignment
from grader.benchmark.options import BenchmarkOptions
from grader.benchmark.score import STUDENT, median_of
from grader.report.document import BenchmarkExitCode


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e6:.1f}"


def print_benchmark(result: dict, console, *, assignment: str) -> None:
    """Print the per-row table (microseconds, speedups, fraction of copy bandwidth), the
    headline and any flags of a benchmark result."""
    from rich.table import Table

    spec = get_assignment(assignment).benchmark
    bw = (result.get("copy_bandwidth") or {}).get("bytes_per_s")
    gpu = result.get("gpu") or {}
    title = f"{assignment} on {gpu.get('name', '?')}" + (f", copy bandwidth {bw / 1e12:.2f} TB/s" if bw else "")
    table = Table(title=title)
    columns = ["row", "student graph us", "student event us", *[f"{p} graph us" for p in spec.peers],
               "speedup graph", "speedup event", "BW (one pass)", "flags"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("row", "flags") else "right")
    for row in result.get("rows", []):
        impls = row["impls"]

        def get(name: str, method: str) -> float | None:
            return median_of(impls.get(name, {}).get(method))

        frac = row.get("student_bandwidth_fraction_min", {}).get("graph")
        probe_frac = (row.get("streaming_probe") or {}).get("bandwidth_fraction_min")
        table.add_row(
            row["id"], _us(get(STUDENT, "graph")), _us(get(STUDENT, "event")),
            *[_us(get(peer, "graph")) for peer in spec.peers],
            f"{row['speedup_vs_baseline'].get('graph', float('nan')):.2f}x",
            f"{row['speedup_vs_baseline'].get('event', float('nan')):.2f}x",
            "-" if frac is None else f"{frac:.0%}" + (f" (probe {probe_frac:.0%})" if probe_frac else ""),
            "; ".join(row["flags"])[:80] or "ok",
        )
    console.print(table)
    for note in result.get("peers_earlier_endings") or []:
        console.print(f"note: {note}", markup=False)
    head = result.get("headline") or {}
    if head.get("value") is not None:
        console.print(f"headline {head['name']} = [bold]{head['value']:.3f}[/] (baseline {head.get('baseline')}, graph timing)")
    else:
        console.print(f"[red]no benchmark score[/]: {head.get('reason') or result.get('error')}")


def main_benchmark(args: argparse.Namespace) -> int:
    """CLI handler of ``grader benchmark``; returns the exit code (see the module docstring)."""
    from rich.console import Console

    from grader.benchmark import NoGPU
    from grader.settings import GraderSettings

    console = Console(stderr=True)
    settings = GraderSettings()
    if getattr(args, "unsafe_no_sandbox", False):
        settings = settings.model_copy(update={"sandbox": "unsafe-none"})
    try:
        result = benchmark_file(Path(args.path), output=Path(args.output) if args.output else None, settings=settings,
                                assignment=args.assignment)
    except NoGPU as exc:
        console.print(f"[red]grader benchmark: {exc}[/]")
        return BenchmarkExitCode.NO_GPU
    except Exception as exc:  # noqa: BLE001 - infrastructure failures end with a message, not a trace
        console.print(f"[red]grader benchmark failed: {type(exc).__name__}: {exc}[/]")
        return BenchmarkExitCode.ERROR
    print_benchmark(result, console, assignment=args.assignment)
    if result["headline"]["value"] is not None:
        return BenchmarkExitCode.SCORED
    return BenchmarkExitCode.NO_SCORE if result.get("rows") else BenchmarkExitCode.ERROR


def benchmark_file(path: Path, *, output: Path | None, assignment: str, settings=None,
                   options: BenchmarkOptions | None = None, peers: dict | None = None) -> dict:
    """Grade the file at ``path`` on the GPU (the checks, then the benchmark) and return its
    ``benchmark`` object (with ``verdict`` and the failed checks when it did not pass); writes
    the JSON to ``output`` when given.

    Raises:
        NoGPU: no CUDA device.
    """
    from grader.benchmark import require_gpu
    from grader.runner import grade_source

    require_gpu()
    spec = get_assignment(assignment)
    document = grade_source(Path(path).read_bytes(), assignment=spec.manifest.name, device="cuda", settings=settings,
                            benchmark="on", benchmark_options=options, peers=peers)
    result = document.benchmark.model_dump() if document.benchmark is not None else {
        "headline": {"value": None, "reason": "no benchmark ran"}, "rows": []}
    result["verdict"] = document.verdict.value
    if document.verdict.value != "passed":
        failed = [c.name for c in document.checks if not c.passed and not c.skipped]
        reason = document.error.message if document.error else f"failed checks: {', '.join(failed)}"
        result["headline"] = {"value": None, "reason": f"not benchmarked: the file did not pass ({reason})"}
    result["source"] = str(path)
    if output is not None:
        Path(output).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result
