"""CPU tests of the benchmark's parent-side logic and the timing harness's pure parts.

The GPU path itself (recording, the trusted replay timer, event and graph timing, the exploit
files) runs on the lent GPU machine through scripts/gpu_bench.py; see docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import jsonschema
import pytest
import torch
from safetensors.torch import save_file

from grader import benchmark as bench
from grader.assignments import get_assignment
from grader.assignments.softmax_backward.oracle import vjp_fp64
from grader.benchmark import cli as bench_cli
from grader.benchmark import score
from grader.benchmark.cli import main_benchmark, print_benchmark
from grader.benchmark.options import benchmark_rows
from grader.benchmark.verify import load_bench_module, verify_rows
from grader.harness import timing
from grader.report.document import BenchmarkExitCode

ASSIGNMENT = get_assignment("softmax_backward")
SPEC = ASSIGNMENT.benchmark
INPUTS = load_bench_module(SPEC.bench_file)

CUDA = torch.cuda.is_available()


# ---- rows, bytes, geometric mean, flags ----------------------------------------------------
def test_rows_cover_every_shape_and_dtype_of_the_spec():
    rows = benchmark_rows(SPEC, bench.BenchmarkOptions())
    assert len(rows) == len(SPEC.shapes) * len(SPEC.dtypes)
    ids = {r["id"] for r in rows}
    for shape in [(65536, 256), (4096, 4096), (1024, 32768), (256, 131072)]:
        for dtype in ("float32", "float16", "bfloat16"):
            assert f"{shape[0]}x{shape[1]}/{dtype}" in ids
    assert len({r["seed"] for r in rows}) == len(rows)


def test_rows_can_be_overridden():
    rows = benchmark_rows(SPEC, bench.BenchmarkOptions(shapes=((8, 16),), dtypes=("float16",)))
    assert rows == [{"id": "8x16/float16", "shape": [8, 16], "dtype": "float16", "seed": 2024}]


@pytest.mark.parametrize("dtype,size", [("float32", 4), ("float16", 2), ("bfloat16", 2)])
def test_bytes_count_two_reads_and_one_write(dtype, size):
    assert SPEC.floor.kind == "bandwidth"
    assert SPEC.floor.bytes((65536, 256), dtype)["min"] == 3 * 65536 * 256 * size
    assert SPEC.floor.bytes((256, 131072), dtype)["two_pass"] == 5 * 256 * 131072 * size


def test_geometric_mean():
    assert score.geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    assert score.geometric_mean([2.0, 2.0, 2.0]) == pytest.approx(2.0)
    assert score.geometric_mean([]) is None
    assert score.geometric_mean([1.0, 0.0]) is None
    assert score.geometric_mean([1.0, -2.0]) is None
    assert score.geometric_mean([1.0, float("nan")]) is None


def test_implausible_time_flag():
    floor = 100e-6
    assert score.is_implausible(79e-6, floor)
    assert not score.is_implausible(81e-6, floor)
    assert not score.is_implausible(150e-6, floor)
    assert not score.is_implausible(None, floor)
    assert score.is_implausible(-1e-6, floor)  # a negative graph difference is not a time


def test_event_wall_cross_check():
    assert score.event_undercuts_wall(2e-6, 60e-6)  # side-stream work: events saw nothing
    assert not score.event_undercuts_wall(55e-6, 60e-6)
    assert score.event_undercuts_wall(55e-6, 80e-6)  # a side stream seen as host launch time
    assert not score.event_undercuts_wall(5e-6, 12e-6)  # within the jitter slack


# ---- harness helpers ------------------------------------------------------------------------
def test_summary_statistics():
    stats = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0], "sem")
    assert stats["median_s"] == 3.0 and stats["q25_s"] == 2.0 and stats["q75_s"] == 4.0
    assert stats["mean_s"] == 3.0 and stats["min_s"] == 1.0 and stats["n"] == 5
    assert stats["sem_s"] == pytest.approx(math.sqrt(2.5 / 5))


def test_sampling_stops_on_sem_budget_or_count():
    opts = {"max_samples": 100, "budget_s": 10.0, "min_samples": 5, "target_rel_sem": 0.01}
    now = time.perf_counter()
    assert timing._stop_reason([1.0] * 4, now, opts) is None  # under min_samples
    assert timing._stop_reason([1.0] * 5, now, opts) == "sem"
    noisy = [1.0, 2.0] * 10
    assert timing._stop_reason(noisy, now, opts) is None
    assert timing._stop_reason(noisy, now - 11.0, opts) == "budget"
    assert timing._stop_reason(noisy * 5, now, opts) == "max_samples"


def test_sample_rows_are_spread_and_include_the_last():
    rows = timing.sample_row_indices(256, 8)
    assert rows == sorted(set(rows)) and rows[-1] == 255 and len(rows) <= 9 and rows[0] < 32
    assert timing.sample_row_indices(3, 8) == [0, 1, 2]


def test_inputs_are_reproducible_from_the_seed():
    y1, g1 = INPUTS.make_inputs((4, 33), torch.bfloat16, 123, device="cpu")
    y2, g2 = INPUTS.make_inputs((4, 33), torch.bfloat16, 123, device="cpu")
    y3, _ = INPUTS.make_inputs((4, 33), torch.bfloat16, 124, device="cpu")
    assert torch.equal(y1, y2) and torch.equal(g1, g2) and not torch.equal(y1, y3)
    assert y1.dtype == torch.bfloat16 and y1.shape == (4, 33) and bool((y1 >= 0).all())
    assert timing.stage_seed(7, 1, 2) != timing.stage_seed(7, 2, 1)


def test_child_without_cuda_reports_instead_of_timing(tmp_path):
    if CUDA:
        pytest.skip("this machine has a GPU")
    import subprocess
    import sys

    from grader.sandbox.run import stage_harness

    harness = stage_harness(tmp_path / "harness", {"assignment_bench.py": SPEC.bench_file})
    work = tmp_path / "work"
    work.mkdir()
    from grader.benchmark.children import write_plan

    write_plan(work, rows=[], options=bench.BenchmarkOptions(), assignment=ASSIGNMENT, reference_file=None)
    done = subprocess.run([sys.executable, "-I", str(harness / "bench_child.py"), str(work)], timeout=120,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads((work / "bench_result.json").read_text())
    assert "no CUDA device" in result["error"] and result["rows"] == []


# ---- re-verification of timed outputs -------------------------------------------------------
def _fake_outputs(row, stage_for_method, sets, corrupt=None):
    """Outputs as the child would keep them, computed from the given stage's inputs."""
    shape, dtype = tuple(row["shape"]), getattr(torch, row["dtype"])
    kept = timing.sample_row_indices(shape[0], 4)
    tensors, saved = {}, {}
    for method, stage in stage_for_method.items():
        for k in range(sets):
            y, g = INPUTS.make_inputs(shape, dtype, timing.stage_seed(row["seed"], stage, k), device="cpu")
            dx, _ = vjp_fp64(y, g)
            out = dx.to(dtype)
            if corrupt == method and k == 1:
                out[kept[0], 0] += 1.0
            tensors[f"student|{method}|set{k}|0"] = out[kept].contiguous()
            if k == 0:
                tensors[f"student|{method}|full|0"] = out.contiguous()
        saved[method] = {"index": {"M": kept}, "full_set": 0}
    return tensors, saved


