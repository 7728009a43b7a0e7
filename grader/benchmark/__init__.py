"""GPU benchmark of a submission against the named baseline, the peers and the bandwidth floor.

Entry points (keyword-only options):

    run_benchmark(source_dir, *, assignment, settings=None, options=None, peers=None, cache_dir=None) -> dict
        ``source_dir`` holds the submission under the assignment's file name (the runner copies it
        there after every check passed); ``cache_dir`` is the submission's Triton cache. Peers
        are timed afresh unless ``peers`` is given or a young enough cached result exists.
        Returns the ``benchmark`` object of the result document; ``headline.value`` is None when
        the kernel earns no score. Raises NoGPU when torch sees no CUDA device.
    benchmark_file(path, *, output, assignment, settings=None, options=None, peers=None) -> dict
        ``run_benchmark`` on any file; writes the JSON to ``output`` when given.
    run_peers(assignment, *, options=None, settings=None, rows=None) -> dict
        Times only the peers and the copy bandwidth (grader/benchmark/children.py).

Modules: options (BenchmarkOptions, rows), children (running the timing children), verify
(re-verifying timed outputs against the fp64 oracle), score (floors, flags, headline), cli
(``grader benchmark`` and its table). Timing itself happens in grader/harness/bench_child.py.
Units: times in seconds, sizes in bytes, bandwidth in bytes/s (TB/s = 1e12 bytes/s in tables).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from grader.assignments import get_assignment
from grader.benchmark.children import cached_peers, run_peers, run_student
from grader.benchmark.options import BenchmarkOptions, benchmark_rows
from grader.benchmark.score import assemble
from grader.benchmark.verify import verify_rows

__all__ = ["BenchmarkOptions", "NoGPU", "benchmark_file", "run_benchmark", "run_peers"]


class NoGPU(RuntimeError):
    """Timing needs a CUDA GPU and torch sees none."""


def _require_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        raise NoGPU("timing needs a CUDA GPU and none is visible here; no timings are reported "
                    "(Triton CPU-interpreter times say nothing about a GPU kernel)")


def run_benchmark(source_dir: Path, *, assignment: str, settings=None, options: BenchmarkOptions | None = None,
                  peers: dict | None = None, cache_dir: Path | None = None) -> dict:
    """Benchmark the submission in ``source_dir`` (see the module docstring). Raises NoGPU."""
    from grader.settings import GraderSettings

    _require_gpu()
    settings = settings or GraderSettings()
    options = options or BenchmarkOptions()
    spec = get_assignment(assignment)
    rows = benchmark_rows(spec.benchmark, options)
    source_dir = Path(source_dir)
    if peers is None:
        peers = cached_peers(spec, options=options, settings=settings, rows=rows)
    student_doc, student_info = run_student(source_dir, spec, rows=rows, options=options, settings=settings,
                                            cache_dir=cache_dir)
    verify_rows(spec, student_doc, source_dir, rows, options.sets)
    sandbox = "none (unsafe: GRADER_SANDBOX=unsafe-none)" if settings.sandbox != "bwrap" else "bubblewrap"
    result = assemble(spec=spec.benchmark, student_doc=student_doc, student_info=student_info, peers_doc=peers,
                      rows=rows, options=options, sandbox=sandbox)
    result["peers_cached_from"] = peers.get("cached_from")
    return result


def benchmark_file(path: Path, *, output: Path | None, assignment: str, settings=None,
                   options: BenchmarkOptions | None = None, peers: dict | None = None) -> dict:
    """``run_benchmark`` on the file at ``path``; writes the JSON to ``output`` if given. Raises NoGPU."""
    _require_gpu()
    spec = get_assignment(assignment)
    work_root = getattr(settings, "work_root", None) if settings is not None else None
    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=work_root))
    try:
        os.chmod(workdir, 0o700)
        shutil.copy(path, workdir / spec.manifest.module_file)
        result = run_benchmark(workdir, assignment=assignment, settings=settings, options=options, peers=peers)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["source"] = str(path)
    if output is not None:
        Path(output).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result
