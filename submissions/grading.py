"""Run `grader check` on one submission in a subprocess and turn what it reports into a
`GradingOutcome`, or an `InfrastructureFailure` when the grading broke for reasons that are
not the submission's fault (see docs/architecture.md for the contract).

The worker never imports the grader: a CUDA fault, a crash or a hang of the grader parent
cannot take the worker down. Exit codes: 0 passed, 1 failed, 2 error caused by the
submission, 3 infrastructure error. Anything else (another code, death by a signal, the
outer timeout, unparseable or inconsistent output) is also an infrastructure failure:
we fail closed, never report ``passed`` for it, and never charge the student for it.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from submissions.models import SubmissionStatus
from submissions.settings import Settings
from submissions.storage import GradingWorkspace, cap_text, grading_workspace, read_capped

EXIT_PASSED, EXIT_FAILED, EXIT_SUBMISSION_ERROR, EXIT_INFRASTRUCTURE = 0, 1, 2, 3

_VERDICT_FOR_EXIT_CODE = {
    EXIT_PASSED: SubmissionStatus.PASSED,
    EXIT_FAILED: SubmissionStatus.FAILED,
    EXIT_SUBMISSION_ERROR: SubmissionStatus.ERROR,
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
    """One entry of the result document's ``checks`` list."""

    name: str
    passed: bool
    skipped: bool
    message: str | None
    numbers: dict[str, Any]


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


def run_grader(
    settings: Settings,
    *,
    assignment: str,
    source_text: str,
    seed: int,
    cancel: threading.Event,
) -> GradingOutcome:
    """Grade one submission in a `grader check` subprocess and return its outcome.

    The grader runs in its own session (process group) with stdin closed, stdout and
    stderr sent to files in a private temporary directory, and a scrubbed environment.
    The call blocks (up to ``settings.grader_timeout_s``); setting `cancel` from another
    thread kills the whole process group.

    Raises:
        InfrastructureFailure: the grading broke for reasons outside the submission.
        GradingCancelled: `cancel` was set before the grader finished.
    """
    with grading_workspace(assignment=assignment, source_text=source_text) as workspace:
        command = build_grade_command(
            settings, source_path=workspace.source_path, seed=seed, assignment=assignment
        )
        started = time.monotonic()
        with workspace.stdout_path.open("wb") as stdout, workspace.stderr_path.open("wb") as stderr:
            try:
                process = subprocess.Popen(  # noqa: S603 - argv list, no shell
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=workspace.root,
                    env=grader_environment(os.environ),
                    start_new_session=True,
                    preexec_fn=_SET_PARENT_DEATH_SIGNAL,  # noqa: PLW1509 - async-signal-safe call only
                )
            except OSError as exc:
                raise InfrastructureFailure(f"cannot start the grader {command[0]!r}: {exc}") from exc
            deadline = started + settings.grader_timeout_s
            timed_out = False
            while process.poll() is None:
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
        return interpret_grader_run(
            settings,
            workspace=workspace,
            exit_code=process.returncode,
            timed_out=timed_out,
            duration_s=duration_s,
        )


