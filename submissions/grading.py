"""Run `grader check` on one submission in a subprocess and turn what it reports into a
`GradingOutcome`, or an `InfrastructureFailure` when the grading broke for reasons that are
not the submission's fault (see docs/architecture.md for the contract).

The worker never imports the grading code (torch, triton) and never runs it in its own
process: a CUDA fault, a crash or a hang of the grader parent cannot take the worker down. It
imports only the torch-free contract (grader/report/document.py): exit codes 0 passed, 1 failed, 2 error
caused by the submission, 3 infrastructure error, and the result document's one typed
definition. Anything else (another code, death by a signal, the outer timeout, a document that
does not validate or contradicts the exit code) is also an infrastructure failure: we fail
closed, never report ``passed`` for it, and never charge the student for it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grader.report.document import CheckOutcome, ErrorKind, ExitCode, GradeJob, GradingError, ResultDocument, Verdict
from grader.stages import STAGE_FILE_NAME, STAGE_FILE_VARIABLE, GradingStage, StageReport, read_stage_file
from submissions.models import SubmissionStatus
from submissions.settings import Settings
from submissions.storage import GradingWorkspace, cap_text, grading_workspace, read_capped

logger = logging.getLogger(__name__)

_VERDICT_FOR_EXIT_CODE = {
    ExitCode.PASSED: SubmissionStatus.PASSED,
    ExitCode.FAILED: SubmissionStatus.FAILED,
    ExitCode.SUBMISSION_ERROR: SubmissionStatus.ERROR,
}

#: Substrings of environment variable names that are never passed to the grader.
SECRET_NAME_MARKERS = (
    "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "APIKEY",
    "PRIVATE_KEY", "ACCESS_KEY", "DATABASE_URL", "DSN", "SESSION",
)
#: Prefixes of environment variable names never passed to the grader (libpq, clouds).
SECRET_NAME_PREFIXES = ("PG", "AWS_", "GOOGLE_", "AZURE_")


@dataclass(frozen=True)
class CheckResult:
    """One check of a grading as the service stores it (a ``check_verdicts`` row): the verdict
    columns, and every other field of the check's ``CheckOutcome`` as ``numbers``."""

    name: str
    passed: bool
    skipped: bool
    message: str | None
    numbers: dict[str, Any]

    @classmethod
    def from_outcome(cls, outcome: CheckOutcome) -> CheckResult:
        rest = outcome.model_dump(mode="json", exclude={"name", "passed", "skipped", "message"})
        return cls(name=outcome.name, passed=outcome.passed, skipped=outcome.skipped, message=outcome.message,
                   numbers={k: v for k, v in rest.items() if v not in (None, {})})


@dataclass(frozen=True)
class GradingOutcome:
    """A verdict the grader reached (``passed``, ``failed`` or ``error`` caused by the
    submission), ready to be stored."""

    status: SubmissionStatus
    error_kind: str | None
    error_message: str | None
    checks: list[CheckResult]
    result_document: dict[str, Any]
    benchmark: dict[str, Any] | None
    headline_speedup: float | None
    versions: dict[str, Any] | None
    device: str | None
    exit_code: int
    duration_s: float
    log_text: str | None
    log_truncated: bool
    grader_stderr: str


class InfrastructureFailure(Exception):
    """The grading broke for reasons outside the submission; the job is retried."""

    def __init__(
        self,
        reason: str,
        *,
        exit_code: int | None = None,
        grader_stderr: str | None = None,
        duration_s: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.exit_code = exit_code
        self.grader_stderr = grader_stderr
        self.duration_s = duration_s


class GradingCancelled(Exception):
    """The worker stopped the grading (lease lost, or shutdown); nothing is recorded."""


# ------------------------------------------------------------------------ the command


def build_grade_command(
    settings: Settings, *, source_path: os.PathLike[str] | str, seed: int, assignment: str
) -> list[str]:
    """The full argv: the configured prefix (default ``python -m grader check``) + per-job
    arguments ``SOURCE --json - --seed SEED --device DEVICE --benchmark BENCHMARK
    --assignment ASSIGNMENT``."""
    return [
        *settings.grade_command,
        os.fspath(source_path),
        "--json", "-",
        "--seed", str(seed),
        "--device", settings.grader_device,
        "--benchmark", settings.grader_benchmark,
        "--assignment", assignment,
    ]


def service_env_var_names() -> frozenset[str]:
    """Environment variable names that configure this service (``GRADER_<FIELD>``)."""
    return frozenset(f"GRADER_{name.upper()}" for name in Settings.model_fields)


def grader_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without this service's settings (database URL, instructor token,
    deployment seed, ...) and without anything whose name looks secret."""
    service_names = service_env_var_names()
    cleaned = {}
    for name, value in environ.items():
        upper = name.upper()
        if upper in service_names or upper.startswith(SECRET_NAME_PREFIXES):
            continue
        if any(marker in upper for marker in SECRET_NAME_MARKERS):
            continue
        cleaned[name] = value
    cleaned["PYTHONUNBUFFERED"] = "1"
    return cleaned


def parent_death_signal_setter(signal_number: int = signal.SIGKILL):  # noqa: ANN201
    """A ``preexec_fn`` that asks Linux to send `signal_number` to the child when the thread
    that spawned it dies, so a SIGKILLed worker leaves no orphan grader behind.

    Returns None where ``prctl`` is unavailable. The function only makes one libc call
    (resolved here, before any fork), so it is safe to run between fork and exec.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    signal_value = int(signal_number)

    def set_parent_death_signal() -> None:
        prctl(pr_set_pdeathsig, signal_value, 0, 0, 0)

    return set_parent_death_signal