def _verify(tmp_path, stage_for_method, corrupt=None):
    row = {"id": "8x40/float16", "shape": [8, 40], "dtype": "float16", "seed": 5}
    tensors, saved = _fake_outputs(row, stage_for_method, sets=2, corrupt=corrupt)
    save_file(tensors, str(tmp_path / "bench_out_0.safetensors"))
    stats = {"median_s": 1e-5}
    document = {"rows": [{"id": row["id"], "outputs_file": "bench_out_0.safetensors",
                          "impls": {"student": {"event": stats, "graph": stats, "saved": saved}}}]}
    verify_rows(ASSIGNMENT, document, tmp_path, [row], sets=2, device="cpu")
    return document["rows"][0]["impls"]["student"]["verified"]


def test_verification_accepts_outputs_of_the_timed_values(tmp_path):
    verified = _verify(tmp_path, {"event": 1, "graph": 2})
    assert verified["event"]["passed"] and verified["graph"]["passed"]
    kept = len(timing.sample_row_indices(8, 4))
    assert verified["event"]["elements_checked"] == 2 * kept * 40 + 8 * 40


def test_verification_rejects_stale_memoised_outputs(tmp_path):
    verified = _verify(tmp_path, {"event": 0, "graph": 0})  # outputs of the warm-up values
    assert not verified["event"]["passed"] and not verified["graph"]["passed"]


