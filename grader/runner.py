"""Grade one submission: source validation, the sandboxed child, oracles and verdicts.

``grade_source`` is the whole grading of one file and returns the ``ResultDocument``
(grader/contract.py). The parent (this process) generates every input, computes every oracle
and decides every verdict; the child only runs the submission on inputs it is given and writes
back output tensors, which are read here as plain numbers (grader/evidence.py).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file

from grader.assignments import Assignment, get_assignment
from grader.bwrap import sandbox_label
from grader.child_files import ChildFileRejected, create_marker
from grader.contract import (
    SCHEMA_VERSION,
    BenchmarkResult,
    CapturedLog,
    CheckOutcome,
    CompileCost,
    ErrorKind,
    GradingError,
    ResultDocument,
    Verdict,
)
from grader.evidence import (
    InfrastructureError,
    call_context,
    call_level_error,
    child_error,
    compile_report,
    read_done,
    read_evidence,
)
from grader.harness.protocol import BenchmarkRowSpec
from grader.placement import finish_placement, start_placement
from grader.plan import CallEvidence, CheckEvidence, Plan
from grader.sandbox import ChildOutcome, SandboxUnavailable, run_sandboxed, stage_harness
from grader.settings import GraderSettings, first_call_limit_s
from grader.source_validation import SourceRejected, validate_source
from grader.stages import GradingStage, report_stage, stage_listener
from grader.version import grader_version, package_version
from grader.work_fs import work_folder_full

__all__ = ["InfrastructureError", "grade_file", "grade_source", "resolve_device"]


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a CUDA device is visible, else ``cpu``.

    Raises:
        InfrastructureError: ``cuda`` asked for on a machine without one, or an unknown name.
    """
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InfrastructureError("--device cuda was asked for, but torch sees no CUDA device")
    if device not in ("cpu", "cuda"):
        raise InfrastructureError(f"unknown device {device!r} (use cpu, cuda or auto)")
    return device


def _environment_versions(device: str, settings: GraderSettings) -> dict[str, str | None]:
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "grader": grader_version(),
        "bubblewrap": sandbox_label(settings),
    }
    if device == "cuda":
        versions["cuda"] = torch.version.cuda
    return versions


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"


def _rejected_document(document: ResultDocument, exc: SourceRejected) -> ResultDocument:
    """The result of a file the shared validator refused (the upload API refuses it alike)."""
    problem = exc.problem
    details = dict(problem.details)
    line, column = details.pop("line", None), details.pop("column", None)
    kind = ErrorKind.MISSING_FUNCTION if problem.kind == "missing_function" else ErrorKind.SYNTAX
    return document.model_copy(update={
        "verdict": Verdict.ERROR,
        "error": GradingError(kind=kind, message=problem.message, line=line, column=column, details=details),
    })


#: At most this many notes from one child's done.json reach the result (each capped by the
#: protocol); they are the harness's words, shown to the student, never a verdict.
MAX_CHILD_NOTES = 5


def _evaluate_checks(plan: Plan, evidence: CheckEvidence, finished: set[str], run_error: GradingError | None,
                     *, previous: list[CheckOutcome] | None = None) -> list[CheckOutcome]:
    """Every check's outcome, in plan order; checks whose step never finished are listed as not
    run, skipped checks with their reason. Each check's evaluate sees the outcomes before it
    (``evidence.earlier``). With ``previous``, only the aggregate checks (no calls of their own:
    they read the whole run, e.g. the replayed outputs) are evaluated again; the others keep
    their outcome."""
    outcomes: list[CheckOutcome] = []
    for index, check in enumerate(plan.checks):
        if previous is not None and check.calls:
            outcome = previous[index]
        elif check.skip_reason is not None:
            outcome = CheckOutcome(name=check.name, passed=False, skipped=True, message=check.skip_reason)
        elif (check.calls and check.name not in finished) or (not check.calls and run_error is not None):
            # Never ran (or, for aggregate checks such as triton_kernel, needs the whole run):
            # listed so that the table shows how far the run got; the error says why.
            outcome = CheckOutcome(name=check.name, passed=False, skipped=True,
                                   message="not run: the run ended with the error below")
        else:
            try:
                outcome = check.evaluate(check, evidence)
            except Exception as exc:  # noqa: BLE001 - odd outputs must not crash the parent
                outcome = CheckOutcome(name=check.name, passed=False,
                                       message=f"could not evaluate the output: {type(exc).__name__}: {exc}")
        outcomes.append(outcome)
        evidence.earlier[check.name] = outcome
    return outcomes


#: Errors that end the run at a known call, after which nothing ran: checks that failed before
#: such an error are real failures, so the verdict stays ``failed`` (the error beside them).
#: Not resource_limit: a fork bomb's refused forks make the calls after it fail too.
RUN_ENDING_ERRORS = (ErrorKind.TIMEOUT, ErrorKind.CRASH, ErrorKind.EXITED)


