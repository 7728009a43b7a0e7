"""How close each benchmark row came to its floor: the student's achieved bandwidth, FLOP rate
and fraction of the floor, computed in this one place for every report that shows them (the
page: api/pages/report.py and api/pages/charts.py; the command line: grader/report/render.py; the
summary: grader.report.document.summarize names the rows furthest from the floor).

Torch-free, and importing only the benchmark object's types (grader/report/benchmark_result.py;
grader.report.document imports this module), so the API and the worker can use it.

Where each number comes from, per row of ``benchmark.rows`` (grader/benchmark/score.py
``assemble`` writes them; grader.report.benchmark_result.BenchmarkRow types them):

- student time: ``impls["student"]["graph"]["median_s"]``, the median time per call of the
  student's replayed Triton launches under CUDA-graph timing: the method the headline ranks
  (docs/benchmarks.md), so the fraction here agrees with the ranked number.
- bytes: ``bytes_min`` (the same as ``floor["bytes_min"]``): what one call must move through
  device memory at least, per the assignment's ``Floor.bytes`` (inputs read once, outputs
  written once; grader/assignments/protocol.py). Documents of benchmark schema 1 call it
  ``bytes_3_access``.
- FLOPs: ``floor["flops"]``, the call's floating-point operations per the assignment's
  ``Floor.flops`` (2MNK for a matrix product); None where the floor counts none.
- floor time: ``floor_s_min`` (schema 1: ``floor_s_3_access``), by the floor's kind
  (score.row_floor): bytes / the copy bandwidth measured in the same run (``bandwidth``),
  FLOPs / the measured matrix-multiply peak of the row's dtype (``compute``), or the larger of
  both (``roofline``). A row without a ``floor`` object (older documents) had a bandwidth floor.
- ceilings: ``floor["bandwidth_bytes_per_s"]`` (the measured copy bandwidth) and
  ``floor["peak_flops_per_s"]`` (the measured peak).

Formulas: achieved bandwidth = bytes / student time (bytes/s); achieved FLOP rate = FLOPs /
student time (FLOP/s); fraction of the floor = floor time / student time (1: as fast as the
floor; 0.5: twice the floor's time). For a bandwidth floor the fraction is also achieved
bandwidth / copy bandwidth, and it is the number the benchmark stores as
``student_bandwidth_fraction_min["graph"]``. Units shown: GB/s = 1e9 bytes/s, TFLOP/s = 1e12
FLOP/s (decimal, as GPU vendors quote bandwidth and throughput).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from grader.report.benchmark_result import BenchmarkResult, BenchmarkRow

STUDENT = "student"
#: The timing method the numbers come from: the ranked one (grader/benchmark/score.py).
METHOD = "graph"
#: How many rows the summary names as furthest from the floor.
FURTHEST_ROWS = 3


class RowSpeed(BaseModel):
    """The student's speed on one benchmark row, against the row's floor.

    Attributes:
        row: the row's id (``<shape>/<dtype>``, e.g. ``256x131072/float32``).
        floor_kind: ``bandwidth``, ``compute`` or ``roofline`` (None: no floor known).
        student_s: the student's median time per call under CUDA-graph timing, seconds.
        floor_s: the row's floor (one pass), seconds.
        bytes: the least bytes one call moves (the floor's count), bytes.
        flops: the call's floating-point operations (the floor's count), or None.
        bytes_per_s: achieved bandwidth = bytes / student_s, bytes/s.
        flops_per_s: achieved FLOP rate = flops / student_s, FLOP/s (None without FLOPs).
        fraction_of_floor: floor_s / student_s (1 = at the floor).
        bandwidth_bytes_per_s: the copy bandwidth the floor used, bytes/s.
        peak_flops_per_s: the matrix-multiply peak the floor used, FLOP/s.
        ranked: the row counts towards the headline.
        missing: why a number is absent (``not timed``, ``no floor``), or None.
    """

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")

    row: str
    floor_kind: str | None = None
    student_s: float | None = None
    floor_s: float | None = None
    bytes: int | None = None
    flops: int | None = None
    bytes_per_s: float | None = None
    flops_per_s: float | None = None
    fraction_of_floor: float | None = None
    bandwidth_bytes_per_s: float | None = None
    peak_flops_per_s: float | None = None
    ranked: bool = False
    missing: str | None = None

    @property
    def gb_per_s(self) -> float | None:
        """Achieved bandwidth in GB/s (1e9 bytes/s)."""
        return None if self.bytes_per_s is None else self.bytes_per_s / 1e9

    @property
    def tflop_per_s(self) -> float | None:
        """Achieved FLOP rate in TFLOP/s (1e12 FLOP/s)."""
        return None if self.flops_per_s is None else self.flops_per_s / 1e12


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _count(value: Any) -> int | None:
    number = _positive(value)
    return int(number) if number is not None else None


def row_speed(row: BenchmarkRow) -> RowSpeed:
    """The student's achieved bandwidth, FLOP rate and fraction of the floor on `row` (the
    module docstring says where each number comes from). A number that cannot be computed
    (the row was not timed, or its floor not measured) is None and ``missing`` says why."""
    extra = row.model_extra or {}
    floor = row.floor if isinstance(row.floor, dict) else {}
    student = row.impls.get(STUDENT) or {}
    timing = student.get(METHOD)
    student_s = _positive(timing.get("median_s")) if isinstance(timing, dict) else None
    floor_s = _positive(row.floor_s_min if row.floor_s_min is not None else extra.get("floor_s_3_access"))
    moved = _count(row.bytes_min if row.bytes_min is not None else extra.get("bytes_3_access"))
    flops = _count(floor.get("flops"))
    kind = floor.get("kind") if isinstance(floor.get("kind"), str) else ("bandwidth" if moved else None)
    speed = RowSpeed(row=row.id, floor_kind=kind, student_s=student_s, floor_s=floor_s, bytes=moved,
                     flops=flops, bandwidth_bytes_per_s=_positive(floor.get("bandwidth_bytes_per_s")),
                     peak_flops_per_s=_positive(floor.get("peak_flops_per_s")), ranked=row.ranked)
    if student_s is None:
        return speed.model_copy(update={"missing": "not timed"})
    return speed.model_copy(update={
        "bytes_per_s": moved / student_s if moved else None,
        "flops_per_s": flops / student_s if flops else None,
        "fraction_of_floor": floor_s / student_s if floor_s else None,
        "missing": None if floor_s else "no floor",
    })


def row_speeds(benchmark: BenchmarkResult | None) -> list[RowSpeed]:
    """``row_speed`` of every row of `benchmark`, in the benchmark's order (empty for none)."""
    return [] if benchmark is None else [row_speed(row) for row in benchmark.rows]


