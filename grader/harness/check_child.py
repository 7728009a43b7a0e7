"""Untrusted side of a correctness run: import the submission, call it, write what it returned.

This file is bound into the sandbox (bubblewrap) with the other harness files and run as a
script, so it imports only the standard library, torch, triton, safetensors, pydantic and its
sibling ``protocol.py``, never the ``grader`` package. Nothing it
writes is a verdict: the parent process reads back output tensors as plain numbers and decides
every check itself. The student's code runs in this same process and may tamper with anything
here; the design assumes that (see docs/security.md).

Protocol (all paths inside WORKDIR, which the parent binds read-write):

- ``plan.json``      written by the parent (``protocol.CheckPlan``): function name, device, and
                     a list of steps, each a list of calls. A call's tensor arguments are
                     strided views (size, stride, storage offset) of flat base buffers in
                     ``inputs.safetensors``; other arguments are scalars.
- ``step_<i>.json``  per-call reports of step i (``protocol.CallReport``: status, exception
                     type and message, output metadata, number of Triton kernel launches).
- ``step_<i>.safetensors``  outputs of step i and the input base buffers as they were after
                     each call (the parent compares them bitwise with what it sent).
- ``step_<i>.safetensors`` also holds ``<id>:replay_out``: under the CPU interpreter, the output
                     of a recorded call's launches replayed on the call's replay inputs.
- ``recording/``     on a GPU: ``recording.json`` (``protocol.Recording``: the recorded calls,
                     the benchmark rows' calls, the kernels) and ``kernel_<sha256>.cubin`` files,
                     for the trusted replay process (grader/harness/replay_child.py).
- ``done.json``      how the run ended (``done``, or an import, lookup or CUDA failure, or
                     ``inputs``: the tiled inputs could not be built on the device, before any
                     submission code ran). The parent trusts ``done`` only if the progress pipe
                     also said ``done``. Its ``notes`` name autotuners narrowed under the
                     interpreter.

A call's ``tiled`` arguments (protocol.TiledSpec: large_offsets' 4.3 GB tensors) are built here
on the device from a few pattern rows, before the submission is imported; for calls with
``sample_rows`` only those rows of the output are written back.

A child started ahead of its job (``--started-ahead``: the warm grader's, grader/runner.py
``PrestartedChild``) loads torch, Triton and safetensors and waits for the parent to rename
``plan.json`` into place (``quit`` ends the wait), says ``plan`` on the progress pipe, then
runs as any other.

Progress goes to a pipe the parent holds open (file descriptor PROGRESS_FD), one line per
event: ``plan`` when a child started ahead received its plan, ``import`` before the submission
is imported, ``precompile`` before the compile-only pass (GPU: ``Child.precompile``),
``call <id>`` before each call,
``compile begin`` / ``compile end`` around each Triton compilation (the parent leaves that
time out of the wall-clock limit, up to a budget, timing it by its own clock) and ``done`` at
the end. What was written to a pipe cannot be taken back, so a submission that
deletes files or forges reports cannot make the parent believe the harness never started, or
that a run finished that did not.

Usage: python check_child.py WORKDIR [--started-ahead] PROGRESS_FD
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # python -I leaves the script's folder out
import interpreter_bf16  # noqa: E402  (the harness's sibling files)
import interpreter_compat  # noqa: E402
import poison  # noqa: E402
import protocol  # noqa: E402
from compilation import (  # noqa: E402
    _PASS_PEAK,
    MemoryGatedExecutor,
    _load_kernel,
    autotune_notes,
    narrow_autotuners_for_interpreter,
    report_compilations,
    report_each_compilation,
)
from launches import LaunchRecorder, as_bytes, fresh_buffers, returned_tensors  # noqa: E402
from tiled_inputs import build_tiled_inputs, tiled_key  # noqa: E402

# Rebind what this harness needs before any student code can patch the modules it comes from.
_perf_counter = time.perf_counter
_json_dumps = json.dumps
_open = open
_exc_format = traceback.format_exception_only
_exit = os._exit
_streams = (sys.stdout, sys.stderr)  # as they are before the submission can replace them

MESSAGE_CAP = 2000
#: A call slower than this under the interpreter gets a note on its programs (slow_call_notes).
SLOW_CALL_S = 5.0


def _short(text: str) -> str:
    return text if len(text) <= MESSAGE_CAP else text[:MESSAGE_CAP] + " [...]"


def _write_json(path: str, document: object) -> None:
    with _open(path, "w", encoding="utf-8") as handle:
        handle.write(_json_dumps(document))


class Progress:
    """Line-oriented writes to the parent's progress pipe; write errors are ignored."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, line: str) -> None:
        try:
            os.write(self.fd, (line + "\n").encode())
        except OSError:
            pass


