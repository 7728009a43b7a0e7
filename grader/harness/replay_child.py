"""The trusted replay process: runs a submission's recorded Triton kernels, never its Python.

Run as a script in the sandbox with the GPU: ``python replay_child.py WORKDIR``. It imports the
standard library, torch, safetensors and its sibling harness files (timing.py, launches.py,
cuda_driver.py, protocol.py) and the assignment's torch-only bench.py and oracle.py (staged as
``assignment_bench.py`` and ``assignment_oracle.py``); the submission's file is not in its
sandbox. What it runs of the submission is GPU code: the cubins the parent checked against the
recording (sha256), loaded and launched through the CUDA driver (cuda_driver.py), never through
code generated from a recording.

Two phases, from ``replay_plan.json`` (``protocol.ReplayPlan``, written by the parent from a
validated recording) and ``benchmark_plan.json`` (``protocol.BenchmarkPlan``):

1. ``check_calls``: each recorded check call is replayed once on the replay inputs the parent
   wrote (``replay_inputs.safetensors``, keys ``<call id>|<buffer>``), with fresh output and
   scratch buffers (NaN bytes, or the value the wrapper filled them with). The output views go
   to ``replay_outputs.safetensors`` (key: call id; ``<call id>:out<k>`` for output k >= 1 of a
   tuple); the parent compares them with the oracle. Each call's status also names the input
   buffers (whole bases, guards included) whose bytes the launches changed: on a GPU this is the
   trusted observation of ``output_contract``'s "inputs untouched".
2. ``benchmark`` (only when the parent asks): each row's recorded call is timed (timing.py's
   event and graph methods, L2 flush before every call) on K buffer sets made by bench.py's
   ``make_inputs``. Every set holds values drawn by bench.py's ``refill_inputs`` from a seed
   this process keeps to itself. After every timed call (untimed) every output is verified on
   the elements the row's ``TimedVerification`` selects (the assignment's declared axes, with
   indices drawn at random after the call) under the checks' own ``Tolerance.allowed``, slack
   included, against the fp64 oracle (``assignment_oracle.benchmark_oracle``) of the inputs
   regenerated from that seed into new buffers, which the kernel never had the address of: a
   kernel that rewrites its inputs so that its output looks right for them (zeros in, zeros
   out) is caught, and the selected elements of the inputs themselves must be unchanged. Then
   the set gets new values from a new seed: no two timed calls see the same inputs. The raw
   samples go to the parent, which computes the statistics.

The parent starts this process before the correctness child runs (its start-up, torch and the
CUDA context, then overlaps the child's) and feeds it through files in its work folder, each
written whole (renamed into place): ``replay_plan.json`` starts phase 1; then
``benchmark_plan.json`` starts phase 2, or ``quit`` ends the process (``quit`` also ends the
wait for the first plan, when the correctness run gave nothing to replay). The parent sends
phase 2 before it has evaluated the checks (their oracles take it 0.6-1.0 s on the H200's
host) and puts ``stop_benchmark`` in the folder when a check failed: the rows not started yet
are then skipped (``benchmark_stopped`` in the result).

Results: ``replay_result.json`` (``protocol.ReplayResult``, rewritten after each phase and row;
``phase`` says which phase finished last). A CUDA error poisons the process: what follows is skipped and reported as such.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import secrets
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # python -I leaves the script's folder out
import protocol  # noqa: E402
from cuda_driver import CudaDriver, pack_parameters  # noqa: E402
from launches import fresh_buffers, layout_copy_views, output_views  # noqa: E402
from timing import DTYPES, PersistingL2, Timer, _sync, gpu_info, versions  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
#: A file the parent puts in the work folder when the rows need not be timed any more (a check
#: failed while they were being timed): the rows not started yet are skipped.
STOP_BENCHMARK = "stop_benchmark"
_perf = time.perf_counter


def _load_module(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _write(workdir: str, document: protocol.ReplayResult) -> None:
    tmp = os.path.join(workdir, "replay_result.json.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(document.model_dump_json(fallback=str))
    os.replace(tmp, os.path.join(workdir, "replay_result.json"))


class Kernels:
    """The recording's kernels, loaded once from their checked cubins."""

    def __init__(self, driver: CudaDriver, records: list[protocol.KernelRecord], folder: str) -> None:
        self.driver = driver
        self.records = {k.id: k for k in records}
        self.loaded: dict = {}
        self.folder = folder

    def get(self, kernel_id: str):
        if kernel_id not in self.loaded:
            record = self.records[kernel_id]
            with open(os.path.join(self.folder, f"kernel_{kernel_id}.cubin"), "rb") as handle:
                cubin = handle.read()
            if hashlib.sha256(cubin).hexdigest() != kernel_id:
                raise RuntimeError(f"kernel {record.name}: the cubin does not match its recorded digest")
            self.loaded[kernel_id] = self.driver.load(
                cubin, name=record.name, shared=record.shared, num_warps=record.num_warps, num_ctas=record.num_ctas,
                cooperative=record.launch_cooperative_grid, pdl=record.launch_pdl)
        return self.loaded[kernel_id]


