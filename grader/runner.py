"""Grade one submission: static checks, the sandboxed child, oracles and verdicts.

``grade_source`` is the whole grading of one file and returns the result document described
in docs/architecture.md. The parent (this process) generates every input, computes every
oracle and decides every verdict; the child only runs the submission on inputs it is given and
writes back output tensors, which are read here as plain numbers.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from grader.assignments import get_assignment
from grader.checks import CheckResult
from grader.manifest import get_manifest
from grader.sandbox import ChildOutcome, SandboxUnavailable, bwrap_version, run_sandboxed
from grader.settings import GraderSettings
from grader.source_validation import SourceRejected, validate_source

HARNESS = Path(__file__).parent / "harness" / "check_child.py"
SCHEMA_VERSION = 1


class InfrastructureError(RuntimeError):
    """The grader or the machine failed; no verdict about the submission can be given."""


def package_version(package: str) -> str | None:
    """The installed version of ``package``, or None when it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a CUDA device is visible, else ``cpu``.

    Raises:
        InfrastructureError: ``cuda`` asked for on a machine without one.
    """
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InfrastructureError("--device cuda was asked for, but torch sees no CUDA device")
    if device not in ("cpu", "cuda"):
        raise InfrastructureError(f"unknown device {device!r} (use cpu, cuda or auto)")
    return device


def _environment_versions(device: str) -> dict:
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "grader": package_version("kernel-grader"),
        "bubblewrap": bwrap_version(),
    }
    if device == "cuda":
        versions["cuda"] = torch.version.cuda
    return versions


def _device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    return "cpu (Triton interpreter)"


def _last_progress(outcome: ChildOutcome) -> str | None:
    """What the child was doing last, from its progress pipe, in words."""
    last = outcome.progress.last if outcome.progress is not None else None
    if last is None or last == "done":
        return None
    return "the import of the module" if last == "import" else f"call {last.removeprefix('call ')}"


def _child_error(outcome: ChildOutcome, workdir: Path, settings: GraderSettings) -> dict | None:
    """The error object for a child that did not finish normally, or None if it did.

    Raises:
        InfrastructureError: the harness never started (it announces ``import`` on its
            progress pipe before any submission code runs), so the sandbox or the child's
            start-up failed, not the submission.
    """
    where = _last_progress(outcome)
    during = f" during {where}" if where else ""
    if outcome.timed_out:
        message = f"did not finish within {settings.child_timeout_s:g} s (still running{during})"
        if where and where.startswith("call"):
            message += (
                ". If that call was the first with a new row length: Triton compiles a kernel for each new "
                "block size, and on a GPU a block holding a whole long row (e.g. 262144 elements) can take "
                "minutes to compile; loop over long rows in chunks"
            )
        return {"kind": "timeout", "message": message}
    if outcome.memory_exceeded:
        return {"kind": "resource_limit", "message": f"used more than {settings.memory_limit_bytes / 2**30:.3g} GiB of host memory{during}"}
    if outcome.output_exceeded:
        return {"kind": "resource_limit", "message": f"printed more than {settings.output_kill_bytes / 2**20:.3g} MiB of output{during}"}
    if outcome.process_limit_hit:
        return {"kind": "resource_limit", "message": f"tried to run more than {settings.max_processes} processes or threads{during}"}
    if outcome.progress is None or not outcome.progress.started:
        raise InfrastructureError(
            f"the sandboxed child failed before importing the submission (exit {outcome.returncode}): "
            f"{outcome.log.text[-1500:]}"
        )
    finished = outcome.progress.done and outcome.returncode == 0
    done = None
    done_path = workdir / "done.json"
    if done_path.exists():
        try:
            done = json.loads(done_path.read_text())
        except (OSError, ValueError):
            done = None
    phase = done.get("phase") if isinstance(done, dict) else None
    if phase == "import":
        exc = done.get("exception", {}) if isinstance(done.get("exception"), dict) else {}
        kind = {"SystemExit": "exited", "MemoryError": "resource_limit"}.get(exc.get("type"), "import")
        message = str(exc.get("message", ""))[:2000]
        return {"kind": kind, "message": f"importing the submission raised {message}", "traceback": str(exc.get("traceback", ""))[-3000:]}
    if phase == "lookup":
        return {"kind": "missing_function", "message": f"after import, the module has no callable {done.get('missing')!r}"}
    if phase == "fatal":
        return {"kind": "crash", "message": f"a CUDA error poisoned the process{during}; later checks did not run"}
    if finished:
        return None
    # The harness did not announce the end of the run on its pipe: whatever files the child
    # left, the run did not finish.
    if outcome.signal is not None:
        try:
            name = signal.Signals(outcome.signal).name
        except ValueError:
            name = f"signal {outcome.signal}"
        return {"kind": "crash", "message": f"the process was killed by {name}{during}"}
    return {
        "kind": "exited",
        "message": f"the process exited with status {outcome.returncode}{during} before the run finished "
        "(sys.exit/os._exit in the submission?)",
    }


def _clean_report(raw: object) -> dict | None:
    """A call report from the child, reduced to known fields of known types (or None).

    The child is untrusted and may have rewritten its report files; nothing malformed in them
    may crash the parent or be stored as is.
    """
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        return None
    status = raw.get("status")
    report: dict = {
        "id": raw["id"][:200],
        "status": status if status in ("ok", "raised", "not_tensor") else "raised",
        "launches": raw["launches"] if isinstance(raw.get("launches"), int) and raw["launches"] >= 0 else 0,
        "duration_s": float(raw["duration_s"]) if isinstance(raw.get("duration_s"), (int, float)) else 0.0,
        "fatal": raw.get("fatal") is True,
    }
    exception = raw.get("exception")
    if report["status"] == "raised":
        exception = exception if isinstance(exception, dict) else {}
        report["exception"] = {
            "type": str(exception.get("type", "?"))[:200],
            "message": str(exception.get("message", ""))[:2000],
            "exit": exception.get("exit") is True,
        }
    if report["status"] == "not_tensor":
        report["returned_type"] = str(raw.get("returned_type", "?"))[:200]
    out = raw.get("out")
    if isinstance(out, dict):
        shape = out.get("shape")
        report["out"] = {
            "shape": [int(d) for d in shape] if isinstance(shape, list) and all(isinstance(d, int) for d in shape) else [],
            "dtype": str(out.get("dtype", ""))[:50],
            "device": str(out.get("device", ""))[:50],
            "contiguous": out.get("contiguous") is True,
            "aliases_input": out.get("aliases_input") is True,
            "requires_grad": out.get("requires_grad") is True,
        }
    return report


_CALL_HINTS = {
    "crash": (
        " A crash inside a call is usually the kernel reading or writing outside its tensors: a missing or"
        " wrong mask, or dx stored with y's or g's strides instead of its own (it is a fresh contiguous tensor)."
    ),
    "exited": "",
    "timeout": "",
}


def _call_context(outcome: ChildOutcome, plan, kind: str) -> str:
    """For an error that happened inside a call: that call's inputs, and a hint for crashes."""
    last = outcome.progress.last if outcome.progress is not None else None
    if not last or not last.startswith("call ") or kind not in _CALL_HINTS:
        return ""
    call_id = last.removeprefix("call ").split("@", 1)[0]
    labels = {call.id: call.label for check in plan.checks for call in check.calls}
    label = labels.get(call_id)
    if label is None:
        return ""
    return f". The call's inputs: {label}.{_CALL_HINTS[kind]}"