def test_verification_rejects_one_wrong_element(tmp_path):
    verified = _verify(tmp_path, {"event": 1, "graph": 2}, corrupt="graph")
    assert verified["event"]["passed"] and not verified["graph"]["passed"]
    assert "set 1" in verified["graph"]["problems"][0]


# ---- assembly and the JSON schema --------------------------------------------------------------
RESULT_SCHEMA = {
    "type": "object",
    "required": ["schema", "headline", "summary", "baseline", "scopes", "date_utc", "gpu", "versions",
                 "copy_bandwidth", "flags", "rows", "options"],
    "properties": {
        "headline": {
            "type": "object",
            "required": ["name", "value", "baseline", "method", "rows", "reason"],
            "properties": {"name": {"const": "geomean_speedup_vs_baseline_graph"},
                           "value": {"type": ["number", "null"]},
                           "baseline": {"const": "torch_fp32_expression"},
                           "method": {"const": "graph"}},
        },
        "rows": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "shape", "dtype", "bytes_min", "bytes_two_pass", "floor_s_min",
                             "floor_s_two_pass", "impls", "ratio_student_over_baseline", "speedup_vs_baseline",
                             "student_bandwidth_fraction_min", "streaming_probe", "flags", "ranked", "scope"],
                "properties": {
                    "impls": {"type": "object", "required": ["student"]},
                    "ratio_student_over_baseline": {"type": "object",
                                                    "properties": {"event": {"type": "number"},
                                                                   "graph": {"type": "number"}}},
                    "flags": {"type": "array", "items": {"type": "string"}},
                    "scope": {"type": "string", "minLength": 40},
                },
            },
        },
    },
}


def _stats(median):
    return {"median_s": median, "q25_s": median * 0.99, "q75_s": median * 1.01, "mean_s": median,
            "sem_s": median * 1e-3, "min_s": median * 0.98, "max_s": median * 1.1, "n": 50, "stop": "sem"}


def _samples(median):
    return {"samples_s": [median * 0.99, median, median, median * 1.01, median], "stop": "sem"}


def _peer(event, graph, *, passed=True):
    verified = {"passed": passed, "elements_checked": 10, "worst_error_over_tolerance": 0.1,
                "problems": [] if passed else ["set 0: stale"]}
    return {"event": _samples(event), "graph": _samples(graph), "verified": {"event": verified, "graph": verified}}


def _student(event, graph, *, passed=True, wall_bound=None):
    verified = {"calls_verified": 40, "elements_outside_tolerance": 0 if passed else 7,
                "worst_error_over_tolerance": 0.3 if passed else 2.5, "passed": passed}
    return {"event": _samples(event), "graph": _samples(graph), "event_verified": verified, "graph_verified": verified,
            "wall": {"cpu_call_median_s": 1e-5, "wall_median_s": 3e-5, "sync_floor_s": 1e-6,
                     "gpu_lower_bound_median_s": wall_bound if wall_bound is not None else graph, "reps": 12},
            "launches": 1, "persisting_l2_limit_after": 0}