class Sequence:
    """A recorded call's launches bound to one set of buffers: packed once, launched on demand.

    Before the launches, buffers the wrapper filled (zeros for an accumulator...) are filled
    again, and the layout copies it made of its inputs (``contiguous()``...) are made again
    from the current inputs, as the wrapper did on every call (so a timed call pays for them);
    Triton's global scratch is allocated once per set.
    """

    def __init__(self, recording: protocol.CallRecording, buffers: dict[str, torch.Tensor], kernels: Kernels) -> None:
        self.fills = []
        for record in recording.buffers:
            if record.fill is not None and record.fill_dtype and not record.name.startswith(("arg", "kwarg_")):
                dtype = getattr(torch, record.fill_dtype)
                element = torch.empty(0, dtype=dtype).element_size()
                raw = buffers[record.name]
                self.fills.append((raw[: raw.numel() - raw.numel() % element].view(dtype), record.fill))
        self.copies = layout_copy_views(recording.model_dump(), buffers)
        self.launches = []
        # The buffers (their addresses are packed below), Triton's scratch and the packed
        # parameters stay alive as long as the sequence: a freed buffer's memory would be
        # handed to the next allocation while the kernels still write to it.
        self.keep: list = [buffers]
        for launch in recording.launches:
            kernel_record = kernels.records[launch.kernel]
            kernel = kernels.get(launch.kernel)
            values = []
            for arg in launch.args:
                if isinstance(arg, protocol.PointerArg):
                    values.append(int(buffers[arg.buffer].data_ptr()) + arg.offset_bytes)
                else:
                    values.append(arg.value)
            scratch = 0
            if kernel_record.global_scratch_size:
                count = launch.grid[0] * launch.grid[1] * launch.grid[2] * kernel_record.num_ctas
                size = count * kernel_record.global_scratch_size + kernel_record.global_scratch_align
                block = torch.empty(size, dtype=torch.uint8, device="cuda")
                self.keep.append(block)
                address = int(block.data_ptr())
                align = kernel_record.global_scratch_align
                scratch = (address + align - 1) // align * align
            parameters = pack_parameters(kernel_record.signature, values, scratch)
            self.keep.append(parameters)
            self.launches.append((kernel, tuple(launch.grid), parameters))
        self.driver = kernels.driver

    def __call__(self) -> None:
        stream = torch.cuda.current_stream().cuda_stream
        for view, value in self.fills:
            view.fill_(value)
        for target, source in self.copies:
            target.copy_(source)
        for kernel, grid, parameters in self.launches:
            self.driver.launch(kernel, grid, parameters, stream)


def replay_checks(plan: protocol.ReplayPlan, kernels: Kernels, workdir: str, result: protocol.ReplayResult) -> bool:
    """Phase 1; returns False when a CUDA error poisoned the process. Outputs are saved under
    the call id (the first) and ``<call id>:out<k>`` (output k >= 1 of a tuple)."""
    from safetensors.torch import load_file, save_file

    if not plan.check_calls:
        return True
    inputs = load_file(os.path.join(workdir, plan.check_inputs))
    outputs: dict = {}
    status: dict[str, protocol.ReplayCallStatus] = {}
    alive = True
    for call in plan.check_calls:
        if not alive:
            status[call.call_id] = protocol.ReplayCallStatus(status="skipped",
                                                             message="an earlier replay poisoned the GPU context")
            continue
        try:
            given = {key.split("|", 1)[1]: tensor for key, tensor in inputs.items() if key.split("|", 1)[0] == call.call_id}
            buffers = fresh_buffers(call.model_dump(), given, "cuda")
            Sequence(call, buffers, kernels)()
            _sync()
            for k, out in enumerate(output_views(call.model_dump(), buffers)):
                if out is not None:
                    outputs[call.call_id if k == 0 else f"{call.call_id}:out{k}"] = out.contiguous().cpu()
            status[call.call_id] = protocol.ReplayCallStatus(status="ok", inputs_modified=modified_inputs(given, buffers))
        except Exception as exc:  # noqa: BLE001 - a failing replay is a finding about the submission
            text = f"{type(exc).__name__}: {str(exc)[:500]}"
            status[call.call_id] = protocol.ReplayCallStatus(status="error", message=text)
            if "CUDA" in text or "illegal" in text.lower() or "launch" in text.lower():
                alive = _context_alive()
    if outputs:
        save_file(outputs, os.path.join(workdir, "replay_outputs.safetensors"))
    result.check_calls = status
    return alive


