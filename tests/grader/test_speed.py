"""Each benchmark row's speed against its floor (grader/report/speed.py), on the result document the
real grader wrote on an H200 for the softmax_backward reference (docs/benchmarks/
h200-20261201-round6/run3-diagnosis/B2.json), and how `grader check` prints it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from grader.report.benchmark_result import BenchmarkRow
from grader.report.document import ResultDocument, Verdict, summarize
from grader.report.render import render_result
from grader.report.speed import furthest_from_floor, row_speed, row_speeds, speed_line

RECORDED = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "h200-20261201-round6"
            / "run3-diagnosis" / "B2.json")
# The copy bandwidth that run measured (device-to-device copy_, events), bytes/s.
H200_COPY_BANDWIDTH = 4255071787862.8813


@pytest.fixture(scope="module")
def document() -> ResultDocument:
    return ResultDocument.model_validate_json(RECORDED.read_text())


def test_every_row_of_the_recorded_h200_reference_gets_its_rate_and_fraction(document: ResultDocument) -> None:
    speeds = row_speeds(document.benchmark)
    assert [s.row for s in speeds] == [r.id for r in document.benchmark.rows]
    first = speeds[0]
    assert first.row == "65536x256/float32" and first.floor_kind == "bandwidth"
    assert first.bytes == 201326592 and first.student_s == pytest.approx(4.9316000193357476e-05)
    # 201326592 bytes / 49.316 us and the floor's 47.3145 us / 49.316 us.
    assert first.gb_per_s == pytest.approx(4082.379, abs=1e-3)
    assert first.fraction_of_floor == pytest.approx(0.959415, abs=1e-6)
    assert first.flops is None and first.flops_per_s is None and first.missing is None
    assert first.bandwidth_bytes_per_s == H200_COPY_BANDWIDTH
    long_rows = {s.row: round(s.gb_per_s) for s in speeds if s.row.startswith("256x131072/")}
    assert long_rows == {"256x131072/float32": 2660, "256x131072/float16": 2703, "256x131072/bfloat16": 2684}
    for speed, row in zip(speeds, document.benchmark.rows, strict=True):
        # The same number the benchmark stored for the ranked method, and for a bandwidth
        # floor the achieved bandwidth over the copy bandwidth.
        assert speed.fraction_of_floor == pytest.approx(row.student_bandwidth_fraction_min["graph"], rel=1e-12)
        assert speed.fraction_of_floor == pytest.approx(speed.bytes_per_s / H200_COPY_BANDWIDTH, rel=1e-9)
        assert speed.ranked


def test_the_summary_names_the_long_rows_as_furthest_from_the_floor(document: ResultDocument) -> None:
    summary = summarize(document)
    assert summary.verdict is Verdict.PASSED
    assert [(s.row, round(s.fraction_of_floor, 4)) for s in summary.furthest_from_floor] == [
        ("256x131072/float32", 0.6251), ("256x131072/bfloat16", 0.6307), ("256x131072/float16", 0.6352)]
    assert summary.speed == ("furthest from the floor (100% = at it): 256x131072/float32 63% (2660 GB/s), "
                             "256x131072/bfloat16 63% (2684 GB/s), 256x131072/float16 64% (2703 GB/s)")
    assert summary.line == "passed: 13/13 checks passed"  # the one-line result is unchanged


def test_a_failed_or_benchmark_free_grading_names_no_row(document: ResultDocument) -> None:
    without = document.model_copy(update={"benchmark": None})
    assert summarize(without).furthest_from_floor == [] and summarize(without).speed is None
    failed = document.model_copy(update={"verdict": Verdict.FAILED, "checks": [
        document.checks[0].model_copy(update={"passed": False, "message": "wrong"}), *document.checks[1:]]})
    assert summarize(failed).furthest_from_floor == []


def test_a_row_that_was_not_timed_or_has_no_floor_says_why(document: ResultDocument) -> None:
    row = document.benchmark.rows[0]
    untimed = row.model_copy(update={"impls": {"student": {"error": "not recorded"}}, "ranked": False})
    speed = row_speed(untimed)
    assert (speed.missing, speed.fraction_of_floor, speed.bytes_per_s) == ("not timed", None, None)
    no_floor = row.model_copy(update={"floor_s_min": None})
    assert row_speed(no_floor).missing == "no floor" and row_speed(no_floor).gb_per_s == pytest.approx(4082.379, abs=1e-3)
    assert furthest_from_floor([row_speed(untimed), row_speed(no_floor)]) == []
    assert speed_line([row_speed(untimed)]) is None
    # A row that counts no bytes (no floor object, no bytes_min) still has its fraction.
    bare = row_speed(row.model_copy(update={"floor": None, "bytes_min": None}))
    assert (bare.floor_kind, bare.bytes_per_s) == (None, None)
    assert speed_line([bare]) == "furthest from the floor (100% = at it): 65536x256/float32 96%"


def test_a_roofline_row_gets_its_flop_rate_and_the_larger_floor() -> None:
    # A gemm_epilogue row as score.row_floor builds it from the assignment's own floor
    # (2MNK FLOPs; a, b, bias read and out written once), with the recorded H200 copy
    # bandwidth and an illustrative float16 peak (no GPU run of this round recorded one).
    from grader.assignments import get_assignment
    from grader.benchmark.score import row_floor

    spec = get_assignment("gemm_epilogue").benchmark
    shape, peak = (4096, 4096, 4096), 700e12
    floor = row_floor(spec.floor, shape, "float16", H200_COPY_BANDWIDTH, {"float16": {"flops_per_s": peak}})
    assert floor["kind"] == "roofline" and floor["flops"] == 2 * 4096 ** 3
    student_s = 2 * floor["s_min"]
    row = BenchmarkRow(id="4096x4096x4096/float16", shape=list(shape), dtype="float16", floor=floor,
                       bytes_min=floor["bytes_min"], floor_s_min=floor["s_min"], ranked=True,
                       impls={"student": {"graph": {"median_s": student_s}}})
    speed = row_speed(row)
    assert speed.floor_kind == "roofline" and speed.fraction_of_floor == pytest.approx(0.5)
    assert speed.tflop_per_s == pytest.approx(2 * 4096 ** 3 / student_s / 1e12)
    assert speed.tflop_per_s == pytest.approx(350.0)  # compute-bound: half the peak
    assert speed.gb_per_s == pytest.approx(floor["bytes_min"] / student_s / 1e9)
    assert speed.peak_flops_per_s == peak


def test_grader_check_prints_every_rows_rate_and_the_furthest_rows(document: ResultDocument) -> None:
    buffer = io.StringIO()
    render_result(document, Console(file=buffer, width=200))
    text = buffer.getvalue()
    assert text.splitlines()[1].startswith("  furthest from the floor (100% = at it): 256x131072/float32 63%")
    row = next(line for line in text.splitlines() if "65536x256/float32" in line)
    assert ["49.3 us", "4082 GB/s", "96%", "47.3 us (bandwidth)", "4255 GB/s copy bandwidth"] == [
        cell.strip() for cell in row.split("│")[2:-1]]
    assert text.index("speed against the floor") < text.index("benchmark: geomean_speedup_vs_baseline_graph")