def _docs(student_graph=(100e-6, 100e-6), **student_kwargs):
    options = bench.BenchmarkOptions(shapes=((1024, 1024), (2048, 2048)), dtypes=("float32",))
    rows = benchmark_rows(SPEC, options)
    peers = {"copy_bandwidth": {"bytes_per_s": 4.0e12}, "gpu": {"name": "NVIDIA H200"},
             "versions": {"torch": "x", "triton": "y"}, "flush_bytes": 256 << 20,
             "rows": [{"id": r["id"], "impls": {
                 "torch_fp32_expression": _peer(300e-6, 200e-6 * (i + 1)),
                 "aten_softmax_backward_data": _peer(120e-6, 110e-6),
                 "reference": _peer(90e-6, 80e-6),
                 "torch_compile_fp32_expression": _peer(150e-6, 100e-6)},
                       "streaming_probe": {"what": "torch.add(y, g)", "graph": _samples(80e-6)}}
                      for i, r in enumerate(rows)]}
    student = {r["id"]: _student(student_graph[i] * 1.2, student_graph[i], **student_kwargs) for i, r in enumerate(rows)}
    return rows, options, peers, student


def _assemble(rows, options, peers, student, **extra):
    return score.assemble(spec=SPEC, student_rows=student, peers_doc=peers, rows=rows, options=options, **extra)


def test_a_result_without_a_floor_is_a_valid_document_and_says_why():
    """No copy bandwidth measured: the rows' fractions are null, the headline says why, and
    the object still validates as the result document's typed BenchmarkResult."""
    from grader.report.benchmark_result import BenchmarkResult

    rows, options, peers, student = _docs()
    peers = {k: v for k, v in peers.items() if k != "copy_bandwidth"}
    result = _assemble(rows, options, peers, student)
    typed = BenchmarkResult.model_validate(result)
    assert typed.headline.value is None and "copy bandwidth" in typed.headline.reason
    assert typed.rows[0].floor["kind"] == "bandwidth" and typed.rows[0].floor["missing"] == ["copy bandwidth"]
    assert typed.rows[0].student_bandwidth_fraction_min["graph"] is None
    assert typed.rows[0].flags == ["no floor"]


def test_compute_and_roofline_floors_use_the_measured_peak():
    from grader.assignments.protocol import Floor

    def moved(shape, dtype):
        return {"min": 1_000_000, "two_pass": 2_000_000}

    def flops(shape, dtype):
        return 4_000_000_000

    peaks = {"float16": {"flops_per_s": 1e15}}
    compute = score.row_floor(Floor("compute", flops=flops), (8, 8), "float16", 1e12, peaks)
    assert compute["s_min"] == compute["s_two_pass"] == pytest.approx(4e-6)
    roofline = score.row_floor(Floor("roofline", bytes=moved, flops=flops), (8, 8), "float16", 1e12, peaks)
    assert roofline["s_min"] == pytest.approx(4e-6) and roofline["s_two_pass"] == pytest.approx(4e-6)
    memory_bound = score.row_floor(Floor("roofline", bytes=moved, flops=flops), (8, 8), "float16", 1e11, peaks)
    assert memory_bound["s_min"] == pytest.approx(1e-5) and memory_bound["s_two_pass"] == pytest.approx(2e-5)
    assert "the larger of" in roofline["what"] and roofline["peak_flops_per_s"] == 1e15
    missing = score.row_floor(Floor("compute", flops=flops), (8, 8), "bfloat16", 1e12, peaks)
    assert missing["missing"] == ["bfloat16 matrix-multiply peak"] and math.isnan(missing["s_min"])
    with pytest.raises(ValueError):
        Floor("roofline", bytes=moved)


