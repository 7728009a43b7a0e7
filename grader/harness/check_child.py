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
- ``done.json``      how the run ended (``done``, or an import, lookup or CUDA failure). The
                     parent trusts ``done`` only if the progress pipe also said ``done``.

Progress goes to a pipe the parent holds open (file descriptor PROGRESS_FD), one line per
event: ``import`` before the submission is imported, ``call <id>`` before each call and
``done`` at the end. What was written to a pipe cannot be taken back, so a submission that
deletes files or forges reports cannot make the parent believe the harness never started, or
that a run finished that did not.

Usage: python check_child.py WORKDIR PROGRESS_FD
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # python -I leaves the script's folder out
import protocol  # noqa: E402  (the harness's sibling files)
from launches import LaunchRecorder, as_bytes, fresh_buffers  # noqa: E402

# Rebind what this harness needs before any student code can patch the modules it comes from.
_perf_counter = time.perf_counter
_json_dumps = json.dumps
_open = open
_exc_format = traceback.format_exception_only

MESSAGE_CAP = 2000


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
        self.recordings: list[dict] = []
        self.kernels: dict[str, tuple[dict, bytes]] = {}
        self.function = None
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
        return report, result, kept

    def describe_output(self, report: dict, result, inputs: list, call_id: str, saved: dict) -> None:
        torch = self.torch
        if report["status"] != "ok":
            return
        if not isinstance(result, torch.Tensor):
            report["status"] = "not_tensor"
            report["returned_type"] = type(result).__name__
            return
        plain = result.detach().as_subclass(torch.Tensor)
        input_ptrs = {self.storage_ptr(t) for t in inputs if isinstance(t, torch.Tensor)} - {-1}
        report["out"] = {
            "shape": list(plain.shape),
            "stride": list(plain.stride()),
            "dtype": str(plain.dtype).replace("torch.", ""),
            "device": str(plain.device),
            "contiguous": bool(plain.is_contiguous()),
            "aliases_input": self.storage_ptr(plain) in input_ptrs,
            "requires_grad": bool(plain.requires_grad),
        }
        if plain.device.type != "meta":
            saved[f"{call_id}:out"] = plain.to("cpu").contiguous().clone()

    def record(self, call, report: dict, result, kept: tuple, args: list, kwargs: dict, saved: dict) -> None:
        """Describe a recorded call; replay it here under the interpreter, keep it for the GPU."""
        launches, torch_ops = kept
        recording, kernels = self.recorder.describe(call.id, launches, torch_ops, args=args, kwargs=kwargs,
                                                    output=result, current_stream=self.current_stream())
        replay = {"launches": len(launches), "torch_ops": list(torch_ops), "side_streams": recording["side_streams"]}
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
            out = self.recorder.replay_interpreted(launches, recording, fresh)
            if out is not None:
                saved[f"{call.id}:replay_out"] = out.to("cpu").contiguous().clone()
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
            self.describe_output(report, result, tensors, call_id, saved)
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

    # ---- benchmark rows (GPU) ---------------------------------------------------------------
    def record_benchmark_rows(self) -> None:
        """Call the submission once per benchmark row (after a warm-up call) and record it."""
        if not self.plan.benchmark_rows:
            return
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assignment_bench.py")
        spec = importlib.util.spec_from_file_location("assignment_bench", path)
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
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
                entry.update(launches=len(kept[0]), torch_ops=list(kept[1]), not_replayable=recording["not_replayable"])
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
    def run(self) -> int:
        from safetensors.torch import save_file

        if not self.import_submission():
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
        _write_json(os.path.join(self.workdir, "done.json"), {"phase": "done"})
        self.progress.write("done")
        return 0


def main(workdir: str, progress_fd: int) -> int:
    return Child(workdir, progress_fd).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
