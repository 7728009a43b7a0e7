"""GPU benchmark of a submission against the named baseline, the peers and the bandwidth floor.

Entry points (the CLI and the runner call these; keyword-only options):

    run_benchmark(source_dir: Path, *, settings: GraderSettings | None = None,
                  assignment: str = "softmax_backward", options: BenchmarkOptions | None = None,
                  peers: dict | None = None, cache_dir: Path | None = None) -> dict
        ``source_dir`` holds the submission as ``softmax_backward.py`` (the runner copies it
        there after every check passed); ``cache_dir`` is the submission's Triton cache
        (passed to the sandbox). Peers are timed afresh unless ``peers`` is given or a peers
        result younger than ``options.peers_cache_s`` is cached for this GPU and software. Returns the ``benchmark`` object of the result
        document (docs/architecture.md); ``headline.value`` is None when the kernel earns no
        score, and ``error`` says why when the benchmark could not run at all.
        Raises NoGPU when torch sees no CUDA device.
    benchmark_file(path: Path, *, output: Path | None, settings: GraderSettings | None = None,
                   assignment: str = "softmax_backward", options: BenchmarkOptions | None = None,
                   peers: dict | None = None) -> dict
        ``run_benchmark`` on any file (copied to a private folder under the module's name);
        writes the JSON to ``output`` when given.
    run_peers(*, assignment: str = "softmax_backward", options: BenchmarkOptions | None = None,
              settings: GraderSettings | None = None) -> dict
        Times only the peers and the copy bandwidth (a child that never imports a submission);
        its result can be passed as ``peers=`` to reuse it for several submissions.
    main_benchmark(args: argparse.Namespace) -> int
        ``grader benchmark PATH [--output F] [--assignment A] [--unsafe-no-sandbox]``: exit 0
        with a ranked score, 1 when the kernel earned no score, 2 when the benchmark failed,
        3 when there is no GPU (it never reports interpreter timings).
    print_benchmark(result: dict, console) -> None
        The rich table of a result.

Who does what: two child processes time (grader/harness/bench_child.py): one, in the sandbox,
imports the submission and times only it; the other never imports it and times the peers
(the assignment's baseline ``torch_fp32_expression``, ``aten_softmax_backward_data``, the
course ``reference`` kernel, ``torch_compile_fp32_expression``), the device-to-device copy
bandwidth and, per row, ``torch.add(y, g)`` of the row's shape (``same_shape_add``: the same
3 accesses per element with no reduction, what streaming those bytes costs at that size), so
a submission cannot slow its comparisons down. This process keeps the
statistics: it re-verifies the outputs of timed calls against the fp64 oracle on values it
regenerates from the same seeds, flags times faster than the bandwidth floor allows, checks the
event/wall-clock cross-check, and computes the headline: the geometric mean over rows of
baseline_time / student_time under CUDA-graph timing.

Units: times in seconds, sizes in bytes, bandwidth in bytes/s (TB/s = 1e12 bytes/s in tables).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.runner import package_version

HARNESS = Path(__file__).parent / "harness" / "bench_child.py"
REFERENCE_FILES = {"softmax_backward": Path(__file__).parent / "assignments" / "softmax_backward_reference.py"}
SCHEMA_VERSION = 1
EXIT_OK, EXIT_NO_SCORE, EXIT_ERROR, EXIT_NO_GPU = 0, 1, 2, 3

BASELINE = "torch_fp32_expression"
PEERS = ("torch_fp32_expression", "aten_softmax_backward_data", "reference", "torch_compile_fp32_expression")
STUDENT = "student"
HEADLINE_NAME = "geomean_speedup_vs_baseline_graph"

# Accesses per element: y read, g read, dx written. The 5-access floor adds a second read of y
# and g, which a kernel that cannot keep a whole row on chip needs (long rows).
ACCESSES_MIN = 3
ACCESSES_TWO_PASS = 5
# A time under IMPLAUSIBLE_FRACTION x the 3-access floor (i.e. above 1/0.8 = 125% of the copy
# bandwidth measured in the same run) is not physical for this streaming kernel: reads can run
# somewhat faster than a copy's mix of reads and writes, but not by a quarter. Such a row is
# flagged and not ranked.
IMPLAUSIBLE_FRACTION = 0.8
# Event/wall cross-check: the event median must not undercut the device-synchronised lower bound
# of the GPU work of the call on all streams by more than this factor and slack (jitter).
WALL_FACTOR = 0.8
WALL_SLACK_S = 5e-6

SCOPES = {
    STUDENT: "one call of the submission's softmax_backward(y, g): its Python wrapper (validation, "
             "output allocation) and every kernel it launches",
    "torch_fp32_expression": "the assignment's baseline: y.float(), g.float(), (y*g).sum(-1, keepdim=True), "
                             "y*(g-dot), .to(dtype): casts, elementwise kernels and one reduction, no autograd engine",
    "aten_softmax_backward_data": "torch.ops.aten._softmax_backward_data(g, y, -1, dtype): PyTorch's fused "
                                  "softmax-backward kernel, the op softmax's autograd node runs",
    "reference": "the course reference kernel (grader/assignments/softmax_backward_reference.py) with its wrapper",
    "torch_compile_fp32_expression": "torch.compile(baseline, dynamic=False, fullgraph=True), compiled once per "
                                     "shape and dtype before timing; guard checks included in event timing",
}
METHOD_SCOPE = (
    "Timed: the call on contiguous (M, N) inputs rotated among {sets} buffer sets, after an L2 flush "
    "(sum over a {flush_mib} MiB buffer) and a persisting-L2 reset. event = CUDA events on the calling "
    "stream around each call (host runs ahead, so launch overhead shows only where it exceeds the GPU "
    "time of the preceding flush); graph = {sets} calls with flushes captured in one CUDA graph, minus a "
    "flush-only graph, per call (no launch overhead; write-back of the call's dirty L2 lines during the "
    "next flush included). Not timed: input generation, the first call (compilation), warm-up, the "
    "flush itself, host-device synchronisation. Bytes: {accesses} accesses x M x N x element size."
)


class NoGPU(RuntimeError):
    """Timing needs a CUDA GPU and torch sees none."""


@dataclass(frozen=True)
class BenchmarkOptions:
    """Sampling and input settings of one benchmark run.

    Attributes:
        sets: buffer sets (y, g) the calls rotate through (inputs never served from L2).
        budget_s: time budget per implementation, row and timing method, seconds.
        min_samples / max_samples: sample count bounds per timing method.
        target_rel_sem: stop sampling once the standard error of the mean is this fraction of it.
        warmup_s: warm-up after the first (compiling) call, seconds (at least 3 calls).
        flush_bytes: L2 flush buffer size; 0 = max(4 x L2, 256 MiB).
        seed: base seed of all inputs (each row gets seed + its index).
        sample_rows: rows of every timed output kept for re-verification.
        save_full: keep one whole timed output per method and row of the submission.
        compile_peer: also time torch.compile of the baseline.
        copy_bytes: buffer size of the copy-bandwidth measurement.
        shapes / dtypes: override the assignment's benchmark rows (tests, quick runs).
        student_timeout_s / peers_timeout_s: wall-clock limits of the two children, seconds.
        peers_cache_s: reuse a peers result (same GPU, driver, versions, options and reference
            source) for this long, seconds; 0 times the peers with every submission.
    """

    sets: int = 4
    budget_s: float = 0.4
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
    shapes: tuple[tuple[int, int], ...] | None = None
    dtypes: tuple[str, ...] | None = None
    student_timeout_s: float = 600.0
    peers_timeout_s: float = 900.0
    peers_cache_s: float = 6 * 3600.0

    def child_options(self) -> dict:
        keys = ("sets", "budget_s", "min_samples", "max_samples", "target_rel_sem", "warmup_s",
                "flush_bytes", "sample_rows", "save_full", "compile_peer", "copy_bytes")
        return {k: getattr(self, k) for k in keys}


# ---- pure helpers (unit-tested on CPU) --------------------------------------------------
def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def element_size(dtype: str) -> int:
    return {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]


def benchmark_rows(module, options: BenchmarkOptions) -> list[dict]:
    """The (shape, dtype) rows to time: the assignment's BENCHMARK_SHAPES x BENCHMARK_DTYPES.

    Returns dicts with ``id`` ("MxN/dtype"), ``m``, ``n``, ``dtype`` (name) and ``seed``.
    """
    shapes = options.shapes or tuple(tuple(s) for s in module.BENCHMARK_SHAPES)
    dtypes = options.dtypes or tuple(dtype_name(d) for d in module.BENCHMARK_DTYPES)
    rows = []
    for dtype in dtypes:
        for m, n in shapes:
            rows.append({"id": f"{m}x{n}/{dtype}", "m": int(m), "n": int(n), "dtype": dtype,
                         "seed": options.seed + len(rows)})
    return rows


def bytes_moved(m: int, n: int, dtype: str, accesses: int = ACCESSES_MIN) -> int:
    """Bytes a kernel moves through device memory: ``accesses`` x M x N x element size."""
    return accesses * m * n * element_size(dtype)


def geometric_mean(values: list[float]) -> float | None:
    """Geometric mean of positive numbers; None for an empty list or any non-positive value."""
    if not values or any(not (v > 0 and math.isfinite(v)) for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def is_implausible(time_s: float | None, floor_s: float) -> bool:
    """True when a time beats the bandwidth floor by more than IMPLAUSIBLE_FRACTION allows."""
    return time_s is not None and time_s < IMPLAUSIBLE_FRACTION * floor_s


def event_undercuts_wall(event_median_s: float, gpu_lower_bound_s: float) -> bool:
    """True when event timing saw far less work than the device-synchronised wall clock did."""
    return event_median_s < WALL_FACTOR * gpu_lower_bound_s - WALL_SLACK_S


def _median(stats: dict | None) -> float | None:
    if not stats or "median_s" not in stats:
        return None
    value = stats["median_s"]
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


# ---- children ---------------------------------------------------------------------------
def _write_plan(workdir: Path, *, mode: str, rows: list[dict], options: BenchmarkOptions, module, extra: dict) -> None:
    plan = {"mode": mode, "rows": rows, "options": options.child_options(), "function": module.FUNCTION_NAME,
            "module_file": module.MODULE_FILE, **extra}
    (workdir / "bench_plan.json").write_text(json.dumps(plan))


def _read_child_result(workdir: Path) -> dict | None:
    for name in ("bench_result.json", "bench_progress.json"):
        path = workdir / name
        if path.exists():
            try:
                document = json.loads(path.read_text())
                if isinstance(document, dict):
                    document["complete"] = name == "bench_result.json"
                    return document
            except (OSError, ValueError):
                return None
    return None


def _load_outputs(workdir: Path, entry: dict) -> dict:
    from safetensors.torch import load_file

    name = entry.get("outputs_file")
    if not isinstance(name, str) or "/" in name:
        return {}
    try:
        return load_file(str(workdir / name))
    except Exception:  # noqa: BLE001 - a missing or corrupt file reads as "no outputs"
        return {}


def run_peers(*, assignment: str = "softmax_backward", options: BenchmarkOptions | None = None,
              settings=None, rows: list[dict] | None = None) -> dict:
    """Time the peers and the copy bandwidth in a child that never imports a submission.

    The child runs trusted code only (torch, the course reference), so it runs without the
    sandbox. Returns {"gpu", "versions", "copy_bandwidth", "rows": [{id, impls: {...}}], ...}
    with each implementation's outputs already re-verified (``verified``).
    """
    from grader.assignments import get_assignment

    options = options or BenchmarkOptions()
    module = get_assignment(assignment)
    rows = rows or benchmark_rows(module, options)
    work_root = getattr(settings, "work_root", None) if settings is not None else None
    workdir = Path(tempfile.mkdtemp(prefix="bench-peers-", dir=work_root))
    started = time.monotonic()
    try:
        shutil.copy(REFERENCE_FILES[assignment], workdir / "course_reference.py")
        peer_options = BenchmarkOptions(**{**asdict(options), "save_full": False})
        _write_plan(workdir, mode="peers", rows=rows, options=peer_options, module=module,
                    extra={"reference_file": "course_reference.py"})
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        try:
            proc = subprocess.run([sys.executable, "-I", str(HARNESS), str(workdir)], cwd=workdir, env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=options.peers_timeout_s)
            log_tail, returncode = (proc.stdout + proc.stderr)[-4000:], proc.returncode
        except subprocess.TimeoutExpired as exc:
            log_tail, returncode = f"timed out after {options.peers_timeout_s} s: {str(exc.stderr)[-2000:]}", None
        document = _read_child_result(workdir) or {"error": "the peers process left no result", "rows": []}
        document["returncode"] = returncode
        document["log_tail"] = log_tail
        verify_rows(module, document, workdir, rows, options.sets)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    document["duration_s"] = time.monotonic() - started
    return document


def _peers_cache_path(assignment: str, options: BenchmarkOptions, settings) -> Path:
    """Where a peers result for this GPU, software, options and reference source is cached."""
    import hashlib

    import torch

    props = torch.cuda.get_device_properties(0)
    key = json.dumps({
        "gpu": props.name, "uuid": str(getattr(props, "uuid", "")), "torch": torch.__version__,
        "triton": package_version("triton"), "grader": package_version("kernel-grader"), "assignment": assignment,
        "options": {k: v for k, v in asdict(options).items() if k not in ("student_timeout_s", "peers_cache_s", "save_full")},
        "reference": hashlib.sha256(REFERENCE_FILES[assignment].read_bytes()).hexdigest(),
        "harness": hashlib.sha256(HARNESS.read_bytes()).hexdigest(),
    }, sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    root = Path(getattr(settings, "work_root", None) or tempfile.gettempdir())
    return root / f"grader-bench-peers-{digest}.json"


def cached_peers(*, assignment: str, options: BenchmarkOptions, settings, rows: list[dict]) -> dict:
    """A cached peers result if one is young enough, else ``run_peers`` (and cache it)."""
    path = _peers_cache_path(assignment, options, settings) if options.peers_cache_s > 0 else None
    if path is not None and path.exists() and time.time() - path.stat().st_mtime < options.peers_cache_s:
        try:
            document = json.loads(path.read_text())
            document["cached_from"] = str(path)
            return document
        except (OSError, ValueError):
            pass
    document = run_peers(assignment=assignment, options=options, settings=settings, rows=rows)
    usable = (document.get("copy_bandwidth") or {}).get("bytes_per_s") and not document.get("error")
    if path is not None and usable:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(document, default=str))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    return document


def _run_student(source_dir: Path, *, module, rows: list[dict], options: BenchmarkOptions, settings,
                 cache_dir: Path | None = None) -> tuple[dict, dict]:
    from grader.sandbox import run_sandboxed

    _write_plan(source_dir, mode="student", rows=rows, options=options, module=module, extra={})
    settings = settings.model_copy(update={"child_timeout_s": max(settings.child_timeout_s, options.student_timeout_s)})
    outcome = run_sandboxed(harness=HARNESS, workdir=source_dir, device="cuda", settings=settings, args=[str(source_dir)],
                            cache_dir=cache_dir)
    info = {"duration_s": outcome.duration_s, "returncode": outcome.returncode, "timed_out": outcome.timed_out,
            "memory_exceeded": outcome.memory_exceeded, "log": outcome.log.as_json()}
    document = _read_child_result(source_dir) or {"rows": []}
    if outcome.timed_out:
        document.setdefault("error", f"the timing process did not finish within {settings.child_timeout_s:g} s")
    elif outcome.memory_exceeded:
        document.setdefault("error", "the timing process exceeded its memory limit")
    elif not document.get("complete") and "error" not in document:
        document["error"] = f"the timing process stopped early (exit status {outcome.returncode})"
    return document, info


# ---- verification -------------------------------------------------------------------------
def verify_rows(module, document: dict, workdir: Path, rows: list[dict], sets: int, device: str = "cuda") -> None:
    """Re-verify the kept outputs of every timed call in ``document`` (adds ``verified``).

    Inputs are regenerated from the plan's seeds with the harness's own ``make_inputs`` on the
    same GPU (bit-identical), the fp64 oracle is computed here, and each kept output (sampled
    rows of the last timed call on every buffer set, and one whole output when kept) must be
    within the assignment's tolerance.
    """
    import torch

    from grader.checks import compare
    from grader.harness import bench_child

    by_id = {row["id"]: row for row in rows}
    for entry in document.get("rows", []):
        row = by_id.get(entry.get("id"))
        if row is None or not entry.get("impls"):
            continue
        tensors = _load_outputs(workdir, entry)
        m, n, dtype = row["m"], row["n"], getattr(torch, row["dtype"])
        tolerance = module.TOLERANCES[dtype]
        cache: dict = {}

        def oracle(stage: int, k: int, rows_kept: tuple[int, ...] | None):
            key = (stage, k, rows_kept)
            if key not in cache:
                y, g = bench_child.make_inputs(m, n, dtype, bench_child.stage_seed(row["seed"], stage, k), device)
                if rows_kept is not None:
                    index = torch.tensor(rows_kept, dtype=torch.long, device=y.device)
                    y, g = y.index_select(0, index), g.index_select(0, index)
                cache[key] = module.vjp_fp64(y, g)
            return cache[key]

        for name, result in entry["impls"].items():
            saved = result.get("saved") or {}
            verified: dict = {}
            for method, stage in (("event", 1), ("graph", 2)):
                info = saved.get(method)
                if not isinstance(result.get(method), dict) or "median_s" not in result[method]:
                    continue
                if not isinstance(info, dict):
                    verified[method] = {"passed": False, "message": "no outputs of timed calls were kept"}
                    continue
                problems, checked, worst = [], 0, 0.0
                rows_kept = tuple(int(r) for r in info.get("sample_rows", []))
                for k in range(sets):
                    got = tensors.get(f"{name}|{method}|set{k}")
                    if got is None:
                        problems.append(f"set {k}: output missing")
                        continue
                    expected, scale = oracle(stage, k, rows_kept)
                    if tuple(got.shape) != tuple(expected.shape):
                        problems.append(f"set {k}: shape {tuple(got.shape)}")
                        continue
                    cmp = compare(got.to(expected.device), expected, scale, tolerance)
                    checked += cmp.total
                    worst = max(worst, cmp.max_ratio)
                    if not cmp.passed:
                        problems.append(f"set {k}: {cmp.describe()}")
                full_set = info.get("full_set")
                if full_set is not None:
                    got = tensors.get(f"{name}|{method}|full")
                    if got is None:
                        problems.append("whole output missing")
                    else:
                        expected, scale = oracle(stage, int(full_set), None)
                        cmp = compare(got.to(expected.device), expected, scale, tolerance)
                        checked += cmp.total
                        worst = max(worst, cmp.max_ratio)
                        if not cmp.passed:
                            problems.append(f"whole output of set {full_set}: {cmp.describe()}")
                        del expected, scale
                verified[method] = {"passed": not problems, "elements_checked": checked,
                                    "worst_error_over_tolerance": worst, "problems": problems[:4]}
            result["verified"] = verified
        cache.clear()
        if device == "cuda":
            torch.cuda.empty_cache()


# ---- assembly -----------------------------------------------------------------------------
def _impl_summary(result: dict | None, floor3: float, floor5: float) -> dict:
    if not result:
        return {"error": "not timed"}
    out = {k: result[k] for k in ("event", "graph", "wall", "first_call_s", "verified", "error") if k in result}
    for method in ("event", "graph"):
        t = _median(result.get(method))
        if t:
            out.setdefault("bandwidth_fraction_3_access", {})[method] = floor3 / t
            out.setdefault("bandwidth_fraction_5_access", {})[method] = floor5 / t
    return out


def _student_flags(result: dict | None, floor3: float, entry: dict) -> list[str]:
    flags: list[str] = []
    if not result:
        return ["not timed"]
    if result.get("error"):
        flags.append(f"error: {result['error'][:300]}")
    for method in ("event", "graph"):
        stats = result.get(method)
        if not isinstance(stats, dict) or "median_s" not in stats:
            if isinstance(stats, dict) and stats.get("error"):
                flags.append(f"{method} timing failed: {stats['error'][:300]}")
            elif not result.get("error"):
                flags.append(f"{method} timing missing")
            continue
        check = (result.get("verified") or {}).get(method)
        if not check or not check.get("passed"):
            detail = "; ".join((check or {}).get("problems", [])[:2]) or "not verified"
            flags.append(f"wrong or stale output in {method}-timed calls: {detail}")
        if is_implausible(_median(stats), floor3):
            flags.append(f"implausible {method} time: {_median(stats) * 1e6:.2f} us is under "
                         f"{IMPLAUSIBLE_FRACTION:g} x the bandwidth floor {floor3 * 1e6:.2f} us")
    wall = result.get("wall")
    event_t = _median(result.get("event"))
    if wall and event_t is not None and event_undercuts_wall(event_t, wall["gpu_lower_bound_median_s"]):
        flags.append(f"event time {event_t * 1e6:.1f} us undercuts the device-synchronised wall clock "
                     f"({wall['gpu_lower_bound_median_s'] * 1e6:.1f} us of GPU work after the call returned): "
                     "work on another stream?")
    for key in ("persisting_l2_limit_after", "persisting_l2_limit_after_graph"):
        if result.get(key):
            flags.append(f"the persisting-L2 limit was set to {result[key]} bytes during timing")
    if entry.get("tampered"):
        flags.append("timing or synchronisation functions were replaced: " + ", ".join(entry["tampered"]))
    return flags


def assemble(*, student_doc: dict, student_info: dict | None, peers_doc: dict, rows: list[dict],
             options: BenchmarkOptions, sandbox: str | None = None) -> dict:
    """The ``benchmark`` object: per-row times, ratios, bandwidth fractions, flags, headline."""
    bandwidth = (peers_doc.get("copy_bandwidth") or {}).get("bytes_per_s")
    peer_rows = {e.get("id"): e for e in peers_doc.get("rows", [])}
    student_rows = {e.get("id"): e for e in student_doc.get("rows", [])}
    flush_bytes = peers_doc.get("flush_bytes") or student_doc.get("flush_bytes") or options.flush_bytes
    out_rows = []
    global_flags: list[str] = []
    if student_doc.get("error"):
        global_flags.append(f"submission: {student_doc['error']}")
    if not bandwidth:
        global_flags.append("no copy bandwidth was measured, so no floor could be checked")
    for tampered in student_doc.get("tampered_after_import") or []:
        global_flags.append(f"importing the submission replaced {tampered}")
    speedups_graph, speedups_event, speedups_aten, fractions = [], [], [], []
    for row in rows:
        m, n, dtype = row["m"], row["n"], row["dtype"]
        b3, b5 = bytes_moved(m, n, dtype, ACCESSES_MIN), bytes_moved(m, n, dtype, ACCESSES_TWO_PASS)
        floor3 = b3 / bandwidth if bandwidth else float("nan")
        floor5 = b5 / bandwidth if bandwidth else float("nan")
        s_entry = student_rows.get(row["id"], {})
        p_entry = peer_rows.get(row["id"], {})
        impls = {STUDENT: _impl_summary((s_entry.get("impls") or {}).get(STUDENT), floor3, floor5)}
        for peer in PEERS:
            result = (p_entry.get("impls") or {}).get(peer)
            if result is not None:
                impls[peer] = _impl_summary(result, floor3, floor5)
                bad = (result.get("verified") or {})
                if result.get("error") or any(not v.get("passed") for v in bad.values()):
                    impls[peer]["flags"] = ["peer failed or wrong: " + str(result.get("error") or bad)[:300]]
        flags = _student_flags((s_entry.get("impls") or {}).get(STUDENT), floor3, s_entry) if bandwidth else ["no floor"]
        if s_entry.get("error"):
            flags.append(s_entry["error"])
        ratio, speedup = {}, {}
        for method in ("event", "graph"):
            s = _median(impls[STUDENT].get(method))
            b = _median(impls.get(BASELINE, {}).get(method))
            if s and b:
                ratio[method] = s / b
                speedup[method] = b / s
        s_graph = _median(impls[STUDENT].get("graph"))
        add = p_entry.get("same_shape_add") or {}
        add_graph = _median(add.get("graph"))
        if add_graph and add_graph > 0:
            same_shape_add = {"what": add.get("what"), "graph_s": add_graph,
                              "bandwidth_fraction_3_access": floor3 / add_graph if bandwidth else None,
                              "student_time_over_add": s_graph / add_graph if s_graph else None}
        else:
            same_shape_add = {"error": add.get("error") or "not measured"}
        aten_graph = _median(impls.get("aten_softmax_backward_data", {}).get("graph"))
        ranked = not flags and "graph" in speedup
        if ranked:
            speedups_graph.append(speedup["graph"])
            if "event" in speedup:
                speedups_event.append(speedup["event"])
            if aten_graph:
                speedups_aten.append(aten_graph / s_graph)
            fractions.append(floor3 / s_graph)
        out_rows.append({
            "id": row["id"],
            "shape": [m, n],
            "dtype": dtype,
            "bytes_3_access": b3,
            "bytes_5_access": b5,
            "floor_s_3_access": floor3,
            "floor_s_5_access": floor5,
            "impls": impls,
            "ratio_student_over_baseline": ratio,
            "speedup_vs_baseline": speedup,
            "student_bandwidth_fraction_3_access": impls[STUDENT].get("bandwidth_fraction_3_access", {}),
            "same_shape_add": same_shape_add,
            "flags": flags,
            "ranked": ranked,
            "scope": f"{m}x{n} {dtype}. " + METHOD_SCOPE.format(sets=options.sets, flush_mib=int(flush_bytes or 0) >> 20,
                                                              accesses=ACCESSES_MIN),
        })
    all_ranked = bool(out_rows) and all(r["ranked"] for r in out_rows) and not global_flags
    value = geometric_mean(speedups_graph) if all_ranked else None
    reason = None
    if not all_ranked:
        bad = [f"{r['id']}: {r['flags'][0]}" for r in out_rows if not r["ranked"] and r["flags"]]
        reason = "; ".join(global_flags + bad[:3]) or "some rows were not timed"
    claimed = _claimed_gpu_seconds(student_doc, options)
    if student_info and claimed > student_info.get("duration_s", float("inf")) * 1.05 + 1.0:
        value, reason = None, (f"the timing process claims {claimed:.1f} s of GPU work in "
                               f"{student_info['duration_s']:.1f} s of wall time")
    return finite_json({
        "schema": SCHEMA_VERSION,
        "headline": {"name": HEADLINE_NAME, "value": value, "baseline": BASELINE, "method": "graph",
                     "rows": len(out_rows), "reason": reason},
        "summary": {
            "geomean_speedup_vs_baseline_graph": geometric_mean(speedups_graph) if all_ranked else None,
            "geomean_speedup_vs_baseline_event": geometric_mean(speedups_event) if all_ranked else None,
            "geomean_speedup_vs_aten_graph": geometric_mean(speedups_aten) if all_ranked else None,
            "geomean_bandwidth_fraction_3_access_graph": geometric_mean(fractions) if all_ranked else None,
        },
        "baseline": {"name": BASELINE, "scope": SCOPES[BASELINE]},
        "scopes": SCOPES,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": peers_doc.get("gpu") or student_doc.get("gpu"),
        "gpu_after": peers_doc.get("gpu_after"),
        "versions": {**(peers_doc.get("versions") or {}), "grader": package_version("kernel-grader")},
        "copy_bandwidth": peers_doc.get("copy_bandwidth"),
        "persisting_l2_control": peers_doc.get("persisting_l2_control"),
        "flush_bytes": flush_bytes,
        "options": asdict(options),
        "sandbox": sandbox,
        "flags": global_flags,
        "rows": out_rows,
        "timings_s": {"peers_child": peers_doc.get("duration_s"),
                      "student_child": (student_info or {}).get("duration_s")},
        "log": (student_info or {}).get("log"),
    })


def finite_json(value):
    """``value`` with every NaN or infinity replaced by None (strict JSON for the result store)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def _claimed_gpu_seconds(student_doc: dict, options: BenchmarkOptions) -> float:
    """GPU time the student's timing process says it spent in timed phases (a sanity bound)."""
    total = 0.0
    for entry in student_doc.get("rows", []):
        result = (entry.get("impls") or {}).get(STUDENT) or {}
        for method in ("event", "graph"):
            stats = result.get(method) or {}
            if isinstance(stats.get("n"), int) and isinstance(stats.get("mean_s"), (int, float)):
                per = stats["mean_s"] * (options.sets if method == "graph" else 1)
                total += stats["n"] * max(per, 0.0)
    return total