def test_assembled_result_matches_schema_and_headline():
    rows, options, peers, student = _docs()
    result = _assemble(rows, options, peers, student, sandbox="bubblewrap")
    jsonschema.validate(json.loads(json.dumps(result)), RESULT_SCHEMA)
    # baseline graph 200 us and 400 us over student 100 us: speedups 2 and 4, geomean sqrt(8)
    assert result["headline"]["value"] == pytest.approx(math.sqrt(8))
    assert result["headline"]["reason"] is None
    row = result["rows"][0]
    assert row["ratio_student_over_baseline"]["graph"] == pytest.approx(0.5)
    assert row["ratio_student_over_baseline"]["event"] == pytest.approx(120e-6 / 300e-6)
    floor = 3 * 1024 * 1024 * 4 / 4.0e12
    assert row["floor_s_min"] == pytest.approx(floor)
    assert row["student_bandwidth_fraction_min"]["graph"] == pytest.approx(floor / 100e-6)
    assert row["ranked"] and row["flags"] == []
    assert "event" in row["scope"] and "graph" in row["scope"]
    # The streaming probe (torch.add of the same shape): 80 us, i.e. floor / 80 us of copy
    # bandwidth; student 100 us = 1.25x it
    assert row["streaming_probe"]["graph_s"] == pytest.approx(80e-6)
    assert row["streaming_probe"]["bandwidth_fraction_min"] == pytest.approx(floor / 80e-6)
    assert row["streaming_probe"]["student_time_over_probe"] == pytest.approx(1.25)


def test_streaming_probe_is_reported_but_never_ranks():
    rows, options, peers, student = _docs()
    peers["rows"][0]["streaming_probe"] = {"error": "RuntimeError: capture failed"}
    del peers["rows"][1]["streaming_probe"]
    result = _assemble(rows, options, peers, student)
    assert result["headline"]["value"] == pytest.approx(math.sqrt(8))  # unchanged: not part of the score
    assert result["rows"][0]["streaming_probe"] == {"error": "RuntimeError: capture failed"}
    assert result["rows"][1]["streaming_probe"] == {"error": "not measured"}


def test_wrong_timed_outputs_earn_no_score():
    rows, options, peers, student = _docs(passed=False)
    result = _assemble(rows, options, peers, student)
    assert result["headline"]["value"] is None
    assert "wrong output in event-timed calls: 7 elements outside tolerance in 40 verified calls" in result["headline"]["reason"]


def test_unreplayable_row_earns_no_score_and_says_why():
    rows, options, peers, student = _docs()
    student[rows[1]["id"]] = {"error": "the call's launches cannot be replayed: a tensor-descriptor argument"}
    result = _assemble(rows, options, peers, student)
    assert result["headline"]["value"] is None and "tensor-descriptor" in result["headline"]["reason"]


def test_rows_the_peers_child_never_timed_say_so():
    """As on the H200 (2026-12-05): the peers child ended early and left the last rows with no
    peer; the headline says which row lacks its baseline and how the child ended."""
    rows, options, peers, student = _docs()
    peers["rows"] = peers["rows"][:1]
    peers["returncode"], peers["log_tail"] = -9, "RuntimeError: out of space\n"
    result = _assemble(rows, options, peers, student)
    assert result["headline"]["value"] is None
    reason = result["headline"]["reason"]
    assert "the peers child ended with status -9 before timing every row: RuntimeError: out of space" in reason
    assert result["rows"][0]["ranked"]
    assert result["rows"][1]["flags"] == ["baseline torch_fp32_expression not timed on this row: "
                                          "the peers child left no time for it"]
    del peers["returncode"]  # a child that ended well but left a row out: the row says so alone
    result = _assemble(rows, options, peers, student)
    assert "peers child ended" not in result["headline"]["reason"]
    assert "not timed on this row" in result["headline"]["reason"]


def test_a_second_peers_child_fills_the_rows_the_first_did_not_reach_and_is_said():
    """A first child that ended badly leaves its earlier rows; the rows a second child timed
    rank as the first's would have, and the benchmark says how the first one ended."""
    rows, options, peers, student = _docs()
    peers["rows"][1]["impls"]["reference"]["graph"] = _samples(70e-6)  # as timed by the second child
    peers["earlier_endings"] = [{"returncode": -6, "log_tail": "Fatal Python error: Aborted\n", "rows_done": 1}]
    peers["rows"][1]["process"] = {"open_fds": 31, "threads": 9, "max_rss_bytes": 1 << 30, "workdir_free_bytes": 1 << 32}
    result = _assemble(rows, options, peers, student)
    assert result["rows"][1]["peers_process"]["open_fds"] == 31 and result["rows"][0]["peers_process"] == {}
    assert result["headline"]["value"] is not None and result["headline"]["reason"] is None
    assert result["peers_earlier_endings"] == [
        f"a peers child ended with status -6 after finishing 1 of {len(rows)} rows; a second one timed the rest: "
        "Fatal Python error: Aborted"]


