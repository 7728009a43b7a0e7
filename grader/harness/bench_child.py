"""Timing side of a benchmark run: time one or more implementations on a CUDA GPU.

Run as a script in a child process: ``python bench_child.py WORKDIR``. In ``student`` mode it
runs inside the sandbox and imports the submission; in ``peers`` mode it never imports the
submission and times the assignment's peers (bench.py's PEERS, torch.compile of its
COMPILED_PEER, the course reference kernel), the device-to-device copy bandwidth and the
streaming probe. It knows no assignment by name: the assignment's bench.py sits beside it as
``assignment_bench.py`` (inputs and peers). It imports only the standard library, torch,
triton, safetensors and that file, never the ``grader`` package. The parent
(grader/benchmark/verify.py) uses ``stage_seed`` and the same bench.py, so that the oracle is
computed on exactly the values timed here.

Nothing this process reports is taken on trust by the parent: every output kept here is
re-verified against the fp64 oracle, every time is checked against the bandwidth floor, and
event times are cross-checked with device-synchronised wall time here. References to the
clocks, events, graph replay and synchronisation are taken before the submission is imported,
from the C-level classes where torch has them, and the Python-level attributes are compared
with their original identities afterwards (``tampered`` lists those a submission replaced).

Protocol (WORKDIR, bound read-write):
- ``bench_plan.json``  written by the parent: mode, rows (id, shape, dtype, seed), settings.
- ``bench_progress.json``  rewritten after each row (results so far).
- ``bench_result.json``    written last: environment, copy bandwidth (peers), per-row timings
  (peers also time the assignment's streaming probe on each row's inputs: ``streaming_probe``).
- ``bench_out_<row>.safetensors``  outputs of timed calls, per implementation and method:
  ``<impl>|<method>|full`` (one whole output, when asked) and ``<impl>|<method>|set<k>``
  (sampled rows of the last timed call on buffer set k; the row indices are in the JSON).

Timing method (per implementation and row; all times in seconds):
- K buffer sets of inputs are generated on the GPU from seeds (bench.py's ``make_inputs``). Stage 0 values
  are used for the first call (compilation) and warm-up; the sets are then refilled in place
  (same addresses) with stage 1 values for event timing and stage 2 values for graph timing,
  so an output memoised by address or by call count is stale and fails re-verification.
- L2 is flushed before every call by reading a buffer of ``flush_bytes`` (>= 4x L2) with a
  sum; the persisting-L2 limit is reset to 0 (cudaDeviceSetLimit + cudaCtxResetPersistingL2Cache)
  before each phase and read back afterwards.
- event: CUDA events recorded on the calling stream around each call (do_bench style: the
  host runs ahead, events read after a device-wide synchronisation per batch).
- graph: K calls, each after a flush, captured in one CUDA graph; a second graph holds the
  K flushes only; samples are (t(full replay) - t(flush replay)) / K.
- wall check: per call, device synchronise, host clock, call, host clock, device synchronise,
  host clock: ``gpu_lower_bound = wall - cpu_call - sync_floor`` bounds from below the GPU
  work of the call on ALL streams, which the event time must not undercut.
- sampling: batches until the relative standard error of the mean is below
  ``target_rel_sem`` (with at least ``min_samples``), or ``budget_s`` or ``max_samples``
  runs out; the stop reason and sample count are reported.
"""

from __future__ import annotations

# ---- references taken before any submission code can run --------------------------------
import ctypes
import gc
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
import traceback

_perf = time.perf_counter
_open = open
_json_dumps = json.dumps
_rename = os.replace

import torch  # noqa: E402