def furthest_from_floor(speeds: list[RowSpeed], count: int = FURTHEST_ROWS) -> list[RowSpeed]:
    """The `count` rows with the smallest fraction of the floor, under 1 (slower than the
    floor), furthest first; rows without a fraction are left out."""
    below = [(s.fraction_of_floor, index, s) for index, s in enumerate(speeds)
             if s.fraction_of_floor is not None and s.fraction_of_floor < 1]
    return [s for _, _, s in sorted(below)[:count]]


def format_rate(speed: RowSpeed, none: str = "-") -> str:
    """The achieved rate in words: ``4082 GB/s``, with ``, 512 TFLOP/s`` where the floor counts
    FLOPs; ``not timed``, or `none` where the row counts neither bytes nor FLOPs."""
    if speed.student_s is None:
        return "not timed"
    parts = []
    if speed.gb_per_s is not None:
        parts.append(f"{speed.gb_per_s:.0f} GB/s")
    if speed.tflop_per_s is not None:
        parts.append(f"{speed.tflop_per_s:.3g} TFLOP/s")
    return ", ".join(parts) or none


def format_fraction(fraction: float | None) -> str:
    """A fraction of the floor as a percentage (``63%``), ``-`` for none."""
    return "-" if fraction is None else f"{fraction * 100:.0f}%"


def format_ceiling(speed: RowSpeed) -> str:
    """What the floor is made of, in words: ``4255 GB/s copy bandwidth`` and/or ``989 TFLOP/s
    float16 matrix-multiply peak``, ``-`` when neither was measured."""
    parts = []
    if speed.floor_kind in ("bandwidth", "roofline") and speed.bandwidth_bytes_per_s:
        parts.append(f"{speed.bandwidth_bytes_per_s / 1e9:.0f} GB/s copy bandwidth")
    if speed.floor_kind in ("compute", "roofline") and speed.peak_flops_per_s:
        parts.append(f"{speed.peak_flops_per_s / 1e12:.3g} TFLOP/s matrix-multiply peak")
    return " and ".join(parts) or "-"


def speed_line(speeds: list[RowSpeed]) -> str | None:
    """The summary's sentence on the rows furthest from the floor, e.g. ``furthest from the
    floor (100% = at it): 256x131072/float32 63% (2660 GB/s), ...``; None when no row is
    under it."""
    furthest = furthest_from_floor(speeds)
    if not furthest:
        return None
    named = ", ".join(f"{s.row} {format_fraction(s.fraction_of_floor)}"
                      + (f" ({format_rate(s, none='')})" if format_rate(s, none="") else "") for s in furthest)
    return f"furthest from the floor (100% = at it): {named}"
