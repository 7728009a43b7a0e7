"""Grade one submission: source validation, the sandboxed child, oracles and verdicts.

``grade_source`` is the whole grading of one file and returns the ``ResultDocument``
(grader/report/document.py). The parent (this process) generates every input, computes every oracle
and decides every verdict; the child only runs the submission on inputs it is given and writes
back output tensors, which are read here as plain numbers (grader/evidence/reader.py).
"""

from __future__ import annotations

import platform
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from grader.assignments import Assignment, get_assignment
from grader.checks.interpreter_limits import cpu_cannot_judge_notes
from grader.checks.plan import AssignmentError, CheckEvidence, Plan
from grader.checks.verdicts import RUN_ENDING_ERRORS, decide_verdict, evaluate_checks
from grader.children.check_children import (
    FailFastWatch,
    IsolatedChild,
    PrestartedChild,
    child_notes,
    child_phases,
    first_input_of,
    limits_with_compilation,
    precompile_faulted,
    run_child,
    run_isolated,
)
from grader.evidence.child_files import ChildFileRejected
from grader.evidence.reader import (
    InfrastructureError,
    call_context,
    call_level_error,
    child_error,
    compile_report,
    read_evidence,
)
from grader.report.benchmark_result import BenchmarkResult
from grader.report.document import SCHEMA_VERSION, CapturedLog, CompileCost, ErrorKind, GradingError, ResultDocument, Verdict
from grader.sandbox.bwrap import sandbox_label
from grader.sandbox.child_limits import REPLAY_STARTUP_S
from grader.sandbox.parent_limits import ParentBudgetSpent, charged_cpu_budget, unreadable_output_error
from grader.sandbox.placement import finish_placement, start_placement
from grader.sandbox.work_fs import work_folder_full
from grader.settings import GraderSettings
from grader.source_validation import SourceRejected, validate_source
from grader.stages import GradingStage, report_stage, stage_listener
from grader.version import grader_version, package_version

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


