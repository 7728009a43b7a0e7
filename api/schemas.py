"""API schemas (pydantic), separate from the ORM models in submissions/models.py."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from submissions.models import Submission


class ErrorBody(BaseModel):
    """The body of every error response: ``{"error": {"code": ..., "message": ..., ...}}``."""

    code: str = Field(description="stable machine-readable code, e.g. `upload_too_large`")
    message: str
    model_config = ConfigDict(extra="allow")


class ErrorResponse(BaseModel):
    error: ErrorBody


# ------------------------------------------------------------------------- students


class StudentCreate(BaseModel):
    name: str = Field(min_length=1, max_length=200)


class StudentCreated(BaseModel):
    """A new student; `token` is shown only here (only its hash is stored)."""

    id: int
    name: str
    token: str


class StudentRead(BaseModel):
    id: int
    name: str
    created_at: dt.datetime


# ---------------------------------------------------------------------- submissions


class SubmissionCreated(BaseModel):
    id: int
    status: str = Field(examples=["queued"])


class CheckVerdictRead(BaseModel):
    name: str
    passed: bool
    skipped: bool
    message: str | None
    numbers: dict[str, Any] | None = Field(description="max_abs_err, tolerance, ...")


class GradingError(BaseModel):
    kind: str = Field(description="`infrastructure` (our fault, retried) or the grader's kind: "
                      "syntax, import, missing_function, timeout, crash, ...")
    message: str | None


class CapturedLog(BaseModel):
    text: str | None
    truncated: bool


class SubmissionSummary(BaseModel):
    id: int
    student_id: int
    assignment: str
    status: str
    headline_speedup: float | None
    created_at: dt.datetime
    finished_at: dt.datetime | None


class SubmissionRead(SubmissionSummary):
    """A submission as its owner sees it; the instructor also gets the fields marked
    instructor-only (None for students)."""

    student_name: str
    filename: str | None
    source_sha256: str
    source_bytes: int
    checks: list[CheckVerdictRead]
    error: GradingError | None
    benchmark: dict[str, Any] | None
    device: str | None
    versions: dict[str, Any] | None
    log: CapturedLog | None
    started_at: dt.datetime | None
    grading_duration_s: float | None
    worker_id: str | None
    attempts: int
    # Instructor-only.
    seed: int | None = None
    result: dict[str, Any] | None = None
    grader_exit_code: int | None = None
    grader_stderr: str | None = None
    last_attempt_error: str | None = None

    @classmethod
    def from_submission(cls, submission: Submission, *, instructor_view: bool) -> SubmissionRead:
        error = (
            GradingError(kind=submission.error_kind, message=submission.error_message)
            if submission.error_kind
            else None
        )
        log = (
            CapturedLog(text=submission.log_text, truncated=bool(submission.log_truncated))
            if submission.log_text is not None
            else None
        )
        instructor_fields: dict[str, Any] = {}
        if instructor_view:
            instructor_fields = {
                "seed": submission.seed,
                "result": submission.result,
                "grader_exit_code": submission.grader_exit_code,
                "grader_stderr": submission.grader_stderr,
                "last_attempt_error": submission.last_attempt_error,
            }
        return cls(
            id=submission.id,
            student_id=submission.student_id,
            student_name=submission.student.name,
            assignment=submission.assignment,
            status=submission.status,
            headline_speedup=submission.headline_speedup,
            created_at=submission.created_at,
            finished_at=submission.finished_at,
            filename=submission.original_filename,
            source_sha256=submission.source_sha256,
            source_bytes=submission.source_bytes,
            checks=[
                CheckVerdictRead(
                    name=c.name, passed=c.passed, skipped=c.skipped,
                    message=c.message, numbers=c.numbers,
                )
                for c in submission.checks
            ],
            error=error,
            benchmark=submission.benchmark,
            device=submission.device,
            versions=submission.versions,
            log=log,
            started_at=submission.started_at,
            grading_duration_s=submission.grading_duration_s,
            worker_id=submission.worker_id,
            attempts=submission.attempts,
            **instructor_fields,
        )


class SubmissionList(BaseModel):
    submissions: list[SubmissionSummary]


# ---------------------------------------------------------------------- leaderboard


class LeaderboardRow(BaseModel):
    """One student's best passing submission. For a student viewer, other rows are
    anonymous (`student_id`, `student_name` and `submission_id` are None)."""

    rank: int
    is_you: bool
    student_id: int | None
    student_name: str | None
    submission_id: int | None
    headline_speedup: float | None = Field(
        description="geomean speedup vs the baseline (higher is better); None: no GPU benchmark"
    )
    device: str | None
    submitted_at: dt.datetime


class Leaderboard(BaseModel):
    assignment: str
    rows: list[LeaderboardRow]


# --------------------------------------------------------------------------- health


class WorkerHealth(BaseModel):
    worker_id: str
    hostname: str
    last_seen_at: dt.datetime
    alive: bool
    current_submission_id: int | None


class Health(BaseModel):
    status: str = Field(description="`ok`, `degraded` (no live worker) or `unavailable`")
    database: str
    queue_depth: int | None
    workers: list[WorkerHealth]