_SET_PARENT_DEATH_SIGNAL = parent_death_signal_setter(signal.SIGKILL)


def _kill_process_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


# ------------------------------------------------------------------------ run + parse


def build_warm_command(settings: Settings) -> list[str]:
    """The argv of a grader started before its job: the configured prefix + ``--job-on-stdin
    --json - --device DEVICE --benchmark BENCHMARK`` (the job, a ``GradeJob`` JSON line, names
    the file, the seed and the assignment)."""
    return [
        *settings.grade_command,
        "--job-on-stdin",
        "--json", "-",
        "--device", settings.grader_device,
        "--benchmark", settings.grader_benchmark,
    ]


def _start_grader(command: list[str], workspace_root: os.PathLike[str], stdout_path, stderr_path, *,
                  stdin: int) -> subprocess.Popen[bytes]:
    """Start the grader in its own session (process group) with a scrubbed environment, its
    stdout and stderr sent to files in its private folder.

    The grader's own folders (its grading folder with the Triton cache, the check child it
    starts ahead, the replay process's folder) lie under ``<workspace_root>/work``
    (``GRADER_WORK_ROOT``, unless the environment names another), where ``grader check``
    mounts its grading's size-capped tmpfs (grader/sandbox/work_fs.py); the caller removes the
    workspace after the grading, whatever happened to the grader.

    Raises:
        InfrastructureFailure: it could not be started.
    """
    environment = grader_environment(os.environ)
    if "GRADER_WORK_ROOT" not in environment:
        work_root = Path(workspace_root) / "work"
        work_root.mkdir(mode=0o700, exist_ok=True)
        environment["GRADER_WORK_ROOT"] = str(work_root)
    # Where the grader writes the stage it is in (grader/stages.py); _wait_for_grader polls it.
    environment[STAGE_FILE_VARIABLE] = str(Path(workspace_root) / STAGE_FILE_NAME)
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        try:
            return subprocess.Popen(  # noqa: S603 - argv list, no shell
                command,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                cwd=workspace_root,
                env=environment,
                start_new_session=True,
                preexec_fn=_SET_PARENT_DEATH_SIGNAL,  # noqa: PLW1509 - async-signal-safe call only
            )
        except OSError as exc:
            raise InfrastructureFailure(f"cannot start the grader {command[0]!r}: {exc}") from exc


#: Seconds a grader started ahead may take to exit on its own once its stdin ends without a job
#: (it may still be loading torch), before it is killed.
WARM_GRADER_CLOSE_S = 5.0