def _verdict(outcomes: list[CheckOutcome], error: GradingError | None, expected_checks: int, *,
             failures_before_error: bool = False) -> Verdict:
    """``failed`` when a check failed, also when the run then ended with an error if
    ``failures_before_error`` (the error is reported beside the failures); else ``error`` when
    the run ended early; else ``passed`` when every check passed or was skipped and at least
    one passed."""
    failed = any(not o.passed and not o.skipped for o in outcomes)
    if failed and (error is None or failures_before_error):
        return Verdict.FAILED
    if error is not None:
        return Verdict.ERROR
    if len(outcomes) == expected_checks and all(o.passed or o.skipped for o in outcomes) and any(o.passed for o in outcomes):
        return Verdict.PASSED
    return Verdict.FAILED


#: Seconds allowed to the replay process for its start-up (Python, torch, the CUDA context) and
#: to each wait's slack, on top of its phases' limits.
REPLAY_STARTUP_S = 60.0


@dataclass
class _Run:
    """One correctness run's results, and what the benchmark needs from it (GPU)."""

    fields: dict
    replay: object = None  # the grader.replay.ReplayOutcome that timed the benchmark rows
    unreplayable: dict[str, str] = field(default_factory=dict)


def _child_notes(workdir: Path) -> list[str]:
    done = read_done(workdir)
    return list(done.notes[:MAX_CHILD_NOTES]) if done is not None else []


#: Host memory one Triton compilation of a large block is budgeted, bytes, to size the
#: compile-only pass's threads: on the H200 four 131,072-element whole-row compilations at once
#: left the child at 1.07 GiB resident (round 7), and the pass's gate counts ptxas besides
#: (check_child.py MemoryGatedExecutor), so a burst that grows later still meets the gate.
COMPILE_MEMORY_BYTES = 1 << 30
#: Share of the child's memory limit under which its compile-only pass starts another
#: compilation (check_child.py MemoryGatedExecutor): the rest is left to the compilations
#: already running, the checks' tensors and torch.
COMPILE_MEMORY_SHARE = 0.5


