"""The peers child of a benchmark: times the assignment's trusted implementations on a GPU.

Run as a script: ``python bench_child.py WORKDIR``. It never imports a submission: it times the
assignment's peers (bench.py's PEERS, torch.compile of its COMPILED_PEER, the course reference
kernel), the device-to-device copy bandwidth and the streaming probe, with the method of
timing.py. The submission itself is timed by replaying its recorded Triton launches in
replay_child.py. It knows no assignment by name: the assignment's bench.py sits beside it as
``assignment_bench.py``. It imports only the standard library, torch, triton, safetensors and
its sibling files, never the ``grader`` package.

Protocol (WORKDIR):
- ``bench_plan.json``  written by the parent: rows (id, shape, dtype, seed), settings, the
  reference file's name and the function name.
- ``bench_progress.json``  rewritten after each row (results so far).
- ``bench_result.json``    written last: environment, copy bandwidth, per-row timings with raw
  samples (the parent computes the statistics), the streaming probe per row.
- ``bench_out_<row>.safetensors``  the selected elements (``PeersPlan.selection``: evenly
  spread indices of every drawn dimension) of every output of the last timed call on each
  buffer set (``<impl>|<method>|set<k>|<output index>``), re-verified by the parent against
  the fp64 oracle on inputs it regenerates from the same seeds (stage 1 for event, stage 2 for
  graph timing); with ``save_full`` one whole output set (``<impl>|<method>|full|<index>``).
"""

from __future__ import annotations

import faulthandler
import gc
import importlib.util
import os
import resource
import sys
import time
import traceback

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # python -I leaves the script's folder out
import protocol  # noqa: E402
from timing import (  # noqa: E402
    DTYPES,
    PersistingL2,
    Timer,
    _no_grad,
    _perf,
    _sync,
    _t_copy,
    gpu_info,
    measure_copy_bandwidth,
    measure_tensor_core_throughput,
    sample_row_indices,
    stage_seed,
    versions,
)

_open = open
bench = None  # the assignment's bench.py, loaded by main()


def _returned(out) -> list:
    """The tensors an implementation returned, in order (a tensor, or a tuple/list of them)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        return list(out)
    return []


def _check_output(out, expected: list) -> str | None:
    """Why ``out`` is not the outputs ``expected`` ([(shape, dtype)] in order) on the GPU, or None."""
    got = _returned(out)
    if len(got) != len(expected):
        return f"returned {type(out).__name__}, not {len(expected)} tensor(s)"
    for k, (tensor, (shape, dtype)) in enumerate(zip(got, expected)):
        if tuple(tensor.shape) != tuple(shape) or tensor.dtype != dtype or tensor.device.type != "cuda":
            return (f"output {k}: {tuple(tensor.shape)} {tensor.dtype} on {tensor.device}, expected {tuple(shape)} "
                    f"{dtype} on cuda")
    return None


def expected_outputs(inputs) -> list:
    """bench.py's [(shape, dtype)] of every output (``expected_outputs``, or the one of
    ``expected_output``)."""
    if hasattr(bench, "expected_outputs"):
        return list(bench.expected_outputs(inputs))
    return [bench.expected_output(inputs)]


def kept_index(selection: protocol.TimedVerification, expected: list, inputs, count: int) -> dict[str, list[int]]:
    """Evenly spread indices (``sample_row_indices``) of every drawn dimension, its size read
    from the first output (or input) whose axes name it."""
    sizes: dict[str, int] = {}
    named = [(out.axes, shape) for out, (shape, _) in zip(selection.outputs, expected)]
    named += [(axes, tuple(t.shape)) for axes, t in zip(selection.input_axes, inputs)
              if axes is not None and isinstance(t, torch.Tensor)]
    for axes, shape in named:
        for axis, name in enumerate(axes):
            if name is not None and name not in sizes:
                sizes[name] = int(shape[axis])
    return {name: sample_row_indices(sizes[name], count) for name in selection.draws}


def _selected(tensor, axes: list, index: dict[str, list[int]]):
    for axis, name in enumerate(axes):
        if name is not None:
            tensor = tensor.index_select(axis, torch.tensor(index[name], dtype=torch.long, device=tensor.device))
    return tensor.contiguous().cpu()


def time_row(name: str, fn, row: protocol.PeerRowPlan, opts: dict, timer: Timer, sets: list, saved: dict,
             full_set: int | None, selection: protocol.TimedVerification) -> dict:
    """Compile, warm up and time ``fn`` on one row; store outputs of timed calls in ``saved``."""
    shape, dtype = tuple(row.shape), DTYPES[row.dtype]
    expected = expected_outputs(sets[0])
    result: dict = {}
    n_sets = len(sets)
    index = kept_index(selection, expected, sets[0], opts["sample_rows"])

    def refill(stage: int) -> None:
        with _no_grad():
            for k, inputs in enumerate(sets):
                fresh = bench.make_inputs(shape, dtype, stage_seed(row.seed, stage, k))
                for old, new in zip(inputs, fresh):
                    if isinstance(old, torch.Tensor):
                        _t_copy(old, new)
                del fresh
        _sync()

    def call(k: int):
        return fn(*sets[k])

    def keep(method: str, outs: list) -> None:
        info = {"index": index, "full_set": None}
        for k, out in enumerate(outs):
            problem = _check_output(out, expected)
            if problem:
                raise RuntimeError(f"{method}: {problem}")
            for position, (tensor, spec) in enumerate(zip(_returned(out), selection.outputs)):
                saved[f"{name}|{method}|set{k}|{position}"] = _selected(tensor, spec.axes, index)
        if full_set is not None:
            for position, tensor in enumerate(_returned(outs[full_set])):
                saved[f"{name}|{method}|full|{position}"] = tensor.contiguous().cpu()
            info["full_set"] = full_set
        result.setdefault("saved", {})[method] = info

    try:
        refill(0)
        t0 = _perf()
        first = call(0)
        _sync()
        result["first_call_s"] = _perf() - t0
        problem = _check_output(first, expected)
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


def time_streaming_probe(timer: Timer, sets: list) -> dict:
    """Graph time (seconds per call) of the assignment's streaming probe on one row's own sets.

    The probe makes the same memory accesses as the assignment's kernel with no arithmetic to
    speak of (for the softmax VJP ``torch.add(y, g)``: 2 reads + 1 write), timed by the same
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


