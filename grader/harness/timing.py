"""GPU timing shared by the benchmark's trusted children: the peers child (bench_child.py) and
the replay timer (replay_child.py). Neither runs submission Python, so this module needs no
defence against patched clocks; the GPU code it times is verified output by output.

Timing method (per implementation and row; all times in seconds):
- K buffer sets of inputs; the caller refreshes them between timed calls where it can.
- L2 is flushed before every call by reading a buffer of ``flush_bytes`` (>= 4x L2) with a
  sum; the persisting-L2 limit is reset to 0 before each phase and read back afterwards.
- event: CUDA events recorded on the calling stream around each call (do_bench style: the
  host runs ahead, events read after a device-wide synchronisation per batch).
- graph: K calls, each after a flush, captured in one CUDA graph; a second graph holds K + 1
  flushes only; samples are (t(full replay) - t(flush replay)) / K.
- wall check: per call, device synchronise, host clock, call, host clock, device synchronise,
  host clock: ``gpu_lower_bound = wall - cpu_call - sync_floor`` bounds from below the GPU
  work of the call on ALL streams, which the event time must not undercut.
- sampling: batches until the relative standard error of the mean is below
  ``target_rel_sem`` (with at least ``min_samples``), or the method's budget (``budget_s`` for
  graphs, ``event_budget_s`` for events, default ``budget_s``) or ``max_samples``
  runs out; the stop reason and the raw samples are reported, and the parent computes the
  statistics from the samples (``summarize``).
"""

from __future__ import annotations

import ctypes
import math
import os
import subprocess
import sys
import time

import torch

_perf = time.perf_counter
_open = open
_ev_record = torch.cuda.Event.record
_ev_elapsed = torch.cuda.Event.elapsed_time
_graph_replay = torch.cuda.CUDAGraph.replay
_CUDAGraph = torch.cuda.CUDAGraph
_graph_cm = torch.cuda.graph
_t_copy = torch.Tensor.copy_
_t_sum = torch.Tensor.sum
_no_grad = torch.no_grad

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # enum cudaLimit, cuda_runtime_api.h


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
    torch.cuda.synchronize()


def _new_event():
    return torch.cuda.Event(enable_timing=True)


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples: list[float], stop: str) -> dict:
    """Statistics of timing samples (seconds): median, quartiles, mean, SEM, min, max, count.
    The parent calls this on the raw samples a child reported."""
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

    def events(self, call, n_sets: int, after=None) -> tuple[dict, list]:
        """do_bench-style event timing; returns (stats with the raw ``samples_s``, last output
        per buffer set). ``after(k)``, when given, runs after each call's end event (untimed:
        e.g. verify that call's output and refresh set k's inputs)."""
        samples: list[float] = []
        outs: list = [None] * n_sets
        started = _perf()
        opts = dict(self.opts, budget_s=self.opts.get("event_budget_s", self.opts["budget_s"]))
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
                if after is not None:
                    after(k)
            _sync()
            samples += [_ev_elapsed(start, end) * 1e-3 for start, end in pairs]
            stop = _stop_reason(samples, started, opts)
            if stop:
                return {**summarize(samples, stop), "samples_s": samples}, outs

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

    def graph(self, call, n_sets: int, after=None) -> tuple[dict, list]:
        """Graph replay timing minus a flush-only graph; returns (stats with the raw
        ``samples_s``, outputs of the graph). ``after()``, when given, runs after each full
        replay's end event (untimed: verify the K outputs, refresh the K input sets)."""
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
                if after is not None:
                    after()
            _sync()
            for e0, e1, e2 in marks:
                t_flush = _ev_elapsed(e0, e1) * 1e-3
                t_full = _ev_elapsed(e1, e2) * 1e-3
                flush_samples.append(t_flush / (n_sets + 1))
                samples.append((t_full - t_flush) / n_sets)
            stop = _stop_reason(samples, started, self.opts)
            if stop:
                stats = {**summarize(samples, stop), "samples_s": samples}
                stats["flush_per_call_median_s"] = summarize(flush_samples, stop)["median_s"]
                self._keep = (full, flush_only)  # freed by the caller after outputs are saved
                return stats, outs


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
    timing = Timer(dict(opts, budget_s=min(opts["budget_s"], 1.0), event_budget_s=min(opts["budget_s"], 1.0),
                        min_samples=10), timer.flush_buffer, timer.l2)

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
    src = dst = None  # frees both (the closures above hold them), before empty_cache
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


#: Size of the square matrix products that measure the tensor-core peak (2 n^3 FLOPs each).
PEAK_MATMUL_N = 8192


def measure_tensor_core_throughput(opts: dict, timer: Timer, dtypes: list[str]) -> dict:
    """Matrix-multiply throughput per dtype (FLOP/s): ``torch.mm`` of two (n, n) matrices
    (n = PEAK_MATMUL_N, 2 n^3 FLOPs, cuBLAS's best kernel on the tensor cores for float16 and
    bfloat16; float32 as PyTorch runs it by default, without TF32), timed in a CUDA graph like
    every row. The compute floor of a row is its FLOPs over this peak: a kernel cannot do the
    same arithmetic faster than the vendor's matrix product on this device in this run.
    """
    results: dict = {}
    timing = Timer(dict(opts, budget_s=min(opts["budget_s"], 1.0), event_budget_s=min(opts["budget_s"], 1.0),
                        min_samples=10), timer.flush_buffer, timer.l2)
    n = PEAK_MATMUL_N
    for name in dtypes:
        try:
            a = torch.randn((n, n), device="cuda", dtype=DTYPES[name])
            b = torch.randn((n, n), device="cuda", dtype=DTYPES[name])
            out = torch.empty((n, n), device="cuda", dtype=DTYPES[name])

            def product(_k, a=a, b=b, out=out):
                torch.mm(a, b, out=out)
                return out

            for _ in range(3):
                product(0)
            _sync()
            stats, _ = timing.graph(product, 1)
            timing._keep = None
            results[name] = {"flops_per_s": 2.0 * n ** 3 / stats["median_s"], "shape": [n, n, n], "stats": stats,
                             "what": f"torch.mm of two ({n}, {n}) {name} matrices, CUDA-graph timing"}
        except Exception as exc:  # noqa: BLE001 - a missing peak leaves the compute floor unknown, flagged
            results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        finally:
            a = b = out = None
            torch.cuda.empty_cache()
    return results