def precompile_threads(settings: GraderSettings) -> int:
    """Threads for the compile-only pass: ``settings.precompile_threads``, but no more than the
    cores this process may use, nor than the compilations of ``COMPILE_MEMORY_BYTES`` that fit
    in the child's memory limit (at least one; 0 when the setting turns the pass off)."""
    if settings.precompile_threads <= 0:
        return 0
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    by_memory = max(1, settings.memory_limit_bytes // COMPILE_MEMORY_BYTES)
    return max(1, min(settings.precompile_threads, cores, by_memory))


def _run_child(plan: Plan, assignment: Assignment, source: str, *, isolated: bool, device: str,
               settings: GraderSettings, grading_dir: Path, cache_dir: Path, rows: list[dict] | None = None,
               cancel: threading.Event | None = None, prestarted: PrestartedChild | None = None):
    """Write one child's work folder (source, inputs, plan) and run it in the sandbox.

    The main child (``isolated=False``) gets every base of the bank, the benchmark rows it
    records for the replay timer and ``settings.precompile_threads`` for its compile-only pass;
    an isolated child only the bases its steps read. ``cancel``: see ``run_sandboxed``.
    ``prestarted``: the main child started ahead (in ``grading_dir``), which takes this run when
    it still waits; its outcome's clock starts when it is handed the plan.

    Returns:
        (workdir, ChildOutcome).

    Raises:
        InfrastructureError: the sandbox could not run.
    """
    manifest = assignment.manifest
    if prestarted is not None and not prestarted.waiting():
        prestarted = None  # it ended before its job: a child is started for this run as usual
    workdir = grading_dir / ("isolated" if isolated else "check")
    if prestarted is None and workdir.exists():  # the folder of a child started ahead that ended
        shutil.rmtree(workdir)
    workdir.mkdir(exist_ok=prestarted is not None)
    (workdir / manifest.module_file).write_text(source, encoding="utf-8")
    other_device = "cpu" if device == "cuda" else "meta"
    protocol_plan = plan.to_protocol(function=manifest.function, module_file=manifest.module_file,
                                     other_device=other_device, isolated=isolated)
    if not isolated:
        protocol_plan.benchmark_rows = [
            BenchmarkRowSpec(**{k: row[k] for k in ("id", "shape", "dtype", "seed", "warmup_seed")}) for row in rows or []]
        protocol_plan.precompile_threads = precompile_threads(settings)
        protocol_plan.compile_memory_bytes = int(settings.memory_limit_bytes * COMPILE_MEMORY_SHARE)
        bases = plan.bank.bases
    else:
        names = {getattr(arg, "base", None) or getattr(arg, "pattern", None)
                 for step in plan.steps(isolated=True) for call in step.calls
                 for arg in [*call.args, *call.kwargs.values()]}
        bases = {name: plan.bank.bases[name] for name in sorted(n for n in names if n)}
    save_file(bases, str(workdir / "inputs.safetensors"))
    extra_files = {"assignment_bench.py": assignment.benchmark.bench_file}
    harness_dir = grading_dir / ("harness-isolated" if isolated else "harness")
    if prestarted is not None:  # its harness scripts run already: add the assignment's files
        for name, path in extra_files.items():
            shutil.copyfile(path, harness_dir / name)
    else:
        stage_harness(harness_dir, extra_files)
    # Renamed into place last: a child started ahead begins when it sees the plan.
    plan_file = workdir / "plan.json.tmp"
    plan_file.write_text(protocol_plan.model_dump_json())
    if prestarted is not None:
        outcome = prestarted.run(plan_file)
        if outcome is not None:
            return workdir, outcome
        # It ended before running anything of the submission: a child of its own, from a new folder.
        return _run_child(plan, assignment, source, isolated=isolated, device=device, settings=settings,
                          grading_dir=grading_dir, cache_dir=cache_dir, rows=rows, cancel=cancel)
    os.replace(plan_file, workdir / "plan.json")
    try:
        outcome = run_sandboxed(harness=harness_dir / "check_child.py", workdir=workdir, device=device,
                                settings=settings, args=[str(workdir)], cache_dir=cache_dir, progress=True,
                                reports_stages=not isolated,
                                compile_budget_s=settings.compile_budget_s, cancel=cancel,
                                first_call_limit_s=None if isolated else first_call_limit_s(settings, device))
    except SandboxUnavailable as exc:
        raise InfrastructureError(str(exc)) from exc
    return workdir, outcome


class PrestartedChild:
    """The main check child of the next grading, started before its job arrives (the warm
    grader, ``grader check --job-on-stdin``): it loads Python, torch, Triton and safetensors
    (about 1-1.5 s of a grading's path; nothing touches the GPU) in its sandbox, then waits for
    ``plan.json`` (grader/harness/check_child.py ``wait_for_plan``). ``grade_source`` hands it
    its run: the grading's folder is this object's, and the child's limits count from the
    hand-over (its wait is left out of the wall clock, as the replay process's waits are).

    Raises (constructor):
        OSError: its folder could not be made.
    """

    def __init__(self, *, device: str, settings: GraderSettings) -> None:
        self.device, self.settings = device, settings
        self.grading_dir = Path(tempfile.mkdtemp(prefix="grading-", dir=settings.work_root or None))  # mode 0700
        self.cache_dir = self.grading_dir / "triton-cache"
        self.workdir = self.grading_dir / "check"
        self._started = time.monotonic()
        self._handed: float | None = None
        self._cancel = threading.Event()
        self._outcome: ChildOutcome | None = None
        self._failure: BaseException | None = None
        try:
            self.cache_dir.mkdir()
            self.workdir.mkdir()
            harness = stage_harness(self.grading_dir / "harness")
        except BaseException:
            shutil.rmtree(self.grading_dir, ignore_errors=True)
            raise
        self._thread = threading.Thread(target=self._run, args=(harness,), name="prestarted-child", daemon=True)
        self._thread.start()

    def _run(self, harness: Path) -> None:
        try:
            self._outcome = run_sandboxed(
                harness=harness / "check_child.py", workdir=self.workdir, device=self.device, settings=self.settings,
                args=[str(self.workdir), "--started-ahead"], cache_dir=self.cache_dir, progress=True,
                reports_stages=True,
                compile_budget_s=self.settings.compile_budget_s, cancel=self._cancel,
                idle_s=lambda now: (self._handed or now) - self._started,
                first_call_limit_s=first_call_limit_s(self.settings, self.device))
        except BaseException as exc:  # noqa: BLE001 - the run falls back to a child of its own
            self._failure = exc

    def waiting(self) -> bool:
        """The child still waits for its plan (it has not ended, and was not handed one)."""
        return self._handed is None and self._thread.is_alive()

    def run(self, plan_file: Path) -> ChildOutcome | None:
        """Hand the child its plan (``plan_file``, written whole, is renamed to ``plan.json``;
        the source, the inputs and the assignment's harness files are in place) and wait for it.
        The outcome's ``started`` and ``duration_s`` count from the hand-over.

        Returns:
            The outcome, or None when the child ended before the submission's import (it died
            in its wait just before the hand-over, or its sandbox failed): nothing of the
            submission ran, and the caller runs a child of its own.
        """
        self._handed = time.monotonic()
        os.replace(plan_file, self.workdir / "plan.json")
        self._thread.join()
        outcome = self._outcome
        if self._failure is not None or outcome is None or outcome.progress is None or not outcome.progress.started:
            return None
        waited = self._handed - outcome.started
        return dataclasses.replace(outcome, started=self._handed, duration_s=max(0.0, outcome.duration_s - waited),
                                   compile_excluded_s=max(0.0, outcome.compile_excluded_s - waited))

    def close(self) -> None:
        """End the child if it still waits (or runs) and remove the grading folder."""
        if self.workdir.is_dir():
            create_marker(self.workdir, "quit")
        self._cancel.set()
        self._thread.join(timeout=60)
        shutil.rmtree(self.grading_dir, ignore_errors=True)


class _IsolatedChild:
    """The child of the checks that need a process of their own (large_offsets: 4.3 GB tensors,
    and an int32 overflow that usually kills the CUDA context), run in a thread beside the main
    child: a crash there cannot touch the main child's evidence, and the grading waits for the
    longer of the two instead of their sum. ``result()`` waits for it; ``cancel()`` kills it
    when the main child ended with an error (its checks are then reported as not run)."""

    def __init__(self, plan: Plan, assignment: Assignment, source: str, *, device: str, settings: GraderSettings,
                 grading_dir: Path, cache_dir: Path) -> None:
        self._cancel = threading.Event()
        self._arguments = dict(isolated=True, device=device, settings=settings, grading_dir=grading_dir,
                               cache_dir=cache_dir)
        self._plan, self._assignment, self._source = plan, assignment, source
        self._result: tuple | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="isolated-child", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = _run_child(self._plan, self._assignment, self._source, cancel=self._cancel,
                                      **self._arguments)
        except BaseException as exc:  # noqa: BLE001 - raised again in result()
            self._error = exc

    def result(self) -> tuple[Path, ChildOutcome]:
        """(workdir, ChildOutcome) once the child ended.

        Raises:
            InfrastructureError: the sandbox could not run.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result

    def cancel(self) -> None:
        """Kill the child (if still running) and wait for it."""
        self._cancel.set()
        self._thread.join()


def _child_phases(outcome: ChildOutcome) -> dict[str, float]:
    """Seconds of the main child's phases, by the parent's clock from its progress lines:
    ``child_startup`` (Python, torch, inputs: until the import of the submission), ``child_import``,
    ``child_precompile`` (the compile-only pass), ``child_checks`` (the check calls) and
    ``child_rows`` (recording the benchmark rows, writing the recording). Diagnostics only."""
    marks = dict(outcome.progress.marks) if outcome.progress is not None else {}
    if not marks or outcome.started is None:
        return {}
    order = [("child_startup", None, "import"), ("child_import", "import", "precompile"),
             ("child_precompile", "precompile", "call"), ("child_checks", "call", "benchmark"),
             ("child_rows", "benchmark", "done")]
    phases = {}
    for name, begin, end in order:
        begin_at = outcome.started if begin is None else marks.get(begin)
        end_at = marks.get(end)
        if name == "child_import" and end_at is None:
            end_at = marks.get("call")
        if name == "child_checks" and end_at is None:
            end_at = marks.get("done")
        if begin_at is not None and end_at is not None:
            phases[name] = end_at - begin_at
    return phases


def _first_input(plan: Plan) -> str | None:
    """The main child's first call's input in words for a message: ``a 1x2 input`` when its
    tensor arguments share one shape (softmax's y and g), else each shape (``inputs 1x2, 2x3
    and 3``: a GEMM's A, B, bias), or None when the plan has no such call."""
    steps = plan.steps(isolated=False)
    call = steps[0].calls[0] if steps and steps[0].calls else None
    shapes = ["x".join(str(n) for n in arg.size) or "scalar" for arg in (call.args if call is not None else [])
              if getattr(arg, "kind", "") == "tensor"]
    if not shapes:
        return None
    if len(set(shapes)) == 1:
        return f"a {shapes[0]} input"
    return f"inputs {', '.join(shapes[:-1])} and {shapes[-1]}"


def _run_isolated(plan: Plan, assignment: Assignment, source: str, evidence: CheckEvidence, finished: set[str], *,
                  device: str, settings: GraderSettings, grading_dir: Path, cache_dir: Path,
                  timings: dict[str, float], started: _IsolatedChild | None = None) -> list[str]:
    """Add the evidence of the checks that need a process of their own, from ``started`` (the
    child run beside the main one), or from a child run now. A crash or timeout in that process
    is the evidence of those checks (their calls are marked as stopped, with the reason).

    When the child run beside the main one ended before the submission's import (it could not
    build its inputs, or create its CUDA context: the main child's memory may have been in the
    way, and a submission must not be able to crowd that check out), it runs again now, alone
    (the main child has ended, the replay process has not been sent its work yet), and only
    that run's answer stands.

    Returns:
        Notes for the result (from that child's done.json).

    Raises:
        InfrastructureError: the sandbox could not run, or its harness failed before it
            finished building the inputs for another reason than a device allocation.
    """
    steps = plan.steps(isolated=True)
    if not steps:
        return []
    arguments = dict(isolated=True, device=device, settings=settings, grading_dir=grading_dir, cache_dir=cache_dir)
    if started is not None:
        workdir, outcome = started.result()
        if _never_started(outcome):  # e.g. crowded out of the device by the main child's memory
            timings["isolated_child_beside_main"] = outcome.duration_s
            shutil.rmtree(workdir, ignore_errors=True)
            workdir, outcome = _run_child(plan, assignment, source, **arguments)
    else:
        workdir, outcome = _run_child(plan, assignment, source, **arguments)
    timings["isolated_child"] = outcome.duration_s
    timings["isolated_compile"] = outcome.compile_s
    done = read_done(workdir)
    if done is not None and done.phase == "inputs" and _never_started(outcome):
        # The harness could not build the inputs on the device, before any submission code ran.
        reason = done.exception.message if done.exception else "unknown"
        for step in steps:
            step.skip_reason = f"not run: the inputs did not fit on the device ({reason[:300]})"
        return []
    calls, isolated_finished = read_evidence(steps, workdir)
    evidence.calls.update(calls)
    finished |= isolated_finished
    error = (work_folder_full(grading_dir, settings) or child_error(outcome, workdir, settings, device=device)
             or call_level_error(calls))
    if error is not None:
        stopped = f"the process ended: {error.kind.value}: {error.message}"
        for step in steps:
            finished.add(step.name)
            for call in step.calls:
                for round_id in call.round_ids:
                    evidence.calls.setdefault(round_id, CallEvidence(report=None, out=None))
                    evidence.stopped.setdefault(round_id, stopped)
    return _child_notes(workdir)


def _never_started(outcome: ChildOutcome) -> bool:
    """The child ended before the harness announced the import of the submission (no
    submission code ran in it): e.g. it could not create its CUDA context or build its inputs."""
    return outcome.progress is None or not outcome.progress.started


def _precompile_faulted(workdir: Path, outcome: ChildOutcome) -> bool:
    """The main child stopped after its compile-only pass, before any check call, saying the
    pass left the CUDA context unusable (done.json phase ``precompile``)."""
    done = read_done(workdir)
    return (done is not None and done.phase == "precompile" and outcome.progress is not None
            and outcome.progress.calls_started == 0)


def _run_checks(assignment: Assignment, source: str, *, device: str, seed: int, settings: GraderSettings,
                grading_dir: Path, cache_dir: Path, timings: dict[str, float], rows: list[dict],
                benchmark_options, prestarted: PrestartedChild | None = None) -> _Run:
    """Build the plan, run the child (``prestarted``'s when given; and, when it finished, the
    isolated checks' child), read their evidence, replay the recorded launches (on a GPU, in the
    trusted replay process, which also times ``rows`` when every other check passed) and
    evaluate every check.

    Raises:
        InfrastructureError: the sandbox could not run, or the harness never started.
    """
    started = time.monotonic()
    plan = assignment.build_plan(seed=seed, device=device)
    timings["inputs"] = time.monotonic() - started
    replay_process = None
    if device == "cuda":
        from grader.replay import ReplayProcess

        # Started now, so that its start-up (torch, the CUDA context) overlaps the child's, and
        # phase 1 the isolated child's and the oracles'. Its limit counts its own work (start-up,
        # phase 1, phase 2) and leaves out its waits for the two children, up to their limits.
        work_s = REPLAY_STARTUP_S + settings.child_timeout_s + (benchmark_options.student_timeout_s if rows else 0.0)
        waits_s = 2 * (settings.child_timeout_s + settings.compile_budget_s) + REPLAY_STARTUP_S
        replay_process = ReplayProcess(assignment, settings, timeout_s=work_s, max_idle_s=waits_s).start()
    try:
        return _checks_with_replay(plan, assignment, source, replay_process, device=device, settings=settings,
                                   grading_dir=grading_dir, cache_dir=cache_dir, timings=timings, rows=rows,
                                   benchmark_options=benchmark_options, prestarted=prestarted)
    finally:
        if replay_process is not None:
            replay_process.close()


def _checks_with_replay(plan: Plan, assignment: Assignment, source: str, replay_process, *, device: str,
                        settings: GraderSettings, grading_dir: Path, cache_dir: Path, timings: dict[str, float],
                        rows: list[dict], benchmark_options, prestarted: PrestartedChild | None = None) -> _Run:
    """``_run_checks`` after the plan is built and the replay process (GPU) started."""
    isolated = (_IsolatedChild(plan, assignment, source, device=device, settings=settings, grading_dir=grading_dir,
                               cache_dir=cache_dir) if plan.steps(isolated=True) else None)
    try:
        return _checks_beside_isolated(plan, assignment, source, replay_process, isolated, device=device,
                                       settings=settings, grading_dir=grading_dir, cache_dir=cache_dir,
                                       timings=timings, rows=rows, benchmark_options=benchmark_options,
                                       prestarted=prestarted)
    finally:
        if isolated is not None:
            # A no-op once its evidence was read; after a main-child error its checks are listed
            # as not run, and it is killed here.
            isolated.cancel()


def _checks_beside_isolated(plan: Plan, assignment: Assignment, source: str, replay_process,
                            isolated: _IsolatedChild | None, *, device: str, settings: GraderSettings,
                            grading_dir: Path, cache_dir: Path, timings: dict[str, float], rows: list[dict],
                            benchmark_options, prestarted: PrestartedChild | None = None) -> _Run:
    """``_checks_with_replay`` once the isolated child (if the plan has one) runs beside."""
    workdir, outcome = _run_child(plan, assignment, source, isolated=False, device=device, settings=settings,
                                  grading_dir=grading_dir, cache_dir=cache_dir, rows=rows, prestarted=prestarted)
    pass_notes: list[str] = []
    if _precompile_faulted(workdir, outcome):
        # The compile-only pass (calls whose kernels are not launched) faulted the CUDA context
        # before any check call: run the checks again without it; only that run is evidence.
        timings["child_with_faulted_precompile"] = outcome.duration_s
        shutil.rmtree(workdir, ignore_errors=True)
        workdir, outcome = _run_child(plan, assignment, source, isolated=False, device=device,
                                      settings=settings.model_copy(update={"precompile_threads": 0}),
                                      grading_dir=grading_dir, cache_dir=cache_dir, rows=rows)
        pass_notes.append("The checks ran twice: the first run's compile-only pass (each call made once with its "
                          "Triton kernels compiled, not launched) left the GPU unusable, so the run was repeated "
                          "without that pass. Nothing of the first run counts.")
    timings["child"] = outcome.duration_s
    timings["compile"] = outcome.compile_s
    if outcome.cpu_s is not None:  # CPU runs: the seconds the limit counts (sandbox.CpuClock)
        timings["child_cpu"] = outcome.cpu_s
    timings.update(_child_phases(outcome))
    evidence_calls, finished = read_evidence(plan.steps(isolated=False), workdir)
    # A child that filled its grading's tmpfs ended for that, whatever it did next.
    process_error = work_folder_full(grading_dir, settings) or child_error(
        outcome, workdir, settings, device=device, first_input=_first_input(plan))
    error = process_error or call_level_error(evidence_calls)
    # The run ended at a call (not at the import, and not a limit that broke the calls after it):
    # checks that failed before are failures of the submission, whatever happened next.
    failures_before_error = (process_error is not None and process_error.kind in RUN_ENDING_ERRORS
                             and outcome.progress is not None and outcome.progress.calls_started > 0)
    durations = [e.report.duration_s for e in evidence_calls.values() if e.report]
    # Time inside the submission's calls (Triton JIT compilation of each new specialisation
    # included); the rest of the child's time is Python, torch and input start-up.
    timings["calls"] = sum(durations)
    timings["slowest_call"] = max(durations, default=0.0)
    if error is not None:
        error = error.model_copy(update={"message": error.message + call_context(outcome, plan, error.kind,
                                                                                 assignment.crash_hint)})
    notes = pass_notes + _child_notes(workdir)
    evidence = CheckEvidence(calls=evidence_calls, bank=plan.bank)
    run = _Run(fields={})
    if error is None:
        # Before the replay's phase 1: a rerun of a crowded-out isolated child must find the
        # device as free as it can be (the replay process allocates the recorded buffers).
        notes += _run_isolated(plan, assignment, source, evidence, finished, device=device, settings=settings,
                               grading_dir=grading_dir, cache_dir=cache_dir, timings=timings, started=isolated)
    sent = None
    if replay_process is not None and error is None:
        sent = _send_recording(plan, workdir, evidence_calls, replay_process, run, rows=rows)
    replay_started = time.monotonic()
    timing = _start_timing(assignment, sent, replay_process, rows=rows, benchmark_options=benchmark_options)
    oracle_started = time.monotonic()
    outcomes = _evaluate_checks(plan, evidence, finished, error)
    timings["oracles"] = time.monotonic() - oracle_started
    if sent is not None:
        others_passed = all(o.passed or o.skipped for o, check in zip(outcomes, plan.checks) if check.calls)
        _finish_replay(sent, timing, evidence_calls, replay_process, run, others_passed=others_passed)
        timings["replay"] = time.monotonic() - replay_started
        outcomes = _evaluate_checks(plan, evidence, finished, error, previous=outcomes)
    run.fields = {
        "verdict": _verdict(outcomes, error, len(plan.checks), failures_before_error=failures_before_error),
        "error": error,
        "checks": outcomes,
        "log": CapturedLog(**outcome.log.as_json()),
        "limits": _limits_with_compilation(outcome.limits, settings, device),
        "notes": list(dict.fromkeys(notes)),
        "compilations": [CompileCost.model_validate(entry) for entry in compile_report(outcome)[:32]],
    }
    return run


def _limits_with_compilation(limits: dict, settings: GraderSettings, device: str) -> dict:
    """The child's limits, and on a GPU the compile-only pass's threads and memory gate."""
    if device != "cuda":
        return limits
    return {**limits, "precompile_threads": precompile_threads(settings),
            "compile_memory_bytes": int(settings.memory_limit_bytes * COMPILE_MEMORY_SHARE)}


def _send_recording(plan: Plan, workdir: Path, evidence_calls: dict, replay_process, run: _Run, *,
                    rows: list[dict]):
    """Validate the child's recording and send the replay process phase 1: every recorded check
    call once (its output goes into the evidence when ``_finish_replay`` injects it).

    Returns:
        (recording, check calls) when the process was sent work, else None (nothing recorded,
        or the recording was rejected: the calls' replay errors and ``run.unreplayable`` say so).
    """
    from grader.replay import RecordingRejected, calls_to_replay, load_recording, replay_inputs

    recorded = calls_to_replay(plan, evidence_calls)
    if not recorded and not rows:
        return None
    try:
        recording = load_recording(workdir / "recording")
    except RecordingRejected as exc:
        for call_id in recorded:
            evidence_calls[call_id].replay_error = str(exc)
        run.unreplayable = {row["id"]: str(exc) for row in rows}
        return None
    by_id = {call.call_id: call for call in recording.calls}
    check_calls = [by_id[call_id] for call_id in recorded if call_id in by_id]
    for call_id in recorded:
        if call_id not in by_id:
            evidence_calls[call_id].replay_error = "the recording holds no launches of this call"
    replay_process.send_checks(recording, folder=workdir / "recording", check_calls=check_calls,
                               check_inputs=replay_inputs(plan, {c.call_id: c for c in check_calls}))
    return recording, check_calls


def _start_timing(assignment: Assignment, sent, replay_process, *, rows: list[dict], benchmark_options):
    """Send the replay process phase 2 (the benchmark rows) right after phase 1, before the
    checks are evaluated: the parent's oracles (0.6-1.0 s on the H200's host) then overlap the
    timing instead of preceding it. The GPU is the replay process's alone by then (both check
    children have ended; the parent's oracles run on the CPU). ``_finish_replay`` stops it when a
    check failed.

    Returns:
        (benchmark part sent or None, {row id: why it cannot be replayed}).
    """
    from grader.benchmark import replay_phase

    if sent is None or not rows:
        return None, {}
    recording, _ = sent
    benchmark_part, unreplayable = replay_phase(assignment, rows, recording, benchmark_options)
    if benchmark_part is not None:
        replay_process.send_benchmark(benchmark_part)
    return benchmark_part, unreplayable


def _finish_replay(sent, timing, evidence_calls: dict, replay_process, run: _Run, *, others_passed: bool) -> None:
    """End phase 2 (stop it when a check with calls failed: those rows' times would not count;
    or send the process its end when no rows were sent), wait for the process, and put the
    replayed check outputs into the evidence. ``run.replay`` holds the timed rows only when
    every other check passed."""
    from grader.replay import inject

    _, check_calls = sent
    benchmark_part, unreplayable = timing
    if benchmark_part is None:
        replay_process.send_benchmark(None)
    elif not others_passed:
        replay_process.stop_benchmark()
    else:
        report_stage(GradingStage.BENCHMARK)  # the timing now decides when the grading ends
    replay = replay_process.wait()
    inject(evidence_calls, replay, [call.call_id for call in check_calls])
    run.replay = replay if benchmark_part is not None and others_passed else None
    run.unreplayable = unreplayable if others_passed else {}


def grade_source(
    source: str | bytes,
    *,
    assignment: str,
    device: str = "auto",
    seed: int = 0,
    settings: GraderSettings | None = None,
    benchmark: str = "off",
    benchmark_options=None,
    peers: dict | None = None,
    prestarted: PrestartedChild | None = None,
    on_stage: Callable[[GradingStage], None] | None = None,
) -> ResultDocument:
    """Grade one submission's source text and return the result document.

    Args:
        source: the student's file, as text or as its bytes (which must be UTF-8).
        assignment: a name from the manifest (grader/manifest.py).
        device: ``cpu`` (Triton interpreter), ``cuda`` or ``auto``.
        seed: input seed; the result records it so that staff can reproduce the run.
        settings: sandbox and limits (default: read from GRADER_* environment variables).
        benchmark: ``off``, ``on`` or ``auto`` (``on`` and ``auto`` time the kernel on CUDA when
            every check passed; ``on`` on the CPU reports that no timing was possible).
        benchmark_options: grader.benchmark.BenchmarkOptions (default options when None).
        peers: a peers timing result to reuse (tests, scripts), else the cached one.
        prestarted: the main check child started ahead of this job (the warm grader's); it
            runs the checks when it still waits and was started for this device, and is closed
            here in any case.
        on_stage: called with each stage the grading enters (grader/stages.py: preparing,
            compiling, checks, benchmark; forward only, each at most once), from a grader
            thread; a label for the student, never part of the result.

    Returns:
        The ResultDocument, verdict ``passed``, ``failed`` or ``error``.

    Raises:
        UnknownAssignment: ``assignment`` is not in the manifest.
        InfrastructureError: the sandbox could not run, the device is unusable, or the grader
            itself failed; no verdict is possible.
    """
    try:
        with stage_listener(on_stage):
            report_stage(GradingStage.PREPARING)
            return _grade_source(source, assignment=assignment, device=device, seed=seed, settings=settings,
                                 benchmark=benchmark, benchmark_options=benchmark_options, peers=peers,
                                 prestarted=prestarted)
    finally:
        if prestarted is not None:
            prestarted.close()


def _grade_source(source: str | bytes, *, assignment: str, device: str, seed: int, settings: GraderSettings | None,
                  benchmark: str, benchmark_options, peers: dict | None,
                  prestarted: PrestartedChild | None) -> ResultDocument:
    """``grade_source`` (which closes ``prestarted`` afterwards)."""
    settings = settings or GraderSettings()
    started = time.monotonic()
    spec = get_assignment(assignment)
    device = resolve_device(device)
    timings: dict[str, float] = {}
    document = ResultDocument(
        schema=SCHEMA_VERSION, assignment=assignment, verdict=Verdict.ERROR,
        error=GradingError(kind=ErrorKind.INFRASTRUCTURE, message="not graded yet"),
        device=_device_name(device), versions=_environment_versions(device, settings), seed=seed,
        sandbox=sandbox_label(settings), placement=start_placement(device, fallback_name=_device_name(device)),
    )
    try:
        source = validate_source(source, spec.manifest)
    except SourceRejected as exc:
        return _rejected_document(document, exc).model_copy(update={"duration_s": time.monotonic() - started})

    timed = benchmark in ("on", "auto") and device == "cuda"
    options = None
    rows: list[dict] = []
    if timed:
        from grader.benchmark import BenchmarkOptions, plan_rows

        options = benchmark_options or BenchmarkOptions()
        rows = plan_rows(spec, options)
    if prestarted is not None and (prestarted.device != device or not prestarted.waiting()):
        prestarted.close()  # started for another device, or ended while it waited: not used
        prestarted = None
    if prestarted is not None:
        grading_dir = prestarted.grading_dir
    else:
        grading_dir = Path(tempfile.mkdtemp(prefix="grading-", dir=settings.work_root or None))  # mode 0700
    cache_dir = grading_dir / "triton-cache"  # this submission's own Triton cache
    try:
        cache_dir.mkdir(exist_ok=prestarted is not None)
        try:
            run = _run_checks(spec, source, device=device, seed=seed, settings=settings, grading_dir=grading_dir,
                              cache_dir=cache_dir, timings=timings, rows=rows, benchmark_options=options,
                              prestarted=prestarted)
        except ChildFileRejected as exc:
            # A file read back was replaced (a link, FIFO, device, folder, or over its cap): the
            # submission's error; nothing of the run is evidence.
            run = _Run(fields={"verdict": Verdict.ERROR, "error": exc.grading_error()})
        except OSError as exc:
            full = work_folder_full(grading_dir, settings, exc)
            if full is None:
                raise
            run = _Run(fields={"verdict": Verdict.ERROR, "error": full})
        document = document.model_copy(update=run.fields)
        if document.verdict is Verdict.PASSED and benchmark == "on" and not timed:
            document = document.model_copy(update={"benchmark": BenchmarkResult(
                error="timing needs a CUDA GPU; this run used the CPU interpreter")})
        elif document.verdict is Verdict.PASSED and timed:
            from grader.benchmark import finish

            bench_started = time.monotonic()
            result = finish(spec, rows=rows, replay=run.replay, unreplayable=run.unreplayable, options=options,
                            settings=settings, peers=peers)
            document = document.model_copy(update={"benchmark": BenchmarkResult.model_validate(result)})
            timings["benchmark"] = time.monotonic() - bench_started + timings.get("replay", 0.0)
    finally:
        shutil.rmtree(grading_dir, ignore_errors=True)
    placement = finish_placement(document.placement) if document.placement is not None else None
    return ResultDocument.model_validate(
        {**document.model_dump(by_alias=True), "timings_s": timings, "duration_s": time.monotonic() - started,
         "placement": placement.model_dump() if placement is not None else None})


def grade_file(path: Path, **options) -> ResultDocument:
    """``grade_source`` on a file's bytes (UTF-8; other encodings are a syntax error)."""
    return grade_source(Path(path).read_bytes(), **options)