def interpret_grader_run(
    settings: Settings,
    *,
    workspace: GradingWorkspace,
    exit_code: int,
    timed_out: bool,
    duration_s: float,
) -> GradingOutcome:
    """Turn a finished grader process (exit code + captured files) into an outcome.

    Raises:
        InfrastructureFailure: for exit code 3, any unknown exit code, death by a signal,
            the outer timeout, or a result document that is missing, unparseable or
            inconsistent with the exit code.
    """
    stderr = read_capped(workspace.stderr_path, limit=settings.stored_log_cap_bytes).text

    def failure(reason: str) -> InfrastructureFailure:
        return InfrastructureFailure(
            reason, exit_code=exit_code, grader_stderr=stderr, duration_s=duration_s
        )

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
        detail = ""
        if isinstance(document, dict) and isinstance(document.get("error"), dict):
            detail = f": {document['error'].get('message', '')}"
        label = "reported an infrastructure error" if exit_code == EXIT_INFRASTRUCTURE else (
            f"exited with unexpected code {exit_code}"
        )
        raise failure(f"the grader {label}{detail}")

    document = _try_parse_document(workspace, settings)
    if not isinstance(document, dict):
        raise failure(f"the grader exited {exit_code} but wrote no valid JSON result document")
    try:
        return _outcome_from_document(
            document,
            expected=_VERDICT_FOR_EXIT_CODE[exit_code],
            exit_code=exit_code,
            duration_s=duration_s,
            grader_stderr=stderr,
            stored_log_cap_bytes=settings.stored_log_cap_bytes,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise failure(f"the grader's result document is malformed: {exc}") from exc


def _try_parse_document(workspace: GradingWorkspace, settings: Settings) -> Any:
    try:
        size = workspace.stdout_path.stat().st_size
        if size == 0 or size > settings.max_result_bytes:
            return None
        # NaN/Infinity are not valid JSON for PostgreSQL; store them as null.
        return json.loads(workspace.stdout_path.read_bytes(), parse_constant=lambda _: None)
    except (OSError, ValueError):
        return None


def _as_bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{field} must be a boolean, got {value!r}")
    return value


def _parse_check(entry: Any) -> CheckResult:
    if not isinstance(entry, dict):
        raise TypeError(f"a check must be an object, got {entry!r:.80}")
    name = entry["name"]
    if not isinstance(name, str) or not name:
        raise TypeError("a check name must be a non-empty string")
    message = entry.get("message")
    numbers = {k: v for k, v in entry.items() if k not in {"name", "passed", "skipped", "message"}}
    return CheckResult(
        name=name[:200],
        passed=_as_bool(entry["passed"], "check.passed"),
        skipped=_as_bool(entry.get("skipped", False), "check.skipped"),
        message=None if message is None else str(message),
        numbers=numbers,
    )


def _headline_speedup(benchmark: Any) -> float | None:
    if not isinstance(benchmark, dict):
        return None
    headline = benchmark.get("headline")
    if not isinstance(headline, dict):
        return None
    value = headline.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _outcome_from_document(
    document: dict[str, Any],
    *,
    expected: SubmissionStatus,
    exit_code: int,
    duration_s: float,
    grader_stderr: str,
    stored_log_cap_bytes: int,
) -> GradingOutcome:
    verdict = document["verdict"]
    if verdict != expected:
        raise ValueError(f"verdict {verdict!r} contradicts exit code {exit_code}")
    raw_checks = document.get("checks") or []
    if not isinstance(raw_checks, list):
        raise TypeError("checks must be a list")
    checks = [_parse_check(entry) for entry in raw_checks]

    if expected is SubmissionStatus.PASSED:
        # Fail closed: a pass needs at least one check that ran and no check that failed.
        if not any(c.passed and not c.skipped for c in checks):
            raise ValueError("verdict 'passed' without any check that ran and passed")
        if any(not c.passed and not c.skipped for c in checks):
            raise ValueError("verdict 'passed' although a check failed")

    error = document.get("error")
    error_kind: str | None = None
    error_message: str | None = None
    if expected is SubmissionStatus.ERROR:
        if not isinstance(error, dict):
            raise TypeError("verdict 'error' needs an error object")
        error_kind = str(error.get("kind") or "unknown")[:50]
        error_message = str(error.get("message") or "")
    elif expected is SubmissionStatus.FAILED:
        failed = [c.name for c in checks if not c.passed and not c.skipped]
        error_message = f"{len(failed)} check(s) failed: {', '.join(failed)}" if failed else None

    log = document.get("log") if isinstance(document.get("log"), dict) else {}
    log_text, log_truncated = None, bool(log.get("truncated", False))
    if isinstance(log.get("text"), str):
        capped = cap_text(log["text"], limit=stored_log_cap_bytes)
        log_text, log_truncated = capped.text, log_truncated or capped.truncated
        document = {**document, "log": {**log, "text": capped.text, "truncated": log_truncated}}

    benchmark = document.get("benchmark") if isinstance(document.get("benchmark"), dict) else None
    versions = document.get("versions") if isinstance(document.get("versions"), dict) else None
    device = document.get("device")
    return GradingOutcome(
        status=expected,
        error_kind=error_kind,
        error_message=error_message,
        checks=checks,
        result_document=document,
        benchmark=benchmark,
        headline_speedup=_headline_speedup(benchmark) if expected is SubmissionStatus.PASSED else None,
        versions=versions,
        device=str(device)[:200] if device is not None else None,
        exit_code=exit_code,
        duration_s=duration_s,
        log_text=log_text,
        log_truncated=log_truncated,
        grader_stderr=grader_stderr,
    )