def modified_inputs(given: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor]) -> list[str]:
    """The input buffers whose bytes changed in a replayed call: ``given`` holds the bytes the
    parent sent (CPU uint8, the whole base of each argument, guards included), ``buffers`` the
    GPU copies the launches ran on. Compared bitwise on the GPU: a store one element past a
    view lands in its base's guard and shows here, whatever the submission's Python did in its
    own process afterwards."""
    changed = []
    for name, sent in sorted(given.items()):
        replayed = buffers.get(name)
        if replayed is not None and name.startswith(("arg", "kwarg_")) and \
                not torch.equal(replayed, sent.to(replayed.device, non_blocking=False)):
            changed.append(name)
    return changed


def _context_alive() -> bool:
    try:
        torch.zeros(1, device="cuda").add_(1)
        _sync()
        return True
    except Exception:  # noqa: BLE001 - a poisoned context
        return False


def time_rows(plan: protocol.BenchmarkPlan, kernels: Kernels, workdir: str, result: protocol.ReplayResult) -> None:
    """Phase 2: time and verify every benchmark row (see the module docstring)."""
    bench = _load_module("assignment_bench")
    oracle = _load_module("assignment_oracle")
    opts = plan.options.model_dump()
    l2 = PersistingL2()
    result.persisting_l2_control = l2.how
    l2.reset()
    l2_bytes = (result.gpu or {}).get("l2_bytes") or (50 << 20)
    flush_bytes = int(opts.get("flush_bytes") or max(4 * l2_bytes, 256 << 20))
    result.flush_bytes = flush_bytes
    timer = Timer(opts, torch.ones(flush_bytes // 4, device="cuda", dtype=torch.float32), l2)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    for row in plan.rows:
        if os.path.exists(os.path.join(workdir, STOP_BENCHMARK)):
            result.benchmark_stopped = True  # the parent no longer needs the times
            break
        entry = protocol.TimedRowResult(id=row.id, shape=row.shape, dtype=row.dtype)
        result.rows.append(entry)
        try:
            for key, value in _time_row(row, opts, bench, oracle, kernels, timer, generator).items():
                setattr(entry, key, value)
        except Exception as exc:  # noqa: BLE001 - a failing row is reported, not fatal
            entry.error = f"{type(exc).__name__}: {str(exc)[:1000]}"
            entry.traceback = "".join(traceback.format_exception(exc))[-3000:]
            if not _context_alive():
                entry.fatal = True
                break
        torch.cuda.empty_cache()
        _write(workdir, result)


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as integers of the same width (NaN payloads compare too)."""
    if not tensor.dtype.is_floating_point:
        return tensor
    return tensor.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])


def select(tensor: torch.Tensor, axes: list, index: dict[str, torch.Tensor]) -> torch.Tensor:
    """The elements of ``tensor`` that ``axes`` pick: along each axis named by a drawn
    dimension, the indices drawn for it (``index[name]``); every index along an axis of None."""
    for axis, name in enumerate(axes):
        if name is not None:
            tensor = tensor.index_select(axis, index[name])
    return tensor


def draw_indices(verification: protocol.TimedVerification, outputs: list[torch.Tensor], inputs: list,
                 count: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
    """``count`` independent draws (one per timed call to verify) of ``verification.draws[d]``
    indices of every drawn dimension d, uniform over its size (read from the first output or
    input whose axes name it); drawn on the outputs' device after the calls."""
    sizes: dict[str, int] = {}
    named = [(out.axes, tensor) for out, tensor in zip(verification.outputs, outputs)]
    named += [(axes, tensor) for axes, tensor in zip(verification.input_axes, inputs) if axes is not None]
    for axes, tensor in named:
        for axis, name in enumerate(axes):
            if name is not None and name not in sizes:
                sizes[name] = int(tensor.shape[axis])
    device = outputs[0].device
    drawn = {name: torch.randint(0, sizes[name], (count, per_call), device=device, generator=generator)
             for name, per_call in verification.draws.items()}
    return [{name: values[i] for name, values in drawn.items()} for i in range(count)]


def check_timed_output(outs: list[torch.Tensor], inputs: list, pristine: list, index: dict[str, torch.Tensor],
                       oracle, verification: protocol.TimedVerification) -> tuple:
    """Verify one timed call's outputs on the elements ``index`` selects (0-d tensors on the
    device, no synchronisation).

    Args:
        outs: the call's outputs, in return order.
        inputs: the input buffers the call was given, as they are after it.
        pristine: the same inputs as they were before the call, regenerated after it into new
            buffers (the kernel never had their addresses).
        index: drawn dimension -> LongTensor of indices, drawn after the call.
        oracle: the assignment's oracle module (``benchmark_oracle(inputs, index)`` ->
            {output name: (expected, scale, slack)} on the selected elements).
        verification: per output its axes and the checks' own ``Tolerance`` of the row's
            dtype, applied with ``Tolerance.allowed`` (slack included); per input its axes.

    Returns:
        (worst error over tolerance, elements outside tolerance, selected input elements that
        differ from ``pristine``, [worst per output]): the oracle is that of ``pristine``, so a
        kernel that bends its inputs towards its output is measured against what it was given.
    """
    return check_timed_outputs([(outs, inputs, pristine, index)], oracle, verification)


def check_timed_outputs(calls: list[tuple], oracle, verification: protocol.TimedVerification) -> tuple:
    """``check_timed_output`` over several timed calls at once: each call's (outs, inputs,
    pristine, index) is gathered on its own (its oracle is that of its own pristine inputs:
    ``benchmark_oracle`` may depend on the whole input, e.g. the cross-entropy's count of
    valid targets, layernorm's dw over every row), then one comparison per output covers every
    gathered element. Same results as the calls checked one by one (summed counts, the largest
    error), with about half the host work per call.

    Returns:
        (worst error over tolerance, elements outside tolerance, input elements changed,
        [worst error over tolerance of each output]), 0-d tensors on the device.
    """
    ratios: list[list[torch.Tensor]] = [[] for _ in verification.outputs]
    given_parts: list[torch.Tensor] = []
    before_parts: list[torch.Tensor] = []
    for outs, inputs, pristine, index in calls:
        expected_by_name = oracle.benchmark_oracle(tuple(pristine), index)
        for k, spec in enumerate(verification.outputs):
            expected, scale, slack = expected_by_name[spec.name]
            got = select(outs[k], spec.axes, index).double()
            allowed = spec.tolerance.allowed(expected, scale.expand_as(expected),
                                             None if slack is None else slack.expand_as(expected))
            ratio = ((got - expected).abs() / allowed).nan_to_num(nan=math.inf)
            ratios[k].append(ratio.flatten())
        for given, before, axes in zip(inputs, pristine, verification.input_axes):
            if axes is not None and isinstance(given, torch.Tensor):
                given_parts.append(_bits(select(given, axes, index)).flatten().to(torch.int64))
                before_parts.append(_bits(select(before, axes, index)).flatten().to(torch.int64))
    per_output = [torch.cat(parts) for parts in ratios]
    worst_by_output = [r.max() if r.numel() else torch.zeros((), dtype=torch.float64, device=r.device)
                       for r in per_output]
    worst = torch.stack(worst_by_output).max()
    bad = sum((r > 1).sum() for r in per_output)
    changed = torch.zeros((), dtype=torch.int64, device=worst.device)
    if given_parts:
        changed += torch.cat(given_parts).ne(torch.cat(before_parts)).sum()
    return worst, bad, changed, worst_by_output


def regenerate(bench, like: list, seed: int, generator: torch.Generator) -> list:
    """New buffers shaped like ``like`` holding what bench.py's ``refill_inputs`` draws from
    ``seed`` (``refill_inputs`` draws every value from the generator it is given, so the same
    seed gives the same bits on the same device)."""
    fresh = [torch.empty_like(t) for t in like]
    bench.refill_inputs(fresh, generator.manual_seed(seed))
    return fresh


def _time_row(row: protocol.TimedRow, opts: dict, bench, oracle, kernels: Kernels, timer: Timer, generator) -> dict:
    """Time and verify one row; the result's ``stage_s`` gives the wall seconds of each stage
    (setup, warmup, event, wall, graph), the row's share of the benchmark's exclusive GPU time."""
    stage_started = _perf()
    stage_s: dict[str, float] = {}

    def stage(name: str) -> None:
        nonlocal stage_started
        now = _perf()
        stage_s[name] = now - stage_started
        stage_started = now

    recording = row.recording
    verification = row.verification
    shape, dtype = tuple(row.shape), DTYPES[row.dtype]
    n_sets = int(opts["sets"])
    sets = [list(bench.make_inputs(shape, dtype, row.seed * 1000 + k, "cuda")) for k in range(n_sets)]
    sequences, outputs = [], []
    for inputs in sets:
        given = {f"arg{i}": torch.empty(0, dtype=torch.uint8, device="cuda").set_(t.untyped_storage())
                 for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}
        buffers = fresh_buffers(recording.model_dump(), given, "cuda", copy_inputs=False)
        sequences.append(Sequence(recording, buffers, kernels))
        outputs.append(output_views(recording.model_dump(), buffers))
    if len(outputs[0]) != len(verification.outputs) or any(out is None for out in outputs[0]):
        raise RuntimeError(f"the recorded call returned {len(outputs[0])} tensor(s) in its buffers, "
                           f"expected {len(verification.outputs)}")
    state = _fresh_state(len(verification.outputs))
    seeds = [0] * n_sets  # the seed of the values set k holds now (never leaves this process)
    values = torch.Generator(device="cuda")

    def call(k: int):
        sequences[k]()
        return outputs[k]

    def refresh(k: int) -> None:
        seeds[k] = secrets.randbits(63)
        bench.refill_inputs(sets[k], values.manual_seed(seeds[k]))

    def verify_and_refresh_sets(ks: list[int]) -> None:
        """Verify the last timed call on each set of ``ks`` (indices drawn now, after the calls),
        then give those sets new values; every set's output is still the one of its last call."""
        drawn = draw_indices(verification, outputs[0], sets[0], len(ks), generator)
        checked = [(outputs[k], sets[k], regenerate(bench, sets[k], seeds[k], values), drawn[i])
                   for i, k in enumerate(ks)]
        worst, bad, changed, by_output = check_timed_outputs(checked, oracle, verification)
        torch.maximum(state["worst"], worst, out=state["worst"])
        for kept, value in zip(state["by_output"], by_output):
            torch.maximum(kept, value, out=kept)
        state["bad"] += bad
        state["changed"] += changed
        state["calls"] += len(ks)
        for k in ks:  # after the gathers above (same stream): the verified values were the timed ones
            refresh(k)

    def verify_after_call(k: int) -> None:
        # Events: each call is verified right after it. Deferring the verification to every
        # n_sets-th call (fewer host operations) left the event samples 5-10x noisier on the H200
        # (calls back to back, then one burst of verification work; docs/benchmarks.md).
        verify_and_refresh_sets([k])

    def verify_all() -> None:
        verify_and_refresh_sets(list(range(n_sets)))

    names = [spec.name for spec in verification.outputs]
    out: dict = {"launches": len(recording.launches), "kernels": sorted({launch.kernel[:12] for launch in recording.launches}),
                 "stage_s": stage_s}
    _sync()
    stage("setup")
    for _ in range(3):  # warm-up (no compilation here: the binaries are loaded)
        for k in range(n_sets):
            call(k)
    for k in range(n_sets):  # values whose seed is known, whatever the warm-up did to the inputs
        refresh(k)
    probe = regenerate(bench, sets[0], seeds[0], values)  # before any timed call touched set 0
    if not all(torch.equal(_bits(a), _bits(b)) for a, b in zip(probe, sets[0])):
        raise RuntimeError("bench.py's refill_inputs drew other values from the same seed: timed outputs cannot be "
                           "verified against regenerated inputs (the grader's fault, not the submission's)")
    del probe
    # One untimed call per set and its verification (which gives the sets new values): the first
    # use of the verification's torch ops in this process loads their kernels, 0.1-0.2 s on the
    # H200 that fell inside the first timed stage of a dtype (whose first row then got 16 event
    # samples). What it finds is not counted: the timed calls are verified on their own.
    for k in range(n_sets):
        call(k)
    verify_all()
    state.update(_fresh_state(len(names)))
    _sync()
    stage("warmup")
    timer.l2.reset()
    stats, _ = timer.events(call, n_sets, after=verify_after_call)
    _sync()
    out["event"] = stats
    out["event_verified"] = _verdict(state, names)
    stage("event")
    out["wall"] = timer.wall(call, n_sets)
    stage("wall")
    timer.l2.reset()
    state.update(_fresh_state(len(names)))
    try:
        stats, _ = timer.graph(call, n_sets, after=verify_all)
        _sync()
        out["graph"] = stats
        out["graph_verified"] = _verdict(state, names)
    except Exception as exc:  # noqa: BLE001 - capture failures are a finding
        out["graph"] = {"error": f"graph capture or replay failed: {type(exc).__name__}: {str(exc)[:500]}"}
    finally:
        timer._keep = None
    out["persisting_l2_limit_after"] = timer.l2.limit()
    stage("graph")
    return out


def _fresh_state(outputs: int) -> dict:
    return {"worst": torch.zeros((), dtype=torch.float64, device="cuda"),
            "by_output": [torch.zeros((), dtype=torch.float64, device="cuda") for _ in range(outputs)],
            "bad": torch.zeros((), dtype=torch.int64, device="cuda"),
            "changed": torch.zeros((), dtype=torch.int64, device="cuda"), "calls": 0}


def _verdict(state: dict, names: list[str]) -> protocol.TimedVerdict:
    _sync()
    worst = float(state["worst"])
    changed = int(state["changed"])
    by_output = {name: (value if math.isfinite(value) else None)
                 for name, value in zip(names, (float(v) for v in state["by_output"]))}
    return protocol.TimedVerdict(
        calls_verified=state["calls"], elements_outside_tolerance=int(state["bad"]),
        worst_error_over_tolerance=worst if math.isfinite(worst) else None, worst_by_output=by_output,
        input_elements_changed=changed,
        passed=state["calls"] > 0 and int(state["bad"]) == 0 and changed == 0 and math.isfinite(worst))


def _wait_for(workdir: str, name: str) -> str | None:
    """Block until the parent writes ``name`` (returns its path) or ``quit`` (returns None)."""
    wanted, stop = os.path.join(workdir, name), os.path.join(workdir, "quit")
    while True:
        if os.path.exists(wanted):
            return wanted
        if os.path.exists(stop):
            return None
        time.sleep(0.02)


def main(workdir: str) -> int:
    result = protocol.ReplayResult(started_unix=time.time())
    if not torch.cuda.is_available():
        result.error = "no CUDA device visible to the replay process"
        _write(workdir, result)
        return 0
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # makes PyTorch's primary context current on this thread
    result.gpu = gpu_info()
    result.versions = versions()
    plan_path = _wait_for(workdir, "replay_plan.json")
    if plan_path is None:
        return 0
    with open(plan_path, encoding="utf-8") as handle:
        plan = protocol.ReplayPlan.model_validate_json(handle.read())
    try:
        driver = CudaDriver()
        kernels = Kernels(driver, plan.kernels, os.path.join(workdir, "kernels"))
    except Exception as exc:  # noqa: BLE001
        result.error = f"cannot set up the CUDA driver: {type(exc).__name__}: {exc}"
        _write(workdir, result)
        return 0
    alive = replay_checks(plan, kernels, workdir, result)
    result.phase = "checks"
    _write(workdir, result)
    bench_path = _wait_for(workdir, "benchmark_plan.json")
    if bench_path is not None:
        with open(bench_path, encoding="utf-8") as handle:
            benchmark = protocol.BenchmarkPlan.model_validate_json(handle.read())
        if alive:
            time_rows(benchmark, kernels, workdir, result)
        else:
            result.benchmark_error = "not timed: a replayed check call poisoned the GPU context"
        result.phase = "benchmark"
    result.finished_unix = time.time()
    _write(workdir, result)
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # the result is written: no teardown of torch and the CUDA context to wait for
