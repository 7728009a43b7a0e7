"""The sandboxed children of one grading and their lifecycles: the main check child (started
ahead of its job or for it), the isolated child that reruns chosen calls alone, and the
compile-only pass's threads and memory gate they are given.

``run_child`` writes a child's work folder (source, inputs, plan) and runs it in the sandbox
(grader/sandbox/run.py); ``PrestartedChild`` starts the main child before the plan is ready;
``run_isolated`` runs the isolated child's steps and folds its evidence in. grader/runner.py
sequences them; the verdicts are grader/checks/verdicts.py's.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from grader.assignments import Assignment
from grader.checks.plan import CallEvidence, CheckEvidence, Plan
from grader.evidence.child_files import REPORT, ChildFileRejected, ChildFolder, create_marker
from grader.evidence.reader import (
    InfrastructureError,
    call_level_error,
    child_error,
    read_done,
    read_evidence,
)
from grader.harness.protocol import BenchmarkRowSpec, TensorSpec
from grader.sandbox.run import ChildOutcome, SandboxUnavailable, run_sandboxed, stage_harness
from grader.sandbox.work_fs import work_folder_full
from grader.settings import GraderSettings, first_call_limit_s

#: At most this many notes from one child's done.json reach the result (each capped by the
#: protocol); they are the harness's words, shown to the student, never a verdict.
MAX_CHILD_NOTES = 5


def child_notes(workdir: Path) -> list[str]:
    done = read_done(workdir)
    return list(done.notes[:MAX_CHILD_NOTES]) if done is not None else []


#: Host memory one Triton compilation of a large block is budgeted, bytes, to size the
#: compile-only pass's threads: on the H200 four 131,072-element whole-row compilations at once
#: left the child at 1.07 GiB resident (round 7), and the pass's gate counts ptxas besides
#: (harness/compilation.py MemoryGatedExecutor), so a burst that grows later still meets the gate.
COMPILE_MEMORY_BYTES = 1 << 30
#: Share of the child's memory limit under which its compile-only pass starts another
#: compilation (harness/compilation.py MemoryGatedExecutor): the rest is left to the compilations
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


def run_child(plan: Plan, assignment: Assignment, source: str, *, isolated: bool, device: str,
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
        return run_child(plan, assignment, source, isolated=isolated, device=device, settings=settings,
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

    @property
    def cancel_event(self) -> threading.Event:
        """Set to stop the child (the fail-fast watch sets it when this child runs the checks)."""
        return self._cancel

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
        if (self._failure is not None or outcome is None or outcome.started is None or outcome.progress is None
                or not outcome.progress.started):
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


class IsolatedChild:
    """The child of the checks that need a process of their own (large_offsets: 4.3 GB tensors,
    and an int32 overflow that usually kills the CUDA context), run in a thread beside the main
    child: a crash there cannot touch the main child's evidence, and the grading waits for the
    longer of the two instead of their sum. ``result()`` waits for it; ``cancel()`` kills it
    when the main child ended with an error (its checks are then reported as not run)."""

    def __init__(self, plan: Plan, assignment: Assignment, source: str, *, device: str, settings: GraderSettings,
                 grading_dir: Path, cache_dir: Path) -> None:
        self._cancel = threading.Event()
        self._arguments: dict[str, Any] = dict(isolated=True, device=device, settings=settings,
                                               grading_dir=grading_dir, cache_dir=cache_dir)
        self._plan, self._assignment, self._source = plan, assignment, source
        self._result: tuple[Path, ChildOutcome] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="isolated-child", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = run_child(self._plan, self._assignment, self._source, cancel=self._cancel,
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
        if self._result is None:
            raise RuntimeError("the isolated child's thread left no outcome")
        return self._result

    def cancel(self) -> None:
        """Kill the child (if still running) and wait for it."""
        self._cancel.set()
        self._thread.join()


def child_phases(outcome: ChildOutcome) -> dict[str, float]:
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


def first_input_of(plan: Plan) -> str | None:
    """The main child's first call's input in words for a message: ``a 1x2 input`` when its
    tensor arguments share one shape (softmax's y and g), else each shape (``inputs 1x2, 2x3
    and 3``: a GEMM's A, B, bias), or None when the plan has no such call."""
    steps = plan.steps(isolated=False)
    call = steps[0].calls[0] if steps and steps[0].calls else None
    shapes = ["x".join(str(n) for n in arg.size) or "scalar" for arg in (call.args if call is not None else [])
              if isinstance(arg, TensorSpec)]
    if not shapes:
        return None
    if len(set(shapes)) == 1:
        return f"a {shapes[0]} input"
    return f"inputs {', '.join(shapes[:-1])} and {shapes[-1]}"


def run_isolated(plan: Plan, assignment: Assignment, source: str, evidence: CheckEvidence, finished: set[str], *,
                  device: str, settings: GraderSettings, grading_dir: Path, cache_dir: Path,
                  timings: dict[str, float], started: IsolatedChild | None = None) -> list[str]:
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
    arguments: dict[str, Any] = dict(isolated=True, device=device, settings=settings, grading_dir=grading_dir,
                                     cache_dir=cache_dir)
    if started is not None:
        workdir, outcome = started.result()
        if never_started(outcome):  # e.g. crowded out of the device by the main child's memory
            timings["isolated_child_beside_main"] = outcome.duration_s
            shutil.rmtree(workdir, ignore_errors=True)
            workdir, outcome = run_child(plan, assignment, source, **arguments)
    else:
        workdir, outcome = run_child(plan, assignment, source, **arguments)
    timings["isolated_child"] = outcome.duration_s
    timings["isolated_compile"] = outcome.compile_s
    done = read_done(workdir)
    if done is not None and done.phase == "inputs" and never_started(outcome):
        # The harness could not build the inputs on the device, before any submission code ran.
        reason = done.exception.message if done.exception else "unknown"
        for step in steps:
            step.skip_reason = f"not run: the inputs did not fit on the device ({reason[:300]})"
        return []
    calls, isolated_finished = read_evidence(steps, workdir, plan.bank)
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
    return child_notes(workdir)


def never_started(outcome: ChildOutcome) -> bool:
    """The child ended before the harness announced the import of the submission (no
    submission code ran in it): e.g. it could not create its CUDA context or build its inputs."""
    return outcome.progress is None or not outcome.progress.started


def precompile_faulted(workdir: Path, outcome: ChildOutcome) -> bool:
    """The main child stopped after its compile-only pass, before any check call, saying the
    pass left the CUDA context unusable (done.json phase ``precompile``)."""
    done = read_done(workdir)
    return (done is not None and done.phase == "precompile" and outcome.progress is not None
            and outcome.progress.calls_started == 0)



def limits_with_compilation(limits: dict, settings: GraderSettings, device: str) -> dict:
    """The child's limits, and on a GPU the compile-only pass's threads and memory gate."""
    if device != "cuda":
        return limits
    return {**limits, "precompile_threads": precompile_threads(settings),
            "compile_memory_bytes": int(settings.memory_limit_bytes * COMPILE_MEMORY_SHARE)}



class FailFastWatch:
    """Reads the main child's finished steps while it runs and, once a check with calls has
    failed, stops the child ``budget_s`` wall seconds later (``settings.fail_fast_s``): a wrong
    kernel's verdict comes in seconds, not at the CPU limit (issue #38). Nothing here decides a
    verdict: the parent evaluates every check again from the evidence once the child has ended
    (``evaluate_checks``); this only chooses when to stop waiting.

    A step counts once its ``step_<i>.json`` parses (the child writes it after its tensors), so
    a report read half-written is read again later, not taken for a failure.

    Attributes:
        failed: the first check seen failing, or None.
        stopped: the watch set ``events`` (the child was told to stop).
    """

    POLL_S = 0.25

    def __init__(self, plan: Plan, workdir: Path, budget_s: float, events: list[threading.Event]) -> None:
        self.plan, self.workdir, self.budget_s, self.events = plan, workdir, budget_s, events
        self.steps = plan.steps(isolated=False)
        self.failed: str | None = None
        self.failed_at: float | None = None
        self.stopped = False
        self._done = threading.Event()
        self._earlier: dict = {}
        self._thread = threading.Thread(target=self._run, name="fail-fast", daemon=True)
        self._thread.start()

    def _finished_steps(self) -> int:
        """How many steps from the first have a complete report."""
        from grader.harness.protocol import StepReport

        count = 0
        folder = ChildFolder(self.workdir)  # the child's files: no links, no FIFOs, read to a cap
        for index in range(len(self.steps)):
            try:
                raw = folder.read(f"step_{index}.json", REPORT)
                if raw is None:
                    break
                StepReport.model_validate_json(raw)
            except (OSError, ValueError, ChildFileRejected):
                break  # the reading after the run refuses it, as the submission's error
            count += 1
        return count

    def _failure_in(self, start: int, stop: int) -> str | None:
        calls, _ = read_evidence(self.steps[:stop], self.workdir, self.plan.bank)
        evidence = CheckEvidence(calls=calls, bank=self.plan.bank, earlier=self._earlier)
        for check in self.steps[:stop]:
            if check.name in self._earlier or check.skip_reason is not None or not check.calls:
                continue
            outcome = check.evaluate(check, evidence)
            self._earlier[check.name] = outcome
            if not outcome.passed and not outcome.skipped:
                return check.name
        return None

    def _run(self) -> None:
        seen = 0
        try:
            while not self._done.is_set():
                now = time.monotonic()
                if self.failed_at is not None:
                    if now - self.failed_at >= self.budget_s:
                        self.stopped = True
                        for event in self.events:
                            event.set()
                        return
                    self._done.wait(min(self.POLL_S, self.budget_s - (now - self.failed_at)))
                    continue
                count = self._finished_steps()
                if count > seen:
                    failed = self._failure_in(seen, count)
                    seen = count
                    if failed is not None:
                        self.failed, self.failed_at = failed, time.monotonic()
                        continue
                self._done.wait(self.POLL_S)
        except Exception:  # noqa: BLE001 - the watch only saves time; the verdict is decided after the run
            return

    def close(self) -> None:
        """Stop watching (the child has ended)."""
        self._done.set()
        self._thread.join(timeout=30)

    def not_run_message(self) -> str:
        """What a check the stopped run did not reach says."""
        return (f"not run: {self.failed} failed, so the grading stopped {self.budget_s:g} s later (fail fast); "
                f"fix {self.failed} and grade again to run this check")