def process_state(workdir: str) -> dict[str, int]:
    """This process's resources after a row: open descriptors, threads, peak resident set
    (bytes) and the free bytes of its work folder's filesystem. Recorded per row so that a
    child that ends early shows what it was running out of (docs/benchmarks.md, the attention
    section, says which child this was for)."""
    state: dict[str, int] = {"max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    try:
        state["open_fds"] = len(os.listdir("/proc/self/fd"))
        state["threads"] = len(os.listdir("/proc/self/task"))
    except OSError:
        pass
    try:
        info = os.statvfs(workdir)
        state["workdir_free_bytes"] = info.f_bavail * info.f_frsize
    except OSError:
        pass
    return state


def _write(workdir: str, name: str, document: dict) -> None:
    """Write the result so far as a ``protocol.PeersResult`` (the parent reads the same model)."""
    tmp = os.path.join(workdir, name + ".tmp")
    with _open(tmp, "w", encoding="utf-8") as handle:
        handle.write(protocol.PeersResult.model_validate(document).model_dump_json(fallback=str))
    os.replace(tmp, os.path.join(workdir, name))


def _time_row_of_plan(workdir: str, index: int, row: protocol.PeerRowPlan, entry: dict, impls: dict,
                      opts: dict, timer: Timer, plan: protocol.PeersPlan) -> bool:
    """Time every implementation on one row of the plan into ``entry``; True when one of them
    left a CUDA error that poisons the process (the rows after it are skipped)."""
    shape, dtype = tuple(row.shape), DTYPES[row.dtype]
    sets = [bench.make_inputs(shape, dtype, stage_seed(row.seed, 0, k)) for k in range(opts["sets"])]
    saved: dict = {}
    full_set = (index % opts["sets"]) if opts.get("save_full", False) else None
    fatal = False
    for name, fn in impls.items():
        if fn is None:
            try:
                fn = _compiled_peer()
            except Exception as exc:  # noqa: BLE001
                entry["impls"][name] = {"error": f"torch.compile unavailable: {type(exc).__name__}: {exc}"}
                continue
        entry["impls"][name] = time_row(name, fn, row, opts, timer, sets, saved, full_set, plan.selection)
        if entry["impls"][name].get("fatal"):
            fatal = True
            break
        gc.collect()
    if opts.get("streaming_probe", True) and not fatal:
        entry["streaming_probe"] = time_streaming_probe(timer, sets)
    if saved:
        save_file(saved, os.path.join(workdir, f"bench_out_{index}.safetensors"))
        entry["outputs_file"] = f"bench_out_{index}.safetensors"
    return fatal


def main(workdir: str) -> int:
    global bench
    # A fatal signal (SIGSEGV, SIGABRT, SIGBUS...) prints every thread's Python stack on
    # stderr, which the parent keeps as the end of the log: otherwise a child killed in native
    # code leaves only its exit status.
    faulthandler.enable()
    bench = _load_module(os.path.join(os.path.dirname(os.path.abspath(__file__)), "assignment_bench.py"),
                         "assignment_bench")
    with _open(os.path.join(workdir, "bench_plan.json"), encoding="utf-8") as handle:
        plan = protocol.PeersPlan.model_validate_json(handle.read())
    opts = plan.options.model_dump()
    document: dict = {"mode": "peers", "rows": [], "started_unix": time.time()}
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
    if opts.get("copy_bandwidth", True):
        document["copy_bandwidth"] = measure_copy_bandwidth(opts, timer)
    if opts.get("tensor_core_peak", False):
        document["tensor_core_throughput"] = measure_tensor_core_throughput(
            opts, timer, sorted({row.dtype for row in plan.rows}))
    impls.update(bench.PEERS)
    if plan.reference_file:
        reference = _load_module(os.path.join(workdir, plan.reference_file), "course_reference")
        impls["reference"] = getattr(reference, plan.function)
    if opts.get("compile_peer", True) and bench.COMPILED_PEER is not None:
        impls[bench.COMPILED_PEER[0]] = None  # built per row

    fatal = False
    for index, row in enumerate(plan.rows):
        entry = {"id": row.id, "shape": row.shape, "dtype": row.dtype, "impls": {}}
        document["rows"].append(entry)
        if fatal:
            entry["error"] = "skipped: an earlier CUDA error poisoned the process"
            continue
        try:
            fatal = _time_row_of_plan(workdir, index, row, entry, impls, opts, timer, plan)
        except Exception as exc:  # noqa: BLE001 - the row's inputs or its output file failed: said on the row
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
            entry["traceback"] = "".join(traceback.format_exception(exc))[-3000:]
        gc.collect()
        torch.cuda.empty_cache()
        entry["process"] = process_state(workdir)
        _write(workdir, "bench_progress.json", document)
    document["gpu_after"] = {k: v for k, v in gpu_info().items() if "clock" in k or k in ("temperature_c", "power_w")}
    document["finished_unix"] = time.time()
    _write(workdir, "bench_result.json", document)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