# C-level methods where this torch build has them (a CPU-only build has empty stand-ins), else
# the Python-level functions as they are now, before the submission can replace them.
_EventBase = getattr(torch._C, "_CudaEventBase", None)
_ev_record = getattr(_EventBase, "record", None) or torch.cuda.Event.record
_ev_elapsed = getattr(_EventBase, "elapsed_time", None) or torch.cuda.Event.elapsed_time
_event_class = _EventBase if hasattr(_EventBase, "record") else torch.cuda.Event
_cuda_sync_c = getattr(torch._C, "_cuda_synchronize", None)
_cuda_sync_py = torch.cuda.synchronize
_GraphBase = getattr(torch._C, "_CUDAGraph", None)
_graph_replay = getattr(_GraphBase, "replay", None) or torch.cuda.CUDAGraph.replay
_CUDAGraph = torch.cuda.CUDAGraph
_graph_cm = torch.cuda.graph
_TensorBase = torch._C.TensorBase
_t_copy = _TensorBase.copy_
_t_sum = _TensorBase.sum
_t_clone = _TensorBase.clone
_t_index_select = _TensorBase.index_select
_t_contiguous = _TensorBase.contiguous
_t_cpu = _TensorBase.cpu
_empty = torch.empty
_no_grad = torch.no_grad

# Python-level attributes whose identity is recorded now and compared after the submission ran.
_WATCHED = [
    ("time", time, "perf_counter"),
    ("time", time, "monotonic"),
    ("time", time, "time"),
    ("time", time, "perf_counter_ns"),
    ("torch.cuda", torch.cuda, "synchronize"),
    ("torch.cuda", torch.cuda, "Event"),
    ("torch.cuda", torch.cuda, "graph"),
    ("torch.cuda", torch.cuda, "CUDAGraph"),
    ("torch.cuda", torch.cuda, "current_stream"),
    ("torch.cuda", torch.cuda, "Stream"),
    ("torch.cuda.Event", torch.cuda.Event, "elapsed_time"),
    ("torch.cuda.Event", torch.cuda.Event, "record"),
    ("torch.cuda.Event", torch.cuda.Event, "synchronize"),
    ("torch.cuda.Event", torch.cuda.Event, "query"),
    ("torch.cuda.graph", torch.cuda.graph, "__enter__"),
    ("torch.cuda.graph", torch.cuda.graph, "__exit__"),
    ("torch.cuda.CUDAGraph", torch.cuda.CUDAGraph, "replay"),
    ("torch.cuda.CUDAGraph", torch.cuda.CUDAGraph, "capture_begin"),
    ("torch.cuda.CUDAGraph", torch.cuda.CUDAGraph, "capture_end"),
    ("torch", torch, "empty"),
    ("torch.Tensor", torch.Tensor, "copy_"),
    ("torch.Tensor", torch.Tensor, "sum"),
]
try:
    import triton.testing as _triton_testing  # noqa: E402

    _WATCHED += [
        ("triton.testing", _triton_testing, "do_bench"),
        ("triton.testing", _triton_testing, "do_bench_cudagraph"),
    ]
except Exception:  # noqa: BLE001 - triton is optional for the timing itself
    _triton_testing = None
_WATCHED_ORIGINALS = [(f"{label}.{attr}", owner, attr, getattr(owner, attr, None)) for label, owner, attr in _WATCHED]

# The assignment's bench.py (inputs, peers), staged beside this file as assignment_bench.py;
# loaded by main(). The parent imports this module only for stage_seed/sample_row_indices.
bench = None

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # enum cudaLimit, cuda_runtime_api.h


# ---- seeds and samples (also used by the parent to rebuild the same values) -------------
def stage_seed(row_seed: int, stage: int, buffer_set: int) -> int:
    """Seed of buffer set ``buffer_set`` at stage 0 (warm-up), 1 (event) or 2 (graph)."""
    return int(row_seed) * 1000 + stage * 100 + buffer_set


def sample_row_indices(m: int, count: int) -> list[int]:
    """``count`` evenly spread row indices of an m-row output, always including the last row."""
    if m <= count:
        return list(range(m))
    step = m / count
    rows = sorted({min(m - 1, int(i * step + step / 2)) for i in range(count)} | {m - 1})
    return rows


# ---- small helpers ---------------------------------------------------------------------
def _sync() -> None:
    if _cuda_sync_c is not None:
        _cuda_sync_c()
    else:  # pragma: no cover - a torch without the C entry point
        _cuda_sync_py()