def _exception_report(exc: BaseException, *, with_traceback: bool = False) -> dict:
    report = {"type": type(exc).__name__, "message": _short(str(exc)), "exit": isinstance(exc, SystemExit)}
    if with_traceback:
        report["message"] = _short("".join(_exc_format(type(exc), exc)).strip())
        report["traceback"] = _short("".join(traceback.format_exception(exc))[-4000:])
    return report


class Child:
    """One correctness run: the plan, the bases on the device, the recorder, the submission."""

    def __init__(self, workdir: str, progress_fd: int) -> None:
        import torch
        from safetensors.torch import load_file

        self.torch = torch
        self.workdir = workdir
        with _open(os.path.join(workdir, "plan.json"), encoding="utf-8") as handle:
            self.plan = protocol.CheckPlan.model_validate_json(handle.read())
        self.device = self.plan.device
        self.progress = Progress(progress_fd)
        self.bases_cpu = load_file(os.path.join(workdir, "inputs.safetensors"))
        self.bases = {name: tensor.to(self.device) for name, tensor in self.bases_cpu.items()}
        # Every buffer stays alive until the end so that no address is ever reused: a submission
        # that memoises by data_ptr must not be rescued by the caching allocator.
        self.keep_alive: list = []
        self.other_cache: dict = {}
        self.recorder = LaunchRecorder(interpret=os.environ.get("TRITON_INTERPRET") == "1")
        self.tiled: dict = {}
        self.narrowed: dict = {}
        self.recordings: list[dict] = []
        self.kernels: dict[str, tuple[dict, bytes]] = {}
        self.function = None
        self._bench = None
        self.slowest: tuple = (0.0, "", 0, 0)  # (seconds, call id, programs, launches) of the slowest call
        self.synchronize()

    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def current_stream(self) -> int | None:
        return int(self.torch.cuda.current_stream().cuda_stream) if self.device.startswith("cuda") else None

    # ---- import --------------------------------------------------------------------------
    def import_submission(self) -> bool:
        """Import the module; False (done.json written) when it raised or lacks the function."""
        self.recorder.install()
        report_compilations(self.progress)
        if not self.recorder.interpret:
            report_each_compilation(self.progress)
        narrow_autotuners_for_interpreter(self.narrowed)
        if self.recorder.interpret:
            interpreter_bf16.install()  # bf16 arithmetic through fp32, as a GPU rounds it
            interpreter_compat.install()  # libdevice math, and/or/not between tensors, as compiled
        poison.install()  # memory the submission never writes holds the same poison every run
        self.progress.write("import")
        sys.path.insert(0, self.workdir)
        try:
            import importlib.util

            spec = importlib.util.spec_from_file_location("submission", os.path.join(self.workdir, self.plan.module_file))
            module = importlib.util.module_from_spec(spec)
            sys.modules["submission"] = module
            spec.loader.exec_module(module)
            self.synchronize()
        except BaseException as exc:  # noqa: BLE001 - SystemExit at import is a finding, not our exit
            _write_json(os.path.join(self.workdir, "done.json"),
                        {"phase": "import", "exception": _exception_report(exc, with_traceback=True)})
            return False
        self.function = getattr(module, self.plan.function, None)
        if not callable(self.function):
            _write_json(os.path.join(self.workdir, "done.json"), {"phase": "lookup", "missing": self.plan.function})
            return False
        return True

    # ---- arguments -----------------------------------------------------------------------
    def base_on(self, name: str, where: str):
        if where == "primary":
            return self.bases[name]
        if name not in self.other_cache:
            self.other_cache[name] = self.bases_cpu[name].clone().to(self.plan.other_device)
        return self.other_cache[name]

    def materialise(self, arg):
        if arg.kind == "scalar":
            return arg.value
        if arg.kind == "tiled":
            return self.tiled[tiled_key(arg)]
        view = self.torch.as_strided(self.base_on(arg.base, arg.device), arg.size, arg.stride, arg.offset)
        if arg.requires_grad:
            view = view.detach().requires_grad_(True)
        self.keep_alive.append(view)
        return view

    @staticmethod
    def storage_ptr(tensor) -> int:
        try:
            return tensor.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 - meta tensors have no storage pointer
            return -1

    # ---- one call ------------------------------------------------------------------------
    def invoke(self, call_id: str, args: list, kwargs: dict, *, record: bool = False) -> tuple[dict, object, tuple]:
        """Call the submission once; returns (report, result, (launches, torch ops) if recorded)."""
        self.progress.write(f"call {call_id}")
        launches_before = self.recorder.count
        programs_before, empty_before = self.recorder.programs, self.recorder.empty_launches
        started = _perf_counter()
        report: dict = {"id": call_id}
        kept: tuple = ([], [])
        try:
            if record:
                with self.recorder.recording() as kept:
                    result = self.function(*args, **kwargs)
                    self.synchronize()
            else:
                result = self.function(*args, **kwargs)
                self.synchronize()
            report["status"] = "ok"
        except BaseException as exc:  # noqa: BLE001 - every exception is reported
            if isinstance(exc, KeyboardInterrupt):
                raise
            result = None
            report["status"] = "raised"
            report["exception"] = _exception_report(exc)
            if "CUDA error" in str(exc) or "cudaError" in str(exc):
                report["fatal"] = True
        report["duration_s"] = _perf_counter() - started
        report["launches"] = self.recorder.count - launches_before
        report["programs"] = self.recorder.programs - programs_before
        report["empty_launches"] = self.recorder.empty_launches - empty_before
        self.slowest = max(self.slowest, (report["duration_s"], call_id, report["programs"], report["launches"]))
        return report, result, kept

    def describe_output(self, report: dict, result, inputs: list, call_id: str, saved: dict,
                        sample_rows: list | None = None) -> None:
        """Describe what the call returned: a tensor, or a tuple of ``plan.outputs`` tensors
        (saved as ``<id>:out``, ``<id>:out1``, ...; ``sample_rows`` applies to the first)."""
        torch = self.torch
        if report["status"] != "ok":
            return
        wanted = self.plan.outputs
        tensors = returned_tensors(result)
        if len(tensors) != wanted or (wanted == 1) != isinstance(result, torch.Tensor):
            report["status"] = "not_tensor"
            report["returned_type"] = (type(result).__name__ if not isinstance(result, (tuple, list))
                                       else f"{type(result).__name__} of {len(result)}")
            return
        input_ptrs = {self.storage_ptr(t) for t in inputs if isinstance(t, torch.Tensor)} - {-1}
        metas = []
        for k, tensor in enumerate(tensors):
            plain = tensor.detach().as_subclass(torch.Tensor)
            metas.append({
                "shape": list(plain.shape),
                "stride": list(plain.stride()),
                "dtype": str(plain.dtype).replace("torch.", ""),
                "device": str(plain.device),
                "contiguous": bool(plain.is_contiguous()),
                "aliases_input": self.storage_ptr(plain) in input_ptrs,
                "requires_grad": bool(plain.requires_grad),
            })
            if plain.device.type != "meta":
                saved.update(_output_to_save(plain, call_id + (":out" if k == 0 else f":out{k}"),
                                             sample_rows if k == 0 else None))
        report["out"] = metas[0]
        report["more_outputs"] = metas[1:]

    def record(self, call, report: dict, result, kept: tuple, args: list, kwargs: dict, saved: dict) -> None:
        """Describe a recorded call; replay it here under the interpreter, keep it for the GPU."""
        launches, torch_ops = kept
        recording, kernels = self.recorder.describe(call.id, launches, torch_ops, args=args, kwargs=kwargs,
                                                    output=result, current_stream=self.current_stream())
        replay = {"launches": len(launches), "torch_ops": recording["torch_ops"], "side_streams": recording["side_streams"],
                  "layout_copies": len(recording["layout_copies"])}
        report["replay"] = replay
        if recording["not_replayable"]:
            replay.update(status="not_replayable", message=recording["not_replayable"])
            return
        if not self.recorder.interpret:
            self.recordings.append(recording)
            self.kernels.update(kernels)
            replay["status"] = "recorded"
            return
        # CPU interpreter: no binaries; run the same interpreted launches on the replay inputs.
        inputs = {}
        for index, arg in enumerate(call.replay_args):
            if arg.kind == "tensor":
                inputs[f"arg{index}"] = as_bytes(self.bases[arg.base])
        for key, arg in call.replay_kwargs.items():
            if arg.kind == "tensor":
                inputs[f"kwarg_{key}"] = as_bytes(self.bases[arg.base])
        try:
            fresh = fresh_buffers(recording, inputs, self.device)
            outs = self.recorder.replay_interpreted(launches, recording, fresh)
            for k, out in enumerate(outs):
                if out is not None:
                    saved[f"{call.id}:replay_out" + (f"{k}" if k else "")] = out.to("cpu").contiguous().clone()
            replay["status"] = "replayed"
        except Exception as exc:  # noqa: BLE001 - a replay that raises is a finding
            replay.update(status="raised", message=f"{type(exc).__name__}: {_short(str(exc))}")

    def run_call(self, call, reports: list, saved: dict) -> bool:
        """Every round of one planned call; False when a CUDA error poisoned the process."""
        torch = self.torch
        args = [self.materialise(a) for a in call.args]
        kwargs = {k: self.materialise(a) for k, a in call.kwargs.items()}
        tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
        for round_index, fill in enumerate([None, *call.refills]):
            call_id = call.id if round_index == 0 else f"{call.id}@{round_index}"
            if fill is not None:
                with torch.no_grad():
                    for position, base_name in fill.items():
                        target = args[position]
                        target.copy_(self.bases[base_name].view(target.shape))
                self.synchronize()
            recorded = call.record_launches and round_index == 0
            report, result, kept = self.invoke(call_id, args, kwargs, record=recorded)
            try:
                self.describe_output(report, result, tensors, call_id, saved, call.sample_rows)
            except Exception as exc:  # noqa: BLE001 - what the call returned, not the harness, failed
                # A tensor subclass whose detach/as_subclass/stride raise (or return a non-tensor):
                # a call that returned no usable tensor, judged as such by every check, not an end
                # of the child (which would grade nothing and read as sys.exit).
                report["status"] = "not_tensor"
                report["returned_type"] = f"{type(result).__name__} (describing it raised {type(exc).__name__})"
                report.pop("out", None)
                report.pop("more_outputs", None)
            if recorded and report["status"] == "ok":
                self.record(call, report, result, kept, args, kwargs, saved)
            if call.save_inputs_after:
                for arg in [*call.args, *call.kwargs.values()]:
                    if arg.kind == "tensor" and arg.device == "primary":
                        saved[f"{call_id}:base_after:{arg.base}"] = self.bases[arg.base].to("cpu").clone()
            reports.append(report)
            if report.get("fatal"):
                return False
        return True

    def slow_call_notes(self) -> list[str]:
        """Under the interpreter, a call slow enough to matter (``SLOW_CALL_S``) and what makes it
        slow there: its programs run one after another in Python."""
        seconds, call_id, programs, launches = self.slowest
        if not self.recorder.interpret or seconds < SLOW_CALL_S or programs < 2:
            return []
        return [f"The slowest call ({call_id}) took {seconds:.1f} s on the CPU interpreter: its {launches} Triton "
                f"launch(es) ran {programs} programs, one after another in Python. Fewer, larger programs (a bigger "
                f"block per program, a loop inside it) make it faster here; a GPU runs them side by side."]

    # ---- compile-only pass (GPU) ------------------------------------------------------------
    def precompile_trials(self) -> list:
        """The distinct calls of the plan (and the benchmark rows) to run compile-only: one per
        argument layout (dtype, size, stride, 16-byte alignment of the first element; scalar
        values), which is what Triton specialises on; each is a function returning (args,
        kwargs) on new buffers. Calls that must be rejected (a tensor on the other device, or
        one that requires grad) and tiled ones are left out: they compile nothing useful."""
        torch = self.torch
        clones: dict = {}
        seen: set = set()
        trials: list = []

        def layout(arg) -> tuple:
            if arg.kind == "scalar":
                return ("scalar", type(arg.value).__name__, repr(arg.value))
            base = self.bases[arg.base]
            return ("tensor", str(base.dtype), tuple(arg.size), tuple(arg.stride),
                    arg.offset * base.element_size() % 16)

        def view(arg):
            if arg.kind == "scalar":
                return arg.value
            if arg.base not in clones:
                clones[arg.base] = self.bases[arg.base].clone()
                self.keep_alive.append(clones[arg.base])
            return torch.as_strided(clones[arg.base], arg.size, arg.stride, arg.offset)

        for step in self.plan.steps:
            for call in step.calls:
                specs = [*call.args, *call.kwargs.values()]
                if any(a.kind == "tiled" or (a.kind == "tensor" and (a.device != "primary" or a.requires_grad))
                       for a in specs):
                    continue
                key = (tuple(layout(a) for a in call.args),
                       tuple((name, layout(a)) for name, a in sorted(call.kwargs.items())))
                if key in seen:
                    continue
                seen.add(key)
                trials.append(lambda call=call: ([view(a) for a in call.args],
                                                 {name: view(a) for name, a in call.kwargs.items()}))
        for row in self.plan.benchmark_rows:
            def row_inputs(row=row):
                dtype = getattr(torch, row.dtype)
                return list(self.bench_module().make_inputs(tuple(row.shape), dtype, row.warmup_seed, self.device)), {}
            trials.append(row_inputs)
        return trials

    def throwaway_function(self):
        """The submission's function from a second import of its file, under another module
        name (``submission_precompile``), for the compile-only pass: whatever state its calls
        leave (caches, kept kernel handles, first-call tables, a choice its own timing made on
        kernels that never ran) stays in that module, never in the one the checks call. The
        kernels it compiles land in the submission's on-disk Triton cache, keyed by their
        source, where the real module's first launches find them. None when that import fails
        (e.g. a custom op that cannot be defined twice): then there is no pass."""
        import importlib.util

        name = "submission_precompile"
        try:
            spec = importlib.util.spec_from_file_location(name, os.path.join(self.workdir, self.plan.module_file))
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            function = getattr(module, self.plan.function, None)
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001 - the checks import and report it themselves
            return None
        return function if callable(function) else None

    def precompile(self) -> bool:
        """Compile the submission's Triton specialisations on ``plan.precompile_threads``
        threads before the checks run, so that the checks' first launches find them compiled.

        Triton compiles one kernel at a time, at its first launch; a submission with a dozen
        specialisations (dtypes, block sizes, alignments) spends most of its correctness run
        there. Here every distinct call of the plan is made once, through a second import of
        the file (``throwaway_function``), with launches turned into compile-only warm-ups
        (``JITFunction.run(..., warmup=True)``) inside Triton 3.6's ``AsyncCompileMode``, which
        hands each compilation to a thread pool (its MLIR passes, LLVM and ptxas release the
        GIL); an autotuner compiles every config its pruning keeps, without timing any or
        choosing one. Leaving the mode waits for every compilation; then each kernel's launcher
        is built. Nothing is launched, so the outputs of these calls are meaningless and
        dropped; what they raise is ignored (the real call raises it again, and a failed
        compilation is compiled again, and reported, at the real launch). The pass is
        bracketed by ``compile begin``/``compile end`` (the parent leaves it out of the time
        limit, within the compile budget). GPU only: the interpreter compiles nothing.

        Returns:
            False when the pass left the CUDA context unusable (a call computed on outputs that
            were never written, e.g. indices, and faulted): ``run`` then stops with phase
            ``precompile`` and the parent runs the checks again without the pass. True otherwise.
        """
        threads = self.plan.precompile_threads
        if threads <= 0 or self.recorder.interpret or not self.device.startswith("cuda"):
            return True
        try:
            import triton.runtime.jit as jit
            from triton.runtime._async_compile import AsyncCompileMode
            from triton.runtime.autotuner import Autotuner
        except ImportError:  # pragma: no cover - another Triton version: compile at first launch
            return True
        trials = self.precompile_trials()
        if not trials:
            return True
        self.progress.write("precompile")
        self.progress.write("compile begin")
        function = self.throwaway_function()
        if function is None:
            self.progress.write("compile end")
            return True
        original_run, original_tune = jit.JITFunction.run, Autotuner.run

        def compile_only(kernel, *args, grid=None, warmup=None, __run=original_run, **kwargs):
            return __run(kernel, *args, grid=grid, warmup=True, **kwargs)

        def compile_configs(tuner, *args, __tune=original_tune, **kwargs):
            if len(tuner.configs) <= 1:
                return __tune(tuner, *args, **kwargs)
            tuner.nargs = dict(zip(tuner.arg_names, args))
            try:
                configs = tuner.prune_configs(kwargs)
            except Exception:  # noqa: BLE001 - the real call prunes (and raises) again
                configs = tuner.configs
            for config in configs:
                try:
                    tuner.fn.run(*args, **kwargs, **config.all_kwargs())
                except Exception:  # noqa: BLE001 - reported by the real call
                    pass
            tuner.nargs = None
            return None

        executor = MemoryGatedExecutor(threads, self.plan.compile_memory_bytes)
        _PASS_PEAK[:] = [executor]
        usable = True
        try:
            jit.JITFunction.run, Autotuner.run = compile_only, compile_configs
            with AsyncCompileMode(executor, ignore_errors=True) as mode:
                for make in trials:
                    try:
                        args, kwargs = make()
                        function(*args, **kwargs)
                    except KeyboardInterrupt:
                        raise
                    except BaseException:  # noqa: BLE001 - SystemExit too: the real call says it
                        pass
                    args = kwargs = None
            # Each compiled kernel's launcher (Triton 3.6 builds a C launcher per signature with
            # the host compiler, at the first launch, and caches it on disk by its source):
            # built here on the same threads, so the real module's first launches load it.
            compiled = [future.kernel for future in mode.future_kernels.values() if future.kernel is not None]
            for loading in [executor.submit(_load_kernel, kernel) for kernel in compiled]:
                loading.exception()
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001 - e.g. another AsyncCompileMode active: compile at launch
            pass
        finally:
            jit.JITFunction.run, Autotuner.run = original_run, original_tune
            executor.shutdown(wait=True)
            _PASS_PEAK.clear()
            sys.modules.pop("submission_precompile", None)
            try:
                self.synchronize()
            except Exception:  # noqa: BLE001 - the pass faulted the context: no check can run in it
                usable = False
            self.progress.write("compile end")
        return usable

    # ---- benchmark rows (GPU) ---------------------------------------------------------------
    def bench_module(self):
        """The assignment's bench.py (staged beside this file as ``assignment_bench.py``)."""
        if self._bench is None:
            import importlib.util

            path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assignment_bench.py")
            spec = importlib.util.spec_from_file_location("assignment_bench", path)
            bench = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(bench)
            self._bench = bench
        return self._bench

    def record_benchmark_rows(self) -> None:
        """Call the submission once per benchmark row (after a warm-up call) and record it."""
        if not self.plan.benchmark_rows:
            return
        bench = self.bench_module()
        rows = []
        for row in self.plan.benchmark_rows:
            dtype = getattr(self.torch, row.dtype)
            warm = list(bench.make_inputs(tuple(row.shape), dtype, row.warmup_seed, self.device))
            report, _, _ = self.invoke(f"benchmark {row.id}#warmup", warm, {})
            del warm
            inputs = list(bench.make_inputs(tuple(row.shape), dtype, row.seed, self.device))
            entry = {"id": row.id}
            if report["status"] == "ok":
                report, result, kept = self.invoke(f"benchmark {row.id}", inputs, {}, record=True)
            if report["status"] == "ok":
                recording, kernels = self.recorder.describe(row.id, *kept, args=inputs, kwargs={}, output=result,
                                                            current_stream=self.current_stream())
                self.recordings.append(recording)
                self.kernels.update(kernels)
                entry.update(launches=len(kept[0]), torch_ops=recording["torch_ops"], not_replayable=recording["not_replayable"])
            else:
                entry["error"] = (report.get("exception") or {}).get("message", report["status"])
            rows.append(entry)
            if report.get("fatal"):
                break
            del inputs
            self.torch.cuda.empty_cache()
        _write_json(os.path.join(self.workdir, "benchmark_rows.json"), {"rows": rows})

    def write_recording(self) -> None:
        if not self.recordings:
            return
        folder = os.path.join(self.workdir, "recording")
        os.makedirs(folder, exist_ok=True)
        for kernel_id, (_, cubin) in self.kernels.items():
            with _open(os.path.join(folder, f"kernel_{kernel_id}.cubin"), "wb") as handle:
                handle.write(cubin)
        _write_json(os.path.join(folder, "recording.json"),
                    {"kernels": [record for record, _ in self.kernels.values()], "calls": self.recordings})

    # ---- the run -------------------------------------------------------------------------
    def build_inputs(self) -> bool:
        """Build the tiled inputs on the device, before the import; False (done.json written,
        phase ``inputs``) when that fails, e.g. out of device memory."""
        try:
            self.tiled = build_tiled_inputs(self.plan, self.bases, self.device)
            self.synchronize()
        except BaseException as exc:  # noqa: BLE001 - reported; the parent skips those checks
            self.tiled = {}
            _write_json(os.path.join(self.workdir, "done.json"), {"phase": "inputs", "exception": _exception_report(exc)})
            return False
        return True

    def run(self) -> int:
        from safetensors.torch import save_file

        if not self.build_inputs() or not self.import_submission():
            return 0
        if not self.precompile():
            _write_json(os.path.join(self.workdir, "done.json"), {"phase": "precompile"})
            return 0
        for step_index, step in enumerate(self.plan.steps):
            reports: list = []
            saved: dict = {}
            alive = True
            for call in step.calls:
                alive = self.run_call(call, reports, saved)
                if not alive:
                    break
            if saved:
                save_file(saved, os.path.join(self.workdir, f"step_{step_index}.safetensors"))
            _write_json(os.path.join(self.workdir, f"step_{step_index}.json"), {"check": step.check, "calls": reports})
            if not alive:
                _write_json(os.path.join(self.workdir, "done.json"), {"phase": "fatal", "step": step_index})
                self.write_recording()
                return 0
        self.record_benchmark_rows()
        self.write_recording()
        _write_json(os.path.join(self.workdir, "done.json"), {"phase": "done", "notes": [
            *autotune_notes(self.narrowed), *interpreter_compat.notes(), *self.slow_call_notes()]})
        self.progress.write("done")
        return 0


