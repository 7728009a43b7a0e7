"""Sampling and input settings of one benchmark run, and the rows it times."""

from __future__ import annotations

from dataclasses import dataclass

from grader.assignments.protocol import BenchmarkSpec


@dataclass(frozen=True)
class BenchmarkOptions:
    """Sampling and input settings of one benchmark run.

    Attributes:
        sets: buffer sets of inputs the calls rotate through (inputs never served from L2).
        budget_s: time budget per implementation and row of the graph timing (the ranked
            one), seconds.
        event_budget_s: the same for the event timing, seconds. Events are the cross-check
            (against the wall-clock lower bound, and beside the graph figure), so they get a
            shorter budget: most of a timed call's cost is its untimed verification on the
            host, and the benchmark's time is exclusive GPU time (issue 11: at most 8 s).
        min_samples / max_samples: sample count bounds per timing method.
        target_rel_sem: stop sampling once the standard error of the mean is this fraction of it.
        warmup_s: warm-up after the first (compiling) call, seconds (at least 3 calls).
        flush_bytes: L2 flush buffer size, bytes; 0 = max(4 x L2, 256 MiB).
        seed: base seed of all inputs (each row gets seed + its index).
        sample_rows: output rows of every timed call kept for re-verification.
        save_full: keep one whole timed output per method and row of the submission.
        compile_peer: also time torch.compile of the baseline.
        copy_bytes: buffer size of the copy-bandwidth measurement, bytes.
        shapes / dtypes: override the assignment's benchmark rows (tests, quick runs).
        student_timeout_s / peers_timeout_s: wall-clock limits of the replay timer and of the
            peers child, seconds.
        peers_cache_s: reuse a peers result (same GPU, driver, versions, options and reference
            source) for this long, seconds; 0 times the peers with every submission.
    """

    sets: int = 4
    budget_s: float = 0.4
    event_budget_s: float = 0.15
    min_samples: int = 25
    max_samples: int = 3000
    target_rel_sem: float = 0.002
    warmup_s: float = 0.05
    flush_bytes: int = 0
    seed: int = 2024
    sample_rows: int = 8
    save_full: bool = True
    compile_peer: bool = True
    copy_bytes: int = 1 << 30
    shapes: tuple[tuple[int, ...], ...] | None = None
    dtypes: tuple[str, ...] | None = None
    student_timeout_s: float = 600.0
    peers_timeout_s: float = 900.0
    peers_cache_s: float = 6 * 3600.0

    def child_options(self) -> dict:
        """The settings the timing children read."""
        keys = ("sets", "budget_s", "event_budget_s", "min_samples", "max_samples", "target_rel_sem", "warmup_s",
                "flush_bytes", "sample_rows", "save_full", "compile_peer", "copy_bytes")
        return {k: getattr(self, k) for k in keys}


def benchmark_rows(spec: BenchmarkSpec, options: BenchmarkOptions) -> list[dict]:
    """The rows to time: the assignment's shapes x dtypes (or the options' overrides).

    Returns dicts with ``id`` ("MxN/dtype"), ``shape`` (list of ints), ``dtype`` (name) and
    ``seed`` (options.seed + the row's index).
    """
    shapes = options.shapes or spec.shapes
    dtypes = options.dtypes or spec.dtypes
    rows = []
    for dtype in dtypes:
        for shape in shapes:
            rows.append({"id": f"{'x'.join(str(int(d)) for d in shape)}/{dtype}", "shape": [int(d) for d in shape],
                         "dtype": dtype, "seed": options.seed + len(rows)})
    return rows