# ---- entry points --------------------------------------------------------------------------
def _require_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        raise NoGPU("timing needs a CUDA GPU and none is visible here; no timings are reported "
                    "(Triton CPU-interpreter times say nothing about a GPU kernel)")


def run_benchmark(source_dir: Path, *, settings=None, assignment: str = "softmax_backward",
                  options: BenchmarkOptions | None = None, peers: dict | None = None,
                  cache_dir: Path | None = None) -> dict:
    """Benchmark the submission in ``source_dir`` (see the module docstring). Raises NoGPU."""
    from grader.assignments import get_assignment
    from grader.settings import GraderSettings

    _require_gpu()
    settings = settings or GraderSettings()
    options = options or BenchmarkOptions()
    module = get_assignment(assignment)
    rows = benchmark_rows(module, options)
    source_dir = Path(source_dir)
    if peers is None:
        peers = cached_peers(assignment=assignment, options=options, settings=settings, rows=rows)
    student_doc, student_info = _run_student(source_dir, module=module, rows=rows, options=options, settings=settings,
                                             cache_dir=cache_dir)
    verify_rows(module, student_doc, source_dir, rows, options.sets)
    sandbox = "none (unsafe: GRADER_SANDBOX=unsafe-none)" if settings.sandbox != "bwrap" else "bubblewrap"
    result = assemble(student_doc=student_doc, student_info=student_info, peers_doc=peers, rows=rows,
                      options=options, sandbox=sandbox)
    result["peers_cached_from"] = peers.get("cached_from")
    return result


