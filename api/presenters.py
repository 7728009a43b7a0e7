"""ORM objects and service results -> API schemas (api/schemas.py). Views differ by who
asks: students never get a seed, staff-only fields, or other students' identities."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from api.schemas import (
    AssignmentRead,
    CapturedLog,
    CheckVerdictRead,
    Disqualification,
    FinalRunBrief,
    GradingBrief,
    GradingError,
    GradingProgress,
    GradingRead,
    Points,
    Quota,
    RegradeRead,
    RegradeRow,
    RegradeSummary,
    ScoreRead,
    SpeedThreshold,
    StudentRead,
    SubmissionRead,
    SubmissionSummary,
)
from grader.manifest import get_manifest
from submissions import repository
from submissions.models import (
    TERMINAL_STATUSES,
    Assignment,
    CheckVerdict,
    FinalRun,
    Grading,
    RegradeBatch,
    Student,
    Submission,
    SubmissionStatus,
)
from submissions.regrades import RegradeComparison, RegradePreview, grading_score
from submissions.scoring import PointsPolicy, Score


def score_read(policy: PointsPolicy, value: Score | None) -> ScoreRead | None:
    """A score with the assignment's maximum."""
    if value is None:
        return None
    return ScoreRead(correctness_points=value.correctness, speed_points=value.speed,
                     total=value.total, max_total=policy.max_total)


def without_seed(document: dict[str, Any] | None) -> dict[str, Any] | None:
    """A result document as a student may read it: every ``seed`` key removed (the grading
    seed, and a final run's secret seed, are never shown to students)."""
    if document is None:
        return None
    return {key: value for key, value in document.items() if key != "seed"}


def check_read(check: CheckVerdict) -> CheckVerdictRead:
    return CheckVerdictRead(name=check.name, passed=check.passed, skipped=check.skipped,
                            message=check.message, numbers=check.numbers)


def _error(grading: Grading | None) -> GradingError | None:
    if grading is None or not grading.error_kind:
        return None
    return GradingError(kind=grading.error_kind, message=grading.error_message)


def submission_summary(submission: Submission, policy: PointsPolicy) -> SubmissionSummary:
    grading = submission.current_grading
    return SubmissionSummary(
        id=submission.id, student_id=submission.student_id, assignment=submission.assignment,
        status=grading.status if grading else SubmissionStatus.QUEUED,
        headline_speedup=grading.headline_speedup if grading else None,
        created_at=submission.created_at,
        finished_at=grading.finished_at if grading else None,
        late=submission.is_late, disqualified=submission.disqualified_at is not None,
        score=score_read(policy, grading_score(policy, grading)),
    )


def submission_read(
    submission: Submission, *, policy: PointsPolicy, due_at: dt.datetime | None,
    staff_view: bool,
) -> SubmissionRead:
    """The submission and its current grading; staff get the staff-only fields."""
    grading = submission.current_grading
    log = (CapturedLog(text=grading.log_text, truncated=bool(grading.log_truncated))
           if grading is not None and grading.log_text is not None else None)
    disqualification = None
    if submission.disqualified_at is not None:
        disqualification = Disqualification(
            reason=submission.disqualified_reason or "", at=submission.disqualified_at,
            by=submission.disqualified_by if staff_view else None)
    staff_fields: dict[str, Any] = {}
    if staff_view and grading is not None:
        staff_fields = {
            "seed": grading.seed, "grader_exit_code": grading.grader_exit_code,
            "grader_stderr": grading.grader_stderr,
            "last_attempt_error": grading.last_attempt_error,
        }
    summary = submission_summary(submission, policy)
    result = grading.result if grading is not None else None
    return SubmissionRead(
        **summary.model_dump(),
        student_name=submission.student.name,
        filename=submission.original_filename,
        source_sha256=submission.source_sha256,
        source_bytes=submission.source_bytes,
        due_at=due_at,
        disqualification=disqualification,
        grading_id=grading.id if grading else None,
        grader_version=grading.grader_version if grading else None,
        checks=[check_read(c) for c in grading.checks] if grading else [],
        error=_error(grading),
        benchmark=grading.benchmark if grading else None,
        device=grading.device if grading else None,
        versions=grading.versions if grading else None,
        log=log,
        started_at=grading.started_at if grading else None,
        grading_duration_s=grading.grading_duration_s if grading else None,
        worker_id=grading.worker_id if grading else None,
        attempts=grading.attempts if grading else 0,
        result=result if staff_view else without_seed(result),
        **staff_fields,
    )


def grading_progress(session: Session, submission: Submission, *, limit_s: float,
                     now: dt.datetime) -> GradingProgress | None:
    """Where the submission's current grading stands while queued or running (None once it
    is finished): its queue position (repository.queue_position), or the seconds since a
    worker claimed it and `limit_s`, the worker's limit (settings.grader_timeout_s)."""
    grading = submission.current_grading
    if grading is None or grading.status not in ("queued", "running"):
        return None
    if grading.status == "queued":
        return GradingProgress(phase="queued", queue_position=repository.queue_position(session, grading=grading))
    started = grading.started_at
    if started is not None and started.tzinfo is None:
        started = started.replace(tzinfo=dt.UTC)
    elapsed = max(0.0, (now - started).total_seconds()) if started is not None else None
    return GradingProgress(phase="running", elapsed_s=elapsed, limit_s=limit_s)