@dataclass
class _Run:
    """One correctness run's results, and what the benchmark needs from it (GPU)."""

    fields: dict
    replay: object = None  # the grader.children.replay_process.ReplayOutcome that timed the benchmark rows
    unreplayable: dict[str, str] = field(default_factory=dict)


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
        from grader.children.replay_process import ReplayProcess

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
    isolated = (IsolatedChild(plan, assignment, source, device=device, settings=settings, grading_dir=grading_dir,
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
                            isolated: IsolatedChild | None, *, device: str, settings: GraderSettings,
                            grading_dir: Path, cache_dir: Path, timings: dict[str, float], rows: list[dict],
                            benchmark_options, prestarted: PrestartedChild | None = None) -> _Run:
    """``_checks_with_replay`` once the isolated child (if the plan has one) runs beside."""
    cancel = threading.Event()
    # Fail fast: a check seen failing while the child runs gives it settings.fail_fast_s more.
    watch = (FailFastWatch(plan, grading_dir / "check", settings.fail_fast_s,
                           [cancel, *([prestarted.cancel_event] if prestarted is not None else [])])
             if settings.fail_fast_s > 0 else None)
    try:
        workdir, outcome = run_child(plan, assignment, source, isolated=False, device=device, settings=settings,
                                      grading_dir=grading_dir, cache_dir=cache_dir, rows=rows, prestarted=prestarted,
                                      cancel=cancel)
    finally:
        if watch is not None:
            watch.close()
    stopped_early = watch.not_run_message() if watch is not None and watch.stopped and outcome.cancelled else None
    pass_notes: list[str] = []
    if precompile_faulted(workdir, outcome):
        # The compile-only pass (calls whose kernels are not launched) faulted the CUDA context
        # before any check call: run the checks again without it; only that run is evidence.
        timings["child_with_faulted_precompile"] = outcome.duration_s
        shutil.rmtree(workdir, ignore_errors=True)
        workdir, outcome = run_child(plan, assignment, source, isolated=False, device=device,
                                      settings=settings.model_copy(update={"precompile_threads": 0}),
                                      grading_dir=grading_dir, cache_dir=cache_dir, rows=rows)
        pass_notes.append("The checks ran twice: the first run's compile-only pass (each call made once with its "
                          "Triton kernels compiled, not launched) left the GPU unusable, so the run was repeated "
                          "without that pass. Nothing of the first run counts.")
    # From here on the parent reads and judges what the children produced: any failure it meets
    # is the submission's charged error (docs/security.md, "Who pays"), within a CPU budget.
    with charged_cpu_budget(settings.parent_evidence_cpu_s):
        try:
            return _judge_children(plan, assignment, source, replay_process, isolated, workdir, outcome, pass_notes,
                                   device=device, settings=settings, grading_dir=grading_dir, cache_dir=cache_dir,
                                   timings=timings, rows=rows, benchmark_options=benchmark_options,
                                   stopped_early=stopped_early)
        except (InfrastructureError, AssignmentError, ChildFileRejected, ParentBudgetSpent):
            raise  # ours, the author's, or already the submission's own error
        except Exception as exc:  # noqa: BLE001 - who pays: what the submission produced broke a reader
            return _Run(fields={"verdict": Verdict.ERROR, "error": unreadable_output_error(exc)})


def _judge_children(plan: Plan, assignment: Assignment, source: str, replay_process, isolated: IsolatedChild | None,
                    workdir: Path, outcome, pass_notes: list[str], *, device: str, settings: GraderSettings,
                    grading_dir: Path, cache_dir: Path, timings: dict[str, float], rows: list[dict],
                    benchmark_options, stopped_early: str | None) -> _Run:
    """``_checks_beside_isolated`` once the main child ended: read its evidence, run the
    isolated child and the replay, evaluate every check. ``stopped_early``: why the fail-fast
    watch stopped the main child (the checks it did not reach), or None."""
    timings["child"] = outcome.duration_s
    timings["compile"] = outcome.compile_s
    if outcome.cpu_s is not None:  # CPU runs: the seconds the limit counts (child_limits.CpuClock)
        timings["child_cpu"] = outcome.cpu_s
    timings.update(child_phases(outcome))
    evidence_calls, finished = read_evidence(plan.steps(isolated=False), workdir, plan.bank)
    # A child that filled its grading's tmpfs ended for that, whatever it did next. A child the
    # fail-fast watch stopped ended for that (unless a limit of its own ended it first).
    process_error = work_folder_full(grading_dir, settings)
    if process_error is None and (stopped_early is None or outcome.memory_exceeded or outcome.output_exceeded
                                  or outcome.process_limit_hit):
        process_error = child_error(outcome, workdir, settings, device=device, first_input=first_input_of(plan))
    if process_error is not None:
        stopped_early = None
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
    notes = pass_notes + child_notes(workdir)
    evidence = CheckEvidence(calls=evidence_calls, bank=plan.bank)
    run = _Run(fields={})
    if error is None and stopped_early is None:
        # Before the replay's phase 1: a rerun of a crowded-out isolated child must find the
        # device as free as it can be (the replay process allocates the recorded buffers).
        notes += run_isolated(plan, assignment, source, evidence, finished, device=device, settings=settings,
                               grading_dir=grading_dir, cache_dir=cache_dir, timings=timings, started=isolated)
    sent = None
    if replay_process is not None and error is None and stopped_early is None:
        sent = _send_recording(plan, workdir, evidence_calls, replay_process, run, rows=rows)
    replay_started = time.monotonic()
    timing = _start_timing(assignment, sent, replay_process, rows=rows, benchmark_options=benchmark_options)
    oracle_started = time.monotonic()
    outcomes = evaluate_checks(plan, evidence, finished, error, stopped_early=stopped_early)
    timings["oracles"] = time.monotonic() - oracle_started
    if sent is not None:
        others_passed = all(o.passed or o.skipped for o, check in zip(outcomes, plan.checks) if check.calls)
        _finish_replay(sent, timing, evidence_calls, replay_process, run, others_passed=others_passed)
        timings["replay"] = time.monotonic() - replay_started
        outcomes = evaluate_checks(plan, evidence, finished, error, previous=outcomes, stopped_early=stopped_early)
    notes += cpu_cannot_judge_notes(outcomes)
    run.fields = {
        "verdict": decide_verdict(outcomes, error, len(plan.checks), failures_before_error=failures_before_error),
        "error": error,
        "checks": outcomes,
        "log": CapturedLog(**outcome.log.as_json()),
        "limits": limits_with_compilation(outcome.limits, settings, device),
        "notes": list(dict.fromkeys(notes)),
        "compilations": [CompileCost.model_validate(entry) for entry in compile_report(outcome)[:32]],
    }
    return run



def _send_recording(plan: Plan, workdir: Path, evidence_calls: dict, replay_process, run: _Run, *,
                    rows: list[dict]):
    """Validate the child's recording and send the replay process phase 1: every recorded check
    call once (its output goes into the evidence when ``_finish_replay`` injects it).

    Returns:
        (recording, check calls) when the process was sent work, else None (nothing recorded,
        or the recording was rejected: the calls' replay errors and ``run.unreplayable`` say so).
    """
    from grader.children.replay_process import RecordingRejected, calls_to_replay, load_recording, replay_inputs

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
    from grader.children.replay_process import inject

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
        except ParentBudgetSpent as exc:
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