def _new_event():
    try:
        return _event_class(enable_timing=True)
    except TypeError:  # pragma: no cover - a torch whose base class cannot be built directly
        return torch.cuda.Event(enable_timing=True)


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples: list[float], stop: str) -> dict:
    """Statistics of timing samples (seconds): median, quartiles, mean, SEM, min, count."""
    values = sorted(samples)
    n = len(values)
    mean = sum(values) / n if n else float("nan")
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else float("nan")
    sem = math.sqrt(var / n) if n > 1 else float("nan")
    return {
        "median_s": _quantile(values, 0.5),
        "q25_s": _quantile(values, 0.25),
        "q75_s": _quantile(values, 0.75),
        "mean_s": mean,
        "sem_s": sem,
        "min_s": values[0] if values else float("nan"),
        "max_s": values[-1] if values else float("nan"),
        "n": n,
        "stop": stop,
    }


def _stop_reason(samples: list[float], started: float, opts: dict) -> str | None:
    n = len(samples)
    if n >= opts["max_samples"]:
        return "max_samples"
    if _perf() - started > opts["budget_s"] and n >= 3:
        return "budget"
    if n >= opts["min_samples"]:
        mean = sum(samples) / n
        var = sum((v - mean) ** 2 for v in samples) / (n - 1)
        if mean > 0 and math.sqrt(var / n) / mean <= opts["target_rel_sem"]:
            return "sem"
    return None