def grading_read(grading: Grading, *, policy: PointsPolicy, staff_view: bool) -> GradingRead:
    """One grading of the history; the seed and who requested it are staff-only."""
    return GradingRead(
        id=grading.id, submission_id=grading.submission_id, purpose=grading.purpose,
        is_current=grading.is_current, status=grading.status, created_at=grading.created_at,
        started_at=grading.started_at, finished_at=grading.finished_at,
        attempts=grading.attempts, grader_version=grading.grader_version,
        device=grading.device, headline_speedup=grading.headline_speedup,
        error=_error(grading), checks=[check_read(c) for c in grading.checks],
        score=score_read(policy, grading_score(policy, grading)),
        regrade_batch_id=grading.regrade_batch_id, final_run_id=grading.final_run_id,
        replaces_grading_id=grading.replaces_grading_id,
        seed=grading.seed if staff_view else None,
        requested_by=grading.requested_by if staff_view else None,
        worker_id=grading.worker_id if staff_view else None,
    )


def grading_brief(grading: Grading | None, policy: PointsPolicy) -> GradingBrief | None:
    if grading is None:
        return None
    return GradingBrief(
        id=grading.id, status=grading.status, error_kind=grading.error_kind,
        error_message=grading.error_message, headline_speedup=grading.headline_speedup,
        grader_version=grading.grader_version,
        checks_passed=sum(1 for c in grading.checks if c.passed and not c.skipped),
        checks_failed=sum(1 for c in grading.checks if not c.passed and not c.skipped),
        checks_not_run=sum(1 for c in grading.checks if c.skipped),
        score=score_read(policy, grading_score(policy, grading)),
        finished_at=grading.finished_at,
    )


def regrade_summary(batch: RegradeBatch) -> RegradeSummary:
    return RegradeSummary(
        id=batch.id, assignment=batch.assignment, state=batch.state, selection=batch.selection,
        created_at=batch.created_at, created_by=batch.created_by, decided_at=batch.decided_at,
        decided_by=batch.decided_by)


def _regrade_row(comparison: RegradeComparison, policy: PointsPolicy) -> RegradeRow:
    submission = comparison.submission
    after = grading_brief(comparison.after, policy)
    assert after is not None  # noqa: S101 - the new grading always exists
    return RegradeRow(
        submission_id=submission.id, student_id=submission.student_id,
        student_name=submission.student.name,
        disqualified=submission.disqualified_at is not None,
        before=grading_brief(comparison.before, policy), after=after,
        verdict_changed=comparison.verdict_changed, score_delta=comparison.score_delta,
        applicable=comparison.applicable, applied=comparison.applied)


def regrade_read(preview: RegradePreview, policy: PointsPolicy, *,
                 left_out_busy: int | None = None,
                 unchanged: list[int] | None = None) -> RegradeRead:
    return RegradeRead(
        **regrade_summary(preview.batch).model_dump(),
        total=len(preview.comparisons), pending=preview.pending, changed=preview.changed,
        left_out_busy=left_out_busy, unchanged=unchanged,
        rows=[_regrade_row(c, policy) for c in preview.comparisons])


def assignment_read(
    row: Assignment,
    *,
    policy: PointsPolicy,
    rate_limit: tuple[int, float],
    final_run: FinalRun | None,
    final_run_finished: bool,
    quota: Quota | None,
    staff_view: bool,
    now: dt.datetime,
) -> AssignmentRead:
    manifest = get_manifest(row.name)
    is_past_due = row.due_at is not None and now > row.due_at
    is_open = (row.opens_at is None or now >= row.opens_at) and (
        not is_past_due or row.late_policy == "mark_late")
    return AssignmentRead(
        name=row.name, title=manifest.title, function=manifest.function,
        module_file=manifest.module_file, opens_at=row.opens_at, due_at=row.due_at,
        late_policy=row.late_policy, is_open=is_open, is_past_due=is_past_due,
        max_submissions=row.max_submissions, rate_limit_submissions=rate_limit[0],
        rate_limit_window_s=rate_limit[1], leaderboard_visible=row.leaderboard_visible,
        points=Points(
            correctness_points=policy.correctness_points,
            speed_points=[SpeedThreshold(min_speedup=t.min_speedup, points=t.points)
                          for t in policy.thresholds],
            max_points=policy.max_total),
        final_run=None if final_run is None else FinalRunBrief(
            id=final_run.id, created_at=final_run.created_at, finished=final_run_finished),
        you=quota,
        updated_at=row.updated_at,
        updated_by=row.updated_by if staff_view else None,
    )


def student_read(student: Student) -> StudentRead:
    return StudentRead(id=student.id, name=student.name, email=student.email,
                       external_id=student.external_id, created_at=student.created_at,
                       token_rotated_at=student.token_rotated_at)


def grading_finished(grading: Grading) -> bool:
    """True once the grading has a verdict (or gave up)."""
    return grading.status in TERMINAL_STATUSES