def _read_evidence(module, plan, workdir: Path) -> tuple[dict, set[int]]:
    """Per-call reports and tensors of every step the child finished, keyed by call id, and the
    indexes of the steps that left a report file."""
    calls = {}
    finished_steps: set[int] = set()
    for index, _ in enumerate(plan.checks):
        report_path = workdir / f"step_{index}.json"
        if not report_path.exists():
            continue
        finished_steps.add(index)
        try:
            step = json.loads(report_path.read_text())
            reports = step["calls"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        tensors_path = workdir / f"step_{index}.safetensors"
        tensors = {}
        if tensors_path.exists():
            try:
                tensors = load_file(str(tensors_path))
            except Exception:  # noqa: BLE001 - a corrupt file reads as "no outputs"
                tensors = {}
        for raw_report in reports:
            report = _clean_report(raw_report)
            if report is None:
                continue
            call_id = report["id"]
            calls[call_id] = module.CallEvidence(
                report=report,
                out=tensors.get(f"{call_id}:out"),
                y_base_after=tensors.get(f"{call_id}:y_base_after"),
                g_base_after=tensors.get(f"{call_id}:g_base_after"),
            )
    return calls, finished_steps


def _call_level_error(evidence_calls: dict) -> dict | None:
    for evidence in evidence_calls.values():
        report = evidence.report or {}
        exc = report.get("exception") or {}
        if exc.get("exit"):
            return {"kind": "exited", "message": f"the submission raised SystemExit in call {report.get('id')}"}
        if exc.get("type") == "MemoryError":
            return {"kind": "resource_limit", "message": f"ran out of memory in call {report.get('id')}"}
    return None


def grade_source(
    source: str | bytes,
    *,
    assignment: str = "softmax_backward",
    device: str = "auto",
    seed: int = 0,
    settings: GraderSettings | None = None,
    benchmark: str = "off",
) -> dict:
    """Grade one submission's source text and return the result document.

    Args:
        source: the student's file, as text or as its bytes (which must be UTF-8).
        assignment: registry name (grader.assignments.ASSIGNMENTS).
        device: ``cpu`` (Triton interpreter), ``cuda`` or ``auto``.
        seed: input seed; the result records it so that staff can reproduce the run.
        settings: sandbox and limits (default: read from GRADER_* environment variables).
        benchmark: ``off``, ``on`` (fail without a GPU) or ``auto`` (run on CUDA when every
            check passed).

    Returns:
        The result document (dict), verdict ``passed``, ``failed`` or ``error``.

    Raises:
        InfrastructureError: the sandbox could not run, the device is unusable, or the grader
            itself failed; no verdict is possible.
    """
    settings = settings or GraderSettings()
    started = time.monotonic()
    module = get_assignment(assignment)
    device = resolve_device(device)
    sandbox_label = (bwrap_version() or "bubblewrap (missing)") if settings.sandbox == "bwrap" else "none (unsafe: GRADER_SANDBOX=unsafe-none)"
    document: dict = {
        "schema": SCHEMA_VERSION,
        "assignment": assignment,
        "verdict": "error",
        "error": None,
        "checks": [],
        "benchmark": None,
        "device": _device_name(device),
        "versions": _environment_versions(device),
        "seed": seed,
        "sandbox": sandbox_label,
        "duration_s": 0.0,
        "timings_s": {},
        "log": {"text": "", "truncated": False, "total_bytes": 0},
    }
    try:
        source = validate_source(source, get_manifest(assignment))
    except SourceRejected as exc:
        # The upload API refuses these files with the same rules (grader/source_validation.py).
        problem = exc.problem
        kind = "missing_function" if problem.kind == "missing_function" else "syntax"
        document["error"] = {"kind": kind, "message": problem.message, **problem.details}
        document["duration_s"] = time.monotonic() - started
        return document

    work_root = settings.work_root or None
    grading_dir = Path(tempfile.mkdtemp(prefix="grading-", dir=work_root))  # mode 0700
    workdir = grading_dir / "check"
    cache_dir = grading_dir / "triton-cache"  # this submission's own Triton cache
    try:
        workdir.mkdir()
        cache_dir.mkdir()
        (workdir / module.MODULE_FILE).write_text(source, encoding="utf-8")
        plan_started = time.monotonic()
        plan = module.build_plan(seed=seed, device=device)
        other_device = "cpu" if device == "cuda" else "meta"
        (workdir / "plan.json").write_text(json.dumps(plan.as_plan(other_device)))
        save_file(plan.bank.bases, str(workdir / "inputs.safetensors"))
        document["timings_s"]["inputs"] = time.monotonic() - plan_started
        try:
            outcome = run_sandboxed(
                harness=HARNESS,
                workdir=workdir,
                device=device,
                settings=settings,
                args=[str(workdir)],
                cache_dir=cache_dir,
                progress=True,
            )
        except SandboxUnavailable as exc:
            raise InfrastructureError(str(exc)) from exc
        document["timings_s"]["child"] = outcome.duration_s
        document["log"] = outcome.log.as_json()
        document["limits"] = outcome.limits
        oracle_started = time.monotonic()
        evidence_calls, finished_steps = _read_evidence(module, plan, workdir)
        error = _child_error(outcome, workdir, settings) or _call_level_error(evidence_calls)
        durations = [e.report["duration_s"] for e in evidence_calls.values() if e.report]
        # Time inside the submission's calls (Triton JIT compilation of each new specialisation
        # included); the rest of the child's time is Python, torch and input start-up.
        document["timings_s"]["calls"] = sum(durations)
        document["timings_s"]["slowest_call"] = max(durations, default=0.0)
        if error is not None:
            error["message"] += _call_context(outcome, plan, error["kind"])
        evidence = module.CheckEvidence(calls=evidence_calls, bank=plan.bank)
        results: list[CheckResult] = []
        for index, check in enumerate(plan.checks):
            if (check.calls and index not in finished_steps) or (not check.calls and error is not None):
                # Never ran (or, for aggregate checks such as triton_kernel, needs the whole
                # run): listed so that the table shows how far the run got; the error says why.
                results.append(CheckResult(check.name, False, "not run: the run ended with the error below", skipped=True))
                continue
            try:
                results.append(check.evaluate(check, evidence))
            except Exception as exc:  # noqa: BLE001 - odd outputs must not crash the parent
                results.append(CheckResult(check.name, False, f"could not evaluate the output: {type(exc).__name__}: {exc}"))
        document["timings_s"]["oracles"] = time.monotonic() - oracle_started
        document["checks"] = [r.as_json() for r in results]
        if error is not None:
            document["error"] = error
            document["verdict"] = "error"
        elif all(r.passed or r.skipped for r in results) and len(results) == len(plan.checks):
            document["verdict"] = "passed"
        else:
            document["verdict"] = "failed"
        if document["verdict"] == "passed" and (benchmark == "on" or (benchmark == "auto" and device == "cuda")):
            bench_started = time.monotonic()
            document["benchmark"] = _run_benchmark(grading_dir, source, cache_dir, module, settings, device)
            document["timings_s"]["benchmark"] = time.monotonic() - bench_started
    finally:
        shutil.rmtree(grading_dir, ignore_errors=True)
    document["duration_s"] = time.monotonic() - started
    return document


def _run_benchmark(grading_dir: Path, source: str, cache_dir: Path, module, settings: GraderSettings, device: str) -> dict:
    """Time the submission on the GPU (grader.benchmark); a dict with an ``error`` on failure.

    The benchmark child gets a fresh work folder with the source as uploaded (nothing the check
    child wrote, not even a rewritten copy of the submission, survives into it) but the same
    per-submission Triton cache, so kernels compiled by the checks are reused.
    """
    if device != "cuda":
        return {"error": "timing needs a CUDA GPU; this run used the CPU interpreter", "headline": None}
    from grader import benchmark

    bench_dir = grading_dir / "benchmark"
    bench_dir.mkdir()
    (bench_dir / module.MODULE_FILE).write_text(source, encoding="utf-8")
    return benchmark.run_benchmark(bench_dir, settings=settings, cache_dir=cache_dir)


def grade_file(path: Path, **options) -> dict:
    """``grade_source`` on a file's bytes (UTF-8; other encodings are a syntax error)."""
    return grade_source(Path(path).read_bytes(), **options)


def exit_code(document: dict) -> int:
    """0 passed, 1 failed, 2 error caused by the submission (see docs/architecture.md)."""
    return {"passed": 0, "failed": 1}.get(document.get("verdict"), 2)


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(grade_file(Path(sys.argv[1])), indent=2))