class PersistingL2:
    """cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0) + cudaCtxResetPersistingL2Cache.

    Looks for the CUDA runtime torch loaded (in /proc/self/maps), then cuda-python, then
    ``libcudart.so`` by name. ``how`` says which was used, or why none was.
    """

    def __init__(self) -> None:
        self.how = "unavailable"
        self._lib = None
        self._rt = None
        candidates = []
        try:
            with _open("/proc/self/maps", encoding="utf-8") as handle:
                for line in handle:
                    path = line.split()[-1] if line.strip() else ""
                    if "libcudart.so" in os.path.basename(path) and path not in candidates:
                        candidates.append(path)
        except OSError:
            pass
        candidates += ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
        for path in candidates:
            try:
                lib = ctypes.CDLL(path)
                lib.cudaDeviceSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
                lib.cudaDeviceGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
                lib.cudaCtxResetPersistingL2Cache.argtypes = []
                self._lib = lib
                self.how = f"ctypes {path}"
                return
            except (OSError, AttributeError):
                continue
        try:
            from cuda.bindings import runtime as rt  # type: ignore[import-not-found]

            self._rt = rt
            self.how = "cuda.bindings.runtime"
        except Exception as exc:  # noqa: BLE001
            self.how = f"unavailable: {type(exc).__name__}"

    def limit(self) -> int | None:
        """The current persisting-L2 limit in bytes, or None when it cannot be read."""
        if self._lib is not None:
            value = ctypes.c_size_t(0)
            if self._lib.cudaDeviceGetLimit(ctypes.byref(value), CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE) == 0:
                return int(value.value)
            return None
        if self._rt is not None:
            err, value = self._rt.cudaDeviceGetLimit(self._rt.cudaLimit.cudaLimitPersistingL2CacheSize)
            return int(value) if int(err) == 0 else None
        return None

    def reset(self) -> bool:
        """Set the persisting-L2 limit to 0 and drop persisting lines; True when both worked."""
        if self._lib is not None:
            a = self._lib.cudaDeviceSetLimit(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
            b = self._lib.cudaCtxResetPersistingL2Cache()
            return a == 0 and b == 0
        if self._rt is not None:
            (a,) = self._rt.cudaDeviceSetLimit(self._rt.cudaLimit.cudaLimitPersistingL2CacheSize, 0)
            (b,) = self._rt.cudaCtxResetPersistingL2Cache()
            return int(a) == 0 and int(b) == 0
        return False


def tampered() -> list[str]:
    """Watched attributes that no longer hold the object they held at start."""
    return [label for label, owner, attr, original in _WATCHED_ORIGINALS if getattr(owner, attr, None) is not original]


def gpu_info() -> dict:
    """Device properties and nvidia-smi readings (name, clocks in MHz, driver)."""
    props = torch.cuda.get_device_properties(0)
    info = {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "memory_bytes": int(props.total_memory),
        "capability": f"{props.major}.{props.minor}",
        "cuda_runtime": torch.version.cuda,
    }
    query = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,temperature.gpu,power.draw"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
        fields = [f.strip() for f in out.stdout.strip().splitlines()[0].split(",")]
        keys = ["smi_name", "driver", "sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz",
                "mem_clock_max_mhz", "temperature_c", "power_w"]
        info.update(dict(zip(keys, fields)))
    except Exception as exc:  # noqa: BLE001 - nvidia-smi may be missing in a sandbox
        info["nvidia_smi"] = f"unavailable: {type(exc).__name__}"
    return info


def versions() -> dict:
    out = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        out["triton"] = None
    return out


# ---- the timing itself -----------------------------------------------------------------
class Timer:
    """Times one implementation on one row's buffer sets (see the module docstring)."""

    def __init__(self, opts: dict, flush_buffer, l2: PersistingL2) -> None:
        self.opts = opts
        self.flush_buffer = flush_buffer
        self.l2 = l2
        self.stream = torch.cuda.current_stream()

    def flush(self) -> None:
        _t_sum(self.flush_buffer)

    def events(self, call, n_sets: int) -> tuple[dict, list]:
        """do_bench-style event timing; returns (stats, last output per buffer set)."""
        samples: list[float] = []
        outs: list = [None] * n_sets
        started = _perf()
        batch = 16
        index = 0
        while True:
            pairs = [(_new_event(), _new_event()) for _ in range(batch)]
            for start, end in pairs:
                k = index % n_sets
                index += 1
                self.flush()
                _ev_record(start, self.stream)
                out = call(k)
                _ev_record(end, self.stream)
                outs[k] = out
            _sync()
            samples += [_ev_elapsed(start, end) * 1e-3 for start, end in pairs]
            stop = _stop_reason(samples, started, self.opts)
            if stop:
                return summarize(samples, stop), outs

    def wall(self, call, n_sets: int, reps: int = 12) -> dict:
        """Device-synchronised wall clock per call; see ``gpu_lower_bound`` in the docstring."""
        floors = []
        for _ in range(5):
            _sync()
            a = _perf()
            _sync()
            floors.append(_perf() - a)
        sync_floor = sorted(floors)[len(floors) // 2]
        cpu, wall, bound = [], [], []
        for i in range(reps):
            self.flush()
            _sync()
            t0 = _perf()
            out = call(i % n_sets)
            t1 = _perf()
            _sync()
            t2 = _perf()
            del out
            cpu.append(t1 - t0)
            wall.append(t2 - t0)
            bound.append(max(0.0, (t2 - t1) - sync_floor))
        med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
        return {"cpu_call_median_s": med(cpu), "wall_median_s": med(wall), "sync_floor_s": sync_floor,
                "gpu_lower_bound_median_s": med(bound), "reps": reps}

    def graph(self, call, n_sets: int) -> tuple[dict, list]:
        """Graph replay timing minus a flush-only graph; returns (stats, outputs of the graph)."""
        side = torch.cuda.Stream()
        side.wait_stream(self.stream)
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph asks
            for k in range(n_sets):
                call(k)
        self.stream.wait_stream(side)
        _sync()
        # One flush more than calls in both graphs: the last call's dirty L2 lines are written
        # back inside the full graph (during its closing flush), as every other call's are.
        full = _CUDAGraph()
        outs: list = [None] * n_sets
        with _graph_cm(full):
            for k in range(n_sets):
                self.flush()
                outs[k] = call(k)
            self.flush()
        flush_only = _CUDAGraph()
        with _graph_cm(flush_only):
            for _ in range(n_sets + 1):
                self.flush()
        _sync()
        replay = _graph_replay
        for _ in range(2):
            replay(flush_only)
            replay(full)
        _sync()
        samples: list[float] = []
        flush_samples: list[float] = []
        started = _perf()
        batch = 8
        while True:
            marks = [(_new_event(), _new_event(), _new_event()) for _ in range(batch)]
            for e0, e1, e2 in marks:
                _ev_record(e0, self.stream)
                replay(flush_only)
                _ev_record(e1, self.stream)
                replay(full)
                _ev_record(e2, self.stream)
            _sync()
            for e0, e1, e2 in marks:
                t_flush = _ev_elapsed(e0, e1) * 1e-3
                t_full = _ev_elapsed(e1, e2) * 1e-3
                flush_samples.append(t_flush / (n_sets + 1))
                samples.append((t_full - t_flush) / n_sets)
            stop = _stop_reason(samples, started, self.opts)
            if stop:
                stats = summarize(samples, stop)
                stats["flush_per_call_median_s"] = summarize(flush_samples, stop)["median_s"]
                self._keep = (full, flush_only)  # freed by the caller after outputs are saved
                return stats, outs


def _sampled_rows(out, rows: list[int]):
    index = torch.tensor(rows, dtype=torch.long, device=out.device)
    return _t_cpu(_t_contiguous(_t_index_select(out, 0, index)))


def _check_output(out, shape: tuple, dtype) -> str | None:
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device.type != "cuda":
        return f"returned {tuple(out.shape)} {out.dtype} on {out.device}, expected {tuple(shape)} {dtype} on cuda"
    return None


def time_row(name: str, fn, row: dict, opts: dict, timer: Timer, sets: list, saved: dict,
             full_set: int | None) -> dict:
    """Compile, warm up and time ``fn`` on one row; store outputs of timed calls in ``saved``."""
    shape, dtype = tuple(row["shape"]), DTYPES[row["dtype"]]
    out_shape, out_dtype = bench.expected_output(sets[0])
    result: dict = {}
    n_sets = len(sets)
    rows_kept = sample_row_indices(out_shape[0], opts["sample_rows"])

    def refill(stage: int) -> None:
        with _no_grad():
            for k, inputs in enumerate(sets):
                fresh = bench.make_inputs(shape, dtype, stage_seed(row["seed"], stage, k))
                for old, new in zip(inputs, fresh):
                    if isinstance(old, torch.Tensor):
                        _t_copy(old, new)
                del fresh
        _sync()

    def call(k: int):
        return fn(*sets[k])

    def keep(method: str, outs: list) -> None:
        info = {"sample_rows": rows_kept, "full_set": None}
        for k, out in enumerate(outs):
            problem = _check_output(out, out_shape, out_dtype)
            if problem:
                raise RuntimeError(f"{method}: {problem}")
            saved[f"{name}|{method}|set{k}"] = _sampled_rows(out, rows_kept)
        if full_set is not None:
            saved[f"{name}|{method}|full"] = _t_cpu(_t_contiguous(outs[full_set]))
            info["full_set"] = full_set
        result.setdefault("saved", {})[method] = info

    try:
        refill(0)
        t0 = _perf()
        first = call(0)
        _sync()
        result["first_call_s"] = _perf() - t0
        problem = _check_output(first, out_shape, out_dtype)
        if problem:
            raise RuntimeError(problem)
        del first
        started = _perf()
        calls = 0
        while calls < 3 or _perf() - started < opts["warmup_s"]:
            call(calls % n_sets)
            calls += 1
        _sync()
        result["warmup_calls"] = calls
        result["l2_reset"] = timer.l2.reset()
        refill(1)
        stats, outs = timer.events(call, n_sets)
        _sync()
        result["event"] = stats
        keep("event", outs)
        del outs
        result["wall"] = timer.wall(call, n_sets)
        result["persisting_l2_limit_after"] = timer.l2.limit()
        timer.l2.reset()
        refill(2)
        try:
            stats, outs = timer.graph(call, n_sets)
            _sync()
            result["graph"] = stats
            keep("graph", outs)
            del outs
        except Exception as exc:  # noqa: BLE001 - capture failures are a finding
            result["graph"] = {"error": f"graph capture or replay failed: {type(exc).__name__}: {str(exc)[:500]}"}
        finally:
            timer._keep = None
        result["persisting_l2_limit_after_graph"] = timer.l2.limit()
    except Exception as exc:  # noqa: BLE001 - a failing implementation is reported, not fatal
        result["error"] = f"{type(exc).__name__}: {str(exc)[:1000]}"
        result["traceback"] = "".join(traceback.format_exception(exc))[-3000:]
        text = str(exc)
        if "CUDA error" in text or "cudaError" in text or "illegal" in text.lower():
            result["fatal"] = True
    return result


def measure_copy_bandwidth(opts: dict, timer: Timer) -> dict:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written (bytes/s).

    Three measurements of a ``copy_bytes`` fp32 buffer: ``dst.copy_(src)`` timed with events
    (the driver's copy kernel on the SMs), the same captured in a CUDA graph (there it becomes
    a memcpy node, which the driver may hand to a DMA copy engine: reported, not used), and an
    elementwise copy kernel (``torch.mul(src, 1.0, out=dst)``, one read and one write per
    element) in a graph. ``bytes_per_s`` is the highest of the SM paths: the floor then
    assumes the best streaming rate this device showed in this run.
    """
    nbytes = int(opts.get("copy_bytes", 1 << 30))
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    timing = Timer(dict(opts, budget_s=min(opts["budget_s"], 1.0), min_samples=10), timer.flush_buffer, timer.l2)

    def memcpy(_k):
        _t_copy(dst, src)
        return dst

    def kernel_copy(_k):
        torch.mul(src, 1.0, out=dst)
        return dst

    for _ in range(3):
        memcpy(0)
        kernel_copy(0)
    _sync()
    moved = 2 * nbytes
    results = {}
    for name, fn, method in (("memcpy_event", memcpy, "events"), ("memcpy_graph", memcpy, "graph"),
                             ("kernel_copy_graph", kernel_copy, "graph"), ("kernel_copy_event", kernel_copy, "events")):
        try:
            stats, _ = timing.events(fn, 1) if method == "events" else timing.graph(fn, 1)
            timing._keep = None
            results[name] = {"stats": stats, "bytes_per_s": moved / stats["median_s"]}
        except Exception as exc:  # noqa: BLE001
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    del src, dst
    torch.cuda.empty_cache()
    used = [k for k in ("memcpy_event", "kernel_copy_graph", "kernel_copy_event") if "bytes_per_s" in results[k]]
    best = max(used, key=lambda k: results[k]["bytes_per_s"]) if used else None
    return {
        "bytes_moved": moved,
        "buffer_bytes": nbytes,
        "measurements": results,
        "used": best,
        "bytes_per_s": results[best]["bytes_per_s"] if best else None,
        "method": f"device-to-device copy of {nbytes} bytes (fp32), bytes = read + write = {moved}; the "
                  f"highest of: copy_ timed with events, an elementwise copy kernel timed with graphs and events "
                  f"(copy_ inside a graph is a memcpy node that may use a DMA engine: reported only)",
    }


def time_streaming_probe(timer: Timer, sets: list) -> dict:
    """Graph time (seconds per call) of the assignment's streaming probe on one row's own sets.

    The probe makes the same memory accesses as the assignment's kernel with no arithmetic to
    speak of (softmax_backward: ``torch.add(y, g)``, 2 reads + 1 write), timed by the same
    graph method. It measures what streaming those bytes costs on this device at this size,
    fixed per-call costs included (the launch after the flush, the ramp-up and tail of the
    grid, the write-back of dirty L2 lines), which the floor from a 1 GiB copy does not see.
    Reported beside the rows, never ranked.
    """
    what, probe = bench.STREAMING_PROBE

    def call(k: int):
        return probe(*sets[k])

    try:
        stats, _ = timer.graph(call, len(sets))  # graph() warms up every buffer set first
        timer._keep = None
        return {"what": what, "graph": stats}
    except Exception as exc:  # noqa: BLE001 - a missing figure must not cost the peers' timings
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def _load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _compiled_peer():
    """A fresh torch.compile of the assignment's COMPILED_PEER function (one per row, so no
    recompile limit is hit)."""
    import torch._dynamo as dynamo

    for key in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo.config, key):
            setattr(dynamo.config, key, 64)
    dynamo.reset()
    return torch.compile(bench.COMPILED_PEER[1], dynamic=False, fullgraph=True)


# ---- main -------------------------------------------------------------------------------
def _write(workdir: str, name: str, document: dict) -> None:
    tmp = os.path.join(workdir, name + ".tmp")
    with _open(tmp, "w", encoding="utf-8") as handle:
        handle.write(_json_dumps(document, default=str))
    _rename(tmp, os.path.join(workdir, name))


def main(workdir: str) -> int:
    global bench
    from safetensors.torch import save_file

    bench = _load_module(os.path.join(os.path.dirname(os.path.abspath(__file__)), "assignment_bench.py"),
                         "assignment_bench")
    with _open(os.path.join(workdir, "bench_plan.json"), encoding="utf-8") as handle:
        plan = json.load(handle)
    opts = plan["options"]
    mode = plan["mode"]
    document: dict = {"mode": mode, "rows": [], "started_unix": time.time()}
    if not torch.cuda.is_available():
        document["error"] = "no CUDA device visible to the timing process"
        _write(workdir, "bench_result.json", document)
        return 0
    torch.cuda.init()
    document["gpu"] = gpu_info()
    document["versions"] = versions()
    l2 = PersistingL2()
    document["persisting_l2_control"] = l2.how
    document["persisting_l2_limit_at_start"] = l2.limit()
    l2.reset()
    l2_bytes = document["gpu"]["l2_bytes"] or (50 << 20)
    flush_bytes = int(opts.get("flush_bytes") or max(4 * l2_bytes, 256 << 20))
    flush_buffer = torch.ones(flush_bytes // 4, device="cuda", dtype=torch.float32)
    document["flush_bytes"] = flush_bytes
    timer = Timer(opts, flush_buffer, l2)
    _sync()

    impls: dict = {}
    if mode == "peers":
        if opts.get("copy_bandwidth", True):
            document["copy_bandwidth"] = measure_copy_bandwidth(opts, timer)
        impls.update(bench.PEERS)
        if plan.get("reference_file"):
            reference = _load_module(os.path.join(workdir, plan["reference_file"]), "course_reference")
            impls["reference"] = getattr(reference, plan["function"])
        if opts.get("compile_peer", True) and bench.COMPILED_PEER is not None:
            impls[bench.COMPILED_PEER[0]] = None  # built per row
    else:
        sys.path.insert(0, workdir)
        try:
            module = _load_module(os.path.join(workdir, plan["module_file"]), "submission")
            _sync()
        except BaseException as exc:  # noqa: BLE001
            document["error"] = f"importing the submission raised {type(exc).__name__}: {str(exc)[:1000]}"
            _write(workdir, "bench_result.json", document)
            return 0
        function = getattr(module, plan["function"], None)
        if not callable(function):
            document["error"] = f"the module has no callable {plan['function']!r}"
            _write(workdir, "bench_result.json", document)
            return 0
        impls["student"] = function
        document["tampered_after_import"] = tampered()

    fatal = False
    for index, row in enumerate(plan["rows"]):
        entry = {"id": row["id"], "shape": row["shape"], "dtype": row["dtype"], "impls": {}}
        document["rows"].append(entry)
        if fatal:
            entry["error"] = "skipped: an earlier CUDA error poisoned the process"
            continue
        shape, dtype = tuple(row["shape"]), DTYPES[row["dtype"]]
        sets = [bench.make_inputs(shape, dtype, stage_seed(row["seed"], 0, k)) for k in range(opts["sets"])]
        saved: dict = {}
        full_set = (index % opts["sets"]) if opts.get("save_full", False) else None
        for name, fn in impls.items():
            if fn is None:
                try:
                    fn = _compiled_peer()
                except Exception as exc:  # noqa: BLE001
                    entry["impls"][name] = {"error": f"torch.compile unavailable: {type(exc).__name__}: {exc}"}
                    continue
            entry["impls"][name] = time_row(name, fn, row, opts, timer, sets, saved, full_set)
            if entry["impls"][name].get("fatal"):
                fatal = True
                break
            gc.collect()
        if mode == "peers" and opts.get("streaming_probe", True) and not fatal:
            entry["streaming_probe"] = time_streaming_probe(timer, sets)
        if mode == "student":
            entry["tampered"] = tampered()
        if saved:
            save_file(saved, os.path.join(workdir, f"bench_out_{index}.safetensors"))
            entry["outputs_file"] = f"bench_out_{index}.safetensors"
        del sets, saved
        gc.collect()
        torch.cuda.empty_cache()
        _write(workdir, "bench_progress.json", document)
    document["gpu_after"] = {k: v for k, v in gpu_info().items() if "clock" in k or k in ("temperature_c", "power_w")}
    document["finished_unix"] = time.time()
    _write(workdir, "bench_result.json", document)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