def _output_to_save(plain, key: str, sample_rows) -> dict:
    """The output tensor (CPU copy) to send back under ``key``: whole, or only ``sample_rows``
    of it (an output that has no such rows sends nothing, and the parent reports it missing)."""
    if sample_rows is None:
        return {key: plain.to("cpu").contiguous().clone()}
    import torch

    try:
        index = torch.tensor(sample_rows, dtype=torch.long, device=plain.device)
        return {key: plain.index_select(0, index).to("cpu").contiguous().clone()}
    except Exception:  # noqa: BLE001 - wrong shape or rank: nothing to compare
        return {}


#: Seconds between two looks for ``plan.json`` while started ahead of the job.
PLAN_POLL_S = 0.01


def wait_for_plan(workdir: str) -> bool:
    """Started ahead of its job (grader/runner.py ``PrestartedChild``): load what every run
    needs (torch, Triton, safetensors; nothing touches the GPU), then wait until the parent
    renames ``plan.json`` into the work folder (after the source, the inputs and the
    assignment's harness files). False when ``quit`` appears instead, or this process's parent
    is gone (without bubblewrap's --die-with-parent), before a plan came."""
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401
    import triton  # noqa: F401

    parent = os.getppid()
    plan, stop = os.path.join(workdir, "plan.json"), os.path.join(workdir, "quit")
    while not os.path.exists(plan):
        if os.path.exists(stop) or os.getppid() != parent:
            return False
        time.sleep(PLAN_POLL_S)
    return True


def main(workdir: str, progress_fd: int, *, started_ahead: bool = False) -> int:
    """One correctness run. ``started_ahead`` (``--started-ahead``): wait for the plan (it may
    be in place already) and say ``plan`` on the progress pipe before anything else."""
    if started_ahead:
        if not wait_for_plan(workdir):
            return 0
        Progress(progress_fd).write("plan")
    return Child(workdir, progress_fd).run()


if __name__ == "__main__":
    status = main(sys.argv[1], int(sys.argv[-1]), started_ahead="--started-ahead" in sys.argv[2:-1])
    # Everything is written (done.json last): leave without the interpreter's teardown of
    # torch, Triton and the CUDA context (0.5-1 s the parent would wait for), and without
    # running atexit handlers the submission may have registered.
    for stream in _streams:  # the harness's own objects, not ones the submission put in sys
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - closed, or raising SystemExit: leave all the same
            pass
    _exit(status)