class WarmGrader:
    """A ``grader check --job-on-stdin`` process started before its job arrives.

    Starting a grader costs seconds (Python, torch, the grader, the CUDA driver's answer to
    "is there a device"): a worker starts the next one when a grading starts, and hands it
    the job (one ``grader.report.document.GradeJob`` JSON line on its stdin, which is then closed) when
    the job is claimed, so that upload-to-verdict does not include that start-up (issue 11,
    point 6). Everything else is as for a grader started with its job: its own session, the
    scrubbed environment, its own private folder (created here, 0700; the source is written
    into it with the job) and the same outer limit, counted from the job's hand-over.

    Raises (constructor):
        InfrastructureFailure: the process could not be started.
    """

    def __init__(self, settings: Settings) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="grading-"))
        self.stdout_path, self.stderr_path = self.root / "grader.stdout", self.root / "grader.stderr"
        try:
            os.chmod(self.root, 0o700)
            (self.root / "source").mkdir(mode=0o700)
            self.process = _start_grader(build_warm_command(settings), self.root, self.stdout_path,
                                         self.stderr_path, stdin=subprocess.PIPE)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def hand_over(self, *, assignment: str, source_text: str, seed: int) -> GradingWorkspace | None:
        """Write the source into this grader's folder and send it the job.

        Returns:
            The grading's workspace, or None when this process can no longer take a job (it
            exited while it waited: the caller starts a grader for the job as usual).

        Raises:
            ValueError: ``assignment`` is not a plain identifier (it becomes a file name).
        """
        if not assignment.isidentifier():
            raise ValueError(f"assignment name {assignment!r} is not an identifier")
        if self.process.poll() is not None:
            try:
                stderr = read_capped(self.stderr_path, limit=2000).text
            except OSError as exc:
                stderr = f"(unreadable: {exc})"
            logger.warning("the grader started ahead exited (%s) before its job; starting one for the job. "
                           "Its stderr: %s", self.process.returncode, stderr)
            return None
        source_path = self.root / "source" / f"{assignment}.py"
        source_path.write_text(source_text, encoding="utf-8")
        job = GradeJob(source=str(source_path), seed=seed, assignment=assignment)
        stdin = self.process.stdin
        assert stdin is not None  # noqa: S101 - started with stdin=PIPE
        try:
            stdin.write((job.model_dump_json() + "\n").encode())
            stdin.close()
        except OSError:  # it exited meanwhile (broken pipe)
            return None
        return GradingWorkspace(root=self.root, source_path=source_path, stdout_path=self.stdout_path,
                                stderr_path=self.stderr_path)

    def close(self) -> None:
        """End the process if it still runs and remove its folder. One that still waits for a
        job is told by the end of its stdin and exits on its own, ending the check child it
        started ahead and removing that child's folder (grader/cli.py); after
        ``WARM_GRADER_CLOSE_S`` it is killed."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=WARM_GRADER_CLOSE_S)
            except subprocess.TimeoutExpired:
                _kill_process_group(self.process)
        shutil.rmtree(self.root, ignore_errors=True)


def run_grader(
    settings: Settings,
    *,
    assignment: str,
    source_text: str,
    seed: int,
    cancel: threading.Event,
    warm: WarmGrader | None = None,
    on_stage: Callable[[StageReport], None] | None = None,
) -> GradingOutcome:
    """Grade one submission in a `grader check` subprocess and return its outcome.

    The grader runs in its own session (process group) with stdin closed (or, for ``warm``,
    closed right after the job), stdout and stderr sent to files in a private temporary
    directory, and a scrubbed environment. ``warm``: a grader started before the job, used
    when it still runs (else one is started as usual); it is closed here, whatever happens.
    The call blocks (up to ``settings.grader_timeout_s`` from the job's start); setting
    `cancel` from another thread kills the whole process group. ``on_stage``: called (in this
    thread) with each new stage the grader reports (grader/stages.py ``StageReport``).

    Raises:
        InfrastructureFailure: the grading broke for reasons outside the submission.
        GradingCancelled: `cancel` was set before the grader finished.
    """
    if warm is not None:
        try:
            started = time.monotonic()
            workspace = warm.hand_over(assignment=assignment, source_text=source_text, seed=seed)
            if workspace is not None:
                return _wait_for_grader(settings, warm.process, workspace, cancel, started=started, on_stage=on_stage)
        finally:
            warm.close()
    with grading_workspace(assignment=assignment, source_text=source_text) as workspace:
        command = build_grade_command(
            settings, source_path=workspace.source_path, seed=seed, assignment=assignment
        )
        started = time.monotonic()
        process = _start_grader(command, workspace.root, workspace.stdout_path, workspace.stderr_path,
                                stdin=subprocess.DEVNULL)
        return _wait_for_grader(settings, process, workspace, cancel, started=started, on_stage=on_stage)


def _wait_for_grader(settings: Settings, process: subprocess.Popen[bytes], workspace: GradingWorkspace,
                     cancel: threading.Event, *, started: float,
                     on_stage: Callable[[StageReport], None] | None = None) -> GradingOutcome:
    """Wait for a started grader (up to ``settings.grader_timeout_s`` after ``started``) and
    interpret what it left; each new stage in its stage file goes to ``on_stage``."""
    deadline = started + settings.grader_timeout_s
    timed_out = False
    stage_file, seen = workspace.root / STAGE_FILE_NAME, None
    while process.poll() is None:
        if on_stage is not None:
            report = read_stage_file(stage_file)
            if report is not None and report.stage != seen:
                seen = report.stage
                on_stage(report)
        if cancel.wait(0.1):
            _kill_process_group(process)
            raise GradingCancelled("grading cancelled by the worker")
        if time.monotonic() > deadline:
            timed_out = True
            _kill_process_group(process)
            break
    # The grader parent is gone; make sure nothing it started lingers in its group.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    duration_s = time.monotonic() - started
    report = read_stage_file(stage_file)  # the last stage the grader reached, whoever listened
    return interpret_grader_run(
        settings,
        workspace=workspace,
        exit_code=process.returncode,
        timed_out=timed_out,
        duration_s=duration_s,
        stage=report.stage if report is not None else None,
    )


#: Stages at which the submission's own code has run (its module was imported before its
#: first call or compile-only pass): a grader that breaks from then on may have been broken by
#: what that code produced.
SUBMISSION_RAN_STAGES = frozenset({GradingStage.COMPILING, GradingStage.CHECKS, GradingStage.BENCHMARK})


def interpret_grader_run(
    settings: Settings,
    *,
    workspace: GradingWorkspace,
    exit_code: int,
    timed_out: bool,
    duration_s: float,
    stage: GradingStage | None = None,
) -> GradingOutcome:
    """Turn a finished grader process (exit code + captured files) into an outcome.

    Who pays (docs/security.md): a grader that dies by a signal, runs past the outer timeout,
    exits with an unknown code or writes a document that is missing, malformed or contradicts
    its exit code, *after* the submission's code ran (``stage`` in ``SUBMISSION_RAN_STAGES``,
    from the grader's stage file), broke on what the submission produced: that is the
    submission's charged ``error`` (kind ``unreadable_output``), never retried. Before that
    stage, and for exit code 3 (the grader's own verdict that it or the machine failed), it is
    an infrastructure failure, retried and uncharged.

    Raises:
        InfrastructureFailure: for exit code 3, and for the failures above before the
            submission's code ran.
    """
    stderr = read_capped(workspace.stderr_path, limit=settings.stored_log_cap_bytes).text

    def failure(reason: str) -> Exception:
        if stage in SUBMISSION_RAN_STAGES and exit_code != ExitCode.INFRASTRUCTURE:
            return SubmissionCharged(_charged_outcome(reason, assignment=workspace.source_path.stem, stage=stage,
                                                      exit_code=exit_code, duration_s=duration_s,
                                                      grader_stderr=stderr))
        return InfrastructureFailure(
            reason, exit_code=exit_code, grader_stderr=stderr, duration_s=duration_s
        )

    try:
        return _interpret(settings, workspace=workspace, exit_code=exit_code, timed_out=timed_out,
                          duration_s=duration_s, stderr=stderr, failure=failure)
    except SubmissionCharged as charged:
        return charged.outcome


class SubmissionCharged(Exception):
    """Internal: a grader failure that is the submission's charged error (``outcome``)."""

    def __init__(self, outcome: GradingOutcome) -> None:
        super().__init__(outcome.error_message)
        self.outcome = outcome


def _charged_outcome(reason: str, *, assignment: str, stage: GradingStage, exit_code: int, duration_s: float,
                     grader_stderr: str) -> GradingOutcome:
    """The stored ``error`` of a grader that broke after the submission's code ran."""
    message = (f"grading ended while the grader read and checked what the run produced ({stage.label}): "
               f"{reason}. This counts as an error of the submission")
    document = ResultDocument(assignment=assignment, verdict=Verdict.ERROR, duration_s=duration_s, error=GradingError(
        kind=ErrorKind.UNREADABLE_OUTPUT, message=message, details={"stage": stage.value}))
    return GradingOutcome(
        status=SubmissionStatus.ERROR, error_kind=ErrorKind.UNREADABLE_OUTPUT.value, error_message=message,
        checks=[], result_document=document.model_dump(mode="json", by_alias=True),
        benchmark=None, headline_speedup=None, versions=None, device=None, exit_code=exit_code,
        duration_s=duration_s, log_text=None, log_truncated=False, grader_stderr=grader_stderr)


def _interpret(settings: Settings, *, workspace: GradingWorkspace, exit_code: int, timed_out: bool,
               duration_s: float, stderr: str, failure: Callable[[str], Exception]) -> GradingOutcome:
    """``interpret_grader_run``'s reading of the exit code and the document; ``failure``
    makes the exception for a grader that broke."""

    if timed_out:
        raise failure(f"the grader exceeded the outer timeout of {settings.grader_timeout_s:g} s")
    if exit_code < 0:
        try:
            signal_name = signal.Signals(-exit_code).name
        except ValueError:
            signal_name = f"signal {-exit_code}"
        raise failure(f"the grader was killed by {signal_name}")
    if exit_code not in _VERDICT_FOR_EXIT_CODE:
        document = _try_parse_document(workspace, settings)
        detail = f": {document.error.message}" if document is not None and document.error is not None else ""
        label = "reported an infrastructure error" if exit_code == ExitCode.INFRASTRUCTURE else (
            f"exited with unexpected code {exit_code}"
        )
        raise failure(f"the grader {label}{detail}")

    raw = _read_stdout(workspace, settings)
    if raw is None:
        raise failure(f"the grader exited {exit_code} but wrote no valid JSON result document")
    try:
        document = ResultDocument.model_validate_json(raw)
    except ValidationError as exc:
        if exc.errors() and exc.errors()[0]["type"] == "json_invalid":
            raise failure(f"the grader exited {exit_code} but wrote no valid JSON result document") from exc
        raise failure(f"the grader's result document is malformed: {exc.errors()[0]['msg'][:300]}") from exc
    expected = _VERDICT_FOR_EXIT_CODE[ExitCode(exit_code)]  # a key: checked above
    if document.verdict.value != expected.value:
        raise failure(f"the grader's verdict {document.verdict.value!r} contradicts exit code {exit_code}")
    return _outcome_from_document(
        document,
        status=expected,
        exit_code=exit_code,
        duration_s=duration_s,
        grader_stderr=stderr,
        stored_log_cap_bytes=settings.stored_log_cap_bytes,
    )


def _read_stdout(workspace: GradingWorkspace, settings: Settings) -> bytes | None:
    try:
        size = workspace.stdout_path.stat().st_size
        if size == 0 or size > settings.max_result_bytes:
            return None
        return workspace.stdout_path.read_bytes()
    except OSError:
        return None


def _try_parse_document(workspace: GradingWorkspace, settings: Settings) -> ResultDocument | None:
    raw = _read_stdout(workspace, settings)
    if raw is None:
        return None
    try:
        return ResultDocument.model_validate_json(raw)
    except ValidationError:
        return None


def _outcome_from_document(
    document: ResultDocument,
    *,
    status: SubmissionStatus,
    exit_code: int,
    duration_s: float,
    grader_stderr: str,
    stored_log_cap_bytes: int,
) -> GradingOutcome:
    """The stored form of a validated result document (the log capped to what is kept)."""
    checks = [CheckResult.from_outcome(c) for c in document.checks]
    error_kind: str | None = None
    error_message: str | None = None
    if document.error is not None:
        error_kind = document.error.kind.value
        error_message = document.error.message
    if status is SubmissionStatus.FAILED:
        failed = [c.name for c in checks if not c.passed and not c.skipped]
        summary = f"{len(failed)} check(s) failed: {', '.join(failed)}"
        error_message = summary + (f"; then {error_message}" if error_message else "")
        error_kind = None

    log = document.log
    capped = cap_text(log.text, limit=stored_log_cap_bytes, omitted_before=log.omitted_bytes)
    if capped.truncated:
        # What the stored text lacks: what the grader already dropped plus what is cut here
        # (the marker in the text says the same total).
        log = log.model_copy(update={"text": capped.text, "truncated": True,
                                     "omitted_bytes": log.omitted_bytes + capped.omitted_bytes})
        document = document.model_copy(update={"log": log})

    stored = document.model_dump(mode="json", by_alias=True)
    return GradingOutcome(
        status=status,
        error_kind=error_kind,
        error_message=error_message,
        checks=checks,
        result_document=stored,
        benchmark=stored.get("benchmark"),
        headline_speedup=document.headline_value,
        versions=stored.get("versions"),
        device=document.device[:200] or None,
        exit_code=exit_code,
        duration_s=duration_s,
        log_text=log.text or None,
        log_truncated=log.truncated,
        grader_stderr=grader_stderr,
    )


def grading_sandbox_problem(settings: Settings) -> str | None:
    """Why the grader this worker runs could not sandbox any submission (no working bwrap,
    with the fix; grader/sandbox/bwrap.py), or None.

    Checked at a worker's start-up, without torch (a few ms), so that a worker never claims
    jobs whose gradings can only end in an infrastructure error. Only for the default
    ``grade_command`` (this installation's ``grader check``): another command is its own
    judge. The grader's settings (GRADER_SANDBOX, GRADER_BWRAP) reach the grader unchanged
    (``grader_environment``), so this process reads the same ones.
    """
    from submissions.settings import default_grade_command

    if list(settings.grade_command) != default_grade_command():
        return None
    from grader.sandbox.bwrap import sandbox_problem

    return sandbox_problem()