#: A stand-in for the peers child (grader/harness/bench_child.py) with its file protocol: it
#: reads the plan and writes PeersResult documents; while MARKER does not exist it creates it,
#: reports its first row as done and dies like a child killed by the kernel, with a last word.
_DYING_PEERS_CHILD = """
import json, os, signal, sys
work, marker = sys.argv[1], {marker!r}
plan = json.load(open(os.path.join(work, "bench_plan.json")))
ids = [row["id"] for row in plan["rows"]]
def write(name, done, **extra):
    rows = [{{"id": i, "impls": {{"torch_fp32_expression": {{"error": "plan " + ",".join(ids)}}}}}} for i in done]
    json.dump({{"mode": "peers", "rows": rows, "copy_bandwidth": {{"bytes_per_s": 1e12}}, **extra}},
              open(os.path.join(work, name), "w"))
if not os.path.exists(marker):
    open(marker, "w").close()
    write("bench_progress.json", ids[:1], copy_bandwidth={{"bytes_per_s": 2e12}})
    print("terminate called: Resource temporarily unavailable", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGABRT)
write("bench_result.json", ids, copy_bandwidth={{"bytes_per_s": 3e12}})
"""


def _dying_peers_harness(monkeypatch, tmp_path, *, dies: bool):
    from grader.benchmark import children

    marker, staged = tmp_path / "died-once", []
    if not dies:
        marker.touch()

    def stage(assignment, settings):
        folder = tmp_path / f"harness-{len(staged)}"
        staged.append(folder)
        folder.mkdir()
        (folder / "bench_child.py").write_text(_DYING_PEERS_CHILD.format(marker=str(marker)))
        return folder / "bench_child.py"

    monkeypatch.setattr(children, "_stage", stage)
    return children, staged


def test_a_peers_child_that_dies_is_followed_by_one_for_the_rows_it_left(monkeypatch, tmp_path):
    """As on the H200 (2026-12-05), where the peers child ended inside gradings after the
    float16 rows: a second real child is planned with the rows the first did not finish only,
    and the document keeps the first's measured bandwidth and how it ended."""
    children, staged = _dying_peers_harness(monkeypatch, tmp_path, dies=True)
    options = bench.BenchmarkOptions(shapes=((64, 64), (128, 64), (256, 64)), dtypes=("float32",))
    rows = benchmark_rows(SPEC, options)
    document = children.run_peers(ASSIGNMENT, options=options, rows=rows)
    ids = [row["id"] for row in rows]
    assert [entry["id"] for entry in document["rows"]] == ids
    planned = [entry["impls"]["torch_fp32_expression"]["error"] for entry in document["rows"]]
    assert planned == [f"plan {ids[0]},{ids[1]},{ids[2]}", f"plan {ids[1]},{ids[2]}", f"plan {ids[1]},{ids[2]}"]
    assert document["copy_bandwidth"] == {"bytes_per_s": 2e12}, "the floors keep the first child's measurement"
    assert document["returncode"] == 0 and document["complete"]
    [ending] = document["earlier_endings"]
    assert ending["returncode"] == -6 and ending["rows_done"] == 1
    assert "Resource temporarily unavailable" in ending["log_tail"]
    assert len(staged) == 2


def test_each_row_of_the_peers_child_records_what_it_might_run_out_of(tmp_path):
    """bench_child.process_state: written into every row (PeerRowResult.process), so the end of
    a child that stops early shows its descriptors, threads, memory and free work space."""
    from grader.harness import bench_child
    from grader.harness.protocol import PeerRowResult

    state = bench_child.process_state(str(tmp_path))
    assert state["open_fds"] > 2 and state["threads"] >= 1 and state["max_rss_bytes"] > 10 << 20
    assert state["workdir_free_bytes"] > 0
    assert PeerRowResult(id="64x64/float32", process=state).process == state


