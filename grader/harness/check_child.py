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
import protocol  # noqa: E402  (the harness's sibling file)

# Rebind what this harness needs before any student code can patch the modules it comes from.
_perf_counter = time.perf_counter
_json_dumps = json.dumps
_open = open
_exc_format = traceback.format_exception_only

MESSAGE_CAP = 2000


def _short(text: str) -> str:
    return text if len(text) <= MESSAGE_CAP else text[:MESSAGE_CAP] + " [...]"


class LaunchCounter:
    """Counts @triton.jit kernel launches by wrapping the run() of Triton's kernel classes.

    Installed before the submission is imported; covers compiled kernels (JITFunction),
    the CPU interpreter (InterpretedFunction) and autotuned or heuristic wrappers, which end
    in one of the two.
    """

    def __init__(self) -> None:
        self.count = 0

    def install(self) -> None:
        import triton.runtime.jit as jit

        classes = [jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:  # pragma: no cover - older Triton
            pass
        for cls in classes:
            original = cls.run

            def counted_run(kernel, *args, __original=original, **kwargs):
                self.count += 1
                return __original(kernel, *args, **kwargs)

            cls.run = counted_run


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


def main(workdir: str, progress_fd: int) -> int:
    import torch
    from safetensors.torch import load_file, save_file

    with _open(os.path.join(workdir, "plan.json"), encoding="utf-8") as handle:
        plan = protocol.CheckPlan.model_validate_json(handle.read())
    device = plan.device
    other_device = plan.other_device
    progress = Progress(progress_fd)

    def synchronize() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    bases_cpu = load_file(os.path.join(workdir, "inputs.safetensors"))
    # Keep every buffer alive until the end so that no address is ever reused: a submission
    # that memoises by data_ptr must not be rescued by the caching allocator.
    keep_alive: list = []
    bases = {name: tensor.to(device) for name, tensor in bases_cpu.items()}
    synchronize()

    counter = LaunchCounter()
    counter.install()

    progress.write("import")
    sys.path.insert(0, workdir)
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("submission", os.path.join(workdir, plan.module_file))
        module = importlib.util.module_from_spec(spec)
        sys.modules["submission"] = module
        spec.loader.exec_module(module)
        synchronize()
    except BaseException as exc:  # noqa: BLE001 - SystemExit at import is a finding, not our exit
        _write_json(os.path.join(workdir, "done.json"),
                    {"phase": "import", "exception": _exception_report(exc, with_traceback=True)})
        return 0

    function = getattr(module, plan.function, None)
    if not callable(function):
        _write_json(os.path.join(workdir, "done.json"), {"phase": "lookup", "missing": plan.function})
        return 0

    other_cache: dict = {}

    def base_on(name: str, where: str):
        if where == "primary":
            return bases[name]
        if name not in other_cache:
            other_cache[name] = bases_cpu[name].clone().to(other_device)
        return other_cache[name]

    def materialise(arg):
        if arg.kind == "scalar":
            return arg.value
        view = torch.as_strided(base_on(arg.base, arg.device), arg.size, arg.stride, arg.offset)
        if arg.requires_grad:
            view = view.detach().requires_grad_(True)
        keep_alive.append(view)
        return view

    def storage_ptr(tensor) -> int:
        try:
            return tensor.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 - meta tensors have no storage pointer
            return -1

    for step_index, step in enumerate(plan.steps):
        reports = []
        saved: dict = {}
        for call in step.calls:
            args = [materialise(a) for a in call.args]
            kwargs = {k: materialise(a) for k, a in call.kwargs.items()}
            tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
            input_ptrs = {storage_ptr(t) for t in tensors} - {-1}
            fills = [None, *call.refills]
            for round_index, fill in enumerate(fills):
                call_id = call.id if round_index == 0 else f"{call.id}@{round_index}"
                if fill is not None:
                    with torch.no_grad():
                        for position, base_name in fill.items():
                            target = args[position]
                            target.copy_(bases[base_name].view(target.shape))
                    synchronize()
                progress.write(f"call {call_id}")
                launches_before = counter.count
                started = _perf_counter()
                report: dict = {"id": call_id}
                try:
                    result = function(*args, **kwargs)
                    synchronize()
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
                report["launches"] = counter.count - launches_before
                if report["status"] == "ok":
                    if isinstance(result, torch.Tensor):
                        plain = result.detach().as_subclass(torch.Tensor)
                        report["out"] = {
                            "shape": list(plain.shape),
                            "stride": list(plain.stride()),
                            "dtype": str(plain.dtype).replace("torch.", ""),
                            "device": str(plain.device),
                            "contiguous": bool(plain.is_contiguous()),
                            "aliases_input": storage_ptr(plain) in input_ptrs,
                            "requires_grad": bool(plain.requires_grad),
                        }
                        if plain.device.type != "meta":
                            saved[f"{call_id}:out"] = plain.to("cpu").contiguous().clone()
                    else:
                        report["status"] = "not_tensor"
                        report["returned_type"] = type(result).__name__
                if call.save_inputs_after:
                    for arg in [*call.args, *call.kwargs.values()]:
                        if arg.kind == "tensor" and arg.device == "primary":
                            saved[f"{call_id}:base_after:{arg.base}"] = bases[arg.base].to("cpu").clone()
                reports.append(report)
                if report.get("fatal"):
                    break
            if reports and reports[-1].get("fatal"):
                break
        if saved:
            save_file(saved, os.path.join(workdir, f"step_{step_index}.safetensors"))
        _write_json(os.path.join(workdir, f"step_{step_index}.json"), {"check": step.check, "calls": reports})
        if reports and reports[-1].get("fatal"):
            _write_json(os.path.join(workdir, "done.json"), {"phase": "fatal", "step": step_index})
            return 0
    _write_json(os.path.join(workdir, "done.json"), {"phase": "done"})
    progress.write("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