def benchmark_file(path: Path, *, output: Path | None, settings=None, assignment: str = "softmax_backward",
                   options: BenchmarkOptions | None = None, peers: dict | None = None) -> dict:
    """``run_benchmark`` on the file at ``path``; writes the JSON to ``output`` if given. Raises NoGPU."""
    from grader.assignments import get_assignment

    _require_gpu()
    module = get_assignment(assignment)
    work_root = getattr(settings, "work_root", None) if settings is not None else None
    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=work_root))
    try:
        os.chmod(workdir, 0o700)
        shutil.copy(path, workdir / module.MODULE_FILE)
        result = run_benchmark(workdir, settings=settings, assignment=assignment, options=options, peers=peers)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["source"] = str(path)
    if output is not None:
        Path(output).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e6:.1f}"


def print_benchmark(result: dict, console) -> None:
    """Print the per-row table, the headline and any flags of a benchmark result."""
    from rich.table import Table

    bw = (result.get("copy_bandwidth") or {}).get("bytes_per_s")
    gpu = result.get("gpu") or {}
    table = Table(title=f"softmax_backward on {gpu.get('name', '?')}, copy bandwidth "
                        f"{bw / 1e12:.2f} TB/s" if bw else "benchmark")
    for column in ("row", "student graph us", "student event us", "baseline graph us", "aten graph us",
                   "reference graph us", "compile graph us", "speedup graph", "speedup event", "BW (3 acc.)", "flags"):
        table.add_column(column, justify="left" if column in ("row", "flags") else "right")
    for row in result.get("rows", []):
        impls = row["impls"]
        get = lambda name, method: _median(impls.get(name, {}).get(method))  # noqa: E731
        frac = row.get("student_bandwidth_fraction_3_access", {}).get("graph")
        add_frac = (row.get("same_shape_add") or {}).get("bandwidth_fraction_3_access")
        table.add_row(
            row["id"], _us(get(STUDENT, "graph")), _us(get(STUDENT, "event")), _us(get(BASELINE, "graph")),
            _us(get("aten_softmax_backward_data", "graph")), _us(get("reference", "graph")),
            _us(get("torch_compile_fp32_expression", "graph")),
            f"{row['speedup_vs_baseline'].get('graph', float('nan')):.2f}x",
            f"{row['speedup_vs_baseline'].get('event', float('nan')):.2f}x",
            "-" if frac is None else f"{frac:.0%}" + (f" (add {add_frac:.0%})" if add_frac else ""),
            "; ".join(row["flags"])[:80] or "ok",
        )
    console.print(table)
    head = result.get("headline") or {}
    if head.get("value") is not None:
        console.print(f"headline {head['name']} = [bold]{head['value']:.3f}[/] (baseline {head.get('baseline')}, graph timing)")
    else:
        console.print(f"[red]no benchmark score[/]: {head.get('reason') or result.get('error')}")


def main_benchmark(args: argparse.Namespace) -> int:
    """CLI handler of ``grader benchmark``; returns the exit code (see the module docstring)."""
    from rich.console import Console

    from grader.settings import GraderSettings

    console = Console(stderr=True)
    settings = GraderSettings()
    if getattr(args, "unsafe_no_sandbox", False):
        settings = settings.model_copy(update={"sandbox": "unsafe-none"})
    try:
        result = benchmark_file(Path(args.path), output=Path(args.output) if args.output else None, settings=settings,
                                assignment=getattr(args, "assignment", "softmax_backward"))
    except NoGPU as exc:
        console.print(f"[red]grader benchmark: {exc}[/]")
        return EXIT_NO_GPU
    except Exception as exc:  # noqa: BLE001 - infrastructure failures end with a message, not a trace
        console.print(f"[red]grader benchmark failed: {type(exc).__name__}: {exc}[/]")
        return EXIT_ERROR
    print_benchmark(result, console)
    if result["headline"]["value"] is not None:
        return EXIT_OK
    return EXIT_NO_SCORE if result.get("rows") else EXIT_ERROR