def test_a_peers_child_that_ended_well_is_not_run_again(monkeypatch, tmp_path):
    children, staged = _dying_peers_harness(monkeypatch, tmp_path, dies=False)
    options = bench.BenchmarkOptions(shapes=((64, 64),), dtypes=("float32",))
    document = children.run_peers(ASSIGNMENT, options=options, rows=benchmark_rows(SPEC, options))
    assert document["returncode"] == 0 and document["earlier_endings"] == []
    assert len(staged) == 1


def test_statistics_are_computed_here_from_the_raw_samples():
    rows, options, peers, student = _docs()
    student[rows[0]["id"]]["graph"] = {"samples_s": [1e-4, 3e-4, 2e-4], "stop": "budget", "median_s": 1.0}
    result = _assemble(rows, options, peers, student)
    graph = result["rows"][0]["impls"]["student"]["graph"]
    assert graph["median_s"] == pytest.approx(2e-4) and "samples_s" not in graph


def test_time_under_the_floor_is_not_ranked():
    rows, options, peers, student = _docs(student_graph=(1e-6, 100e-6))
    result = _assemble(rows, options, peers, student)
    assert result["headline"]["value"] is None
    assert not result["rows"][0]["ranked"] and result["rows"][1]["ranked"]
    assert any("implausible graph time" in f for f in result["rows"][0]["flags"])


def test_side_stream_work_is_flagged_by_the_wall_clock():
    rows, options, peers, student = _docs(wall_bound=400e-6)  # events 120 us, wall saw 400 us of GPU work
    result = _assemble(rows, options, peers, student)
    assert result["headline"]["value"] is None
    assert any("undercuts the device-synchronised wall clock" in f for f in result["rows"][0]["flags"])


def test_a_failed_replay_timer_earns_no_score():
    rows, options, peers, student = _docs()
    result = _assemble(rows, options, peers, student, global_flags=["the replay timer failed: killed by SIGKILL"])
    assert result["headline"]["value"] is None and "SIGKILL" in result["headline"]["reason"]


def test_missing_copy_bandwidth_means_no_floor_and_no_score():
    rows, options, peers, student = _docs()
    peers["copy_bandwidth"] = None
    result = _assemble(rows, options, peers, student)
    assert result["headline"]["value"] is None


# ---- entry points without a GPU --------------------------------------------------------------
@pytest.mark.skipif(CUDA, reason="this machine has a GPU")
def test_benchmark_command_refuses_without_a_gpu(tmp_path, capsys):
    source = tmp_path / "k.py"
    source.write_text("def softmax_backward(y, g):\n    return y\n")
    code = main_benchmark(argparse.Namespace(path=str(source), output=str(tmp_path / "r.json"),
                                             assignment="softmax_backward", unsafe_no_sandbox=True))
    assert code == BenchmarkExitCode.NO_GPU != 0
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and " us" not in err
    assert not (tmp_path / "r.json").exists()
    with pytest.raises(bench.NoGPU):
        bench_cli.benchmark_file(source, output=None, assignment="softmax_backward")


def test_print_benchmark_renders_a_table():
    from rich.console import Console

    rows, options, peers, student = _docs()
    result = _assemble(rows, options, peers, student)
    console = Console(record=True, width=200)
    print_benchmark(result, console, assignment="softmax_backward")
    text = console.export_text()
    assert "1024x1024/float32" in text and "headline" in text and "2.828" in text
    assert "(probe 4%)" in text  # 3 x 1024 x 1024 x 4 bytes at 4 TB/s is 3.1 us, 4% of the add's 80 us


def test_result_is_strict_json():
    rows, options, peers, student = _docs()
    student[rows[0]["id"]]["event"]["samples_s"][0] = float("nan")
    result = _assemble(rows, options, peers, student)
    json.dumps(result, allow_nan=False)
    assert score.finite_json({"a": [float("inf"), 1.0], "b": float("nan")}) == {"a": [None, 1.0], "b": None}
