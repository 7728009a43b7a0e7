"""ORM objects and service results -> API schemas (api/schemas.py). Views differ by who
asks: students never get a seed, staff-only fields, or other students' identities."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from api.schemas import (
    AssignmentRead,
    CapturedLog,
    CheckCreditRead,
    CheckPointsRead,
    CheckVerdictRead,
    Disqualification,
    ExtensionRead,
    FinalRunBrief,
    GradingBrief,
    GradingError,
    GradingProgress,
    GradingRead,
    LateCurveRead,
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
from grader.stages import GradingStage
from submissions import repository
from submissions.assignments import check_upload_window, late_curve
from submissions.errors import AssignmentClosed, AssignmentNotOpen
from submissions.grades import AssignmentRules
from submissions.lateness import is_late
from submissions.models import (
    TERMINAL_STATUSES,
    Assignment,
    CheckVerdict,
    Extension,
    FinalRun,
    Grading,
    RegradeBatch,
    Student,
    Submission,
    SubmissionStatus,
)
from submissions.regrades import RegradeComparison, RegradePreview
from submissions.scoring import Grade, PointsPolicy


def score_read(value: Grade | None) -> ScoreRead | None:
    """A grade (submissions/scoring.py) as the API carries it; None: not graded yet."""
    if value is None:
        return None
    late = value.late
    return ScoreRead(correctness_points=value.counted.correctness,
                     speed_points=value.counted.speed, total=value.total,
                     max_total=value.max_total, earned_total=value.earned.total,
                     withheld=value.withheld, text=value.text(),
                     late_penalty_percent=late.percent if late is not None else 0.0,
                     late_by_s=late.late_by.total_seconds() if late is not None else None,
                     late_text=late.describe() if late is not None else None,
                     slip_days=late.slip_days if late is not None else 0,
                     checks=[CheckCreditRead(name=c.name, points=c.points, earned=c.earned,
                                             state=c.state) for c in value.credits])


def without_seed(document: dict[str, Any] | None) -> dict[str, Any] | None:
    """A result document as a student may read it: every ``seed`` key removed (the grading
    seed, and a final run's secret seed, are never shown to students), and the grading host's
    name and cores (``placement.host``, ``placement.cpus``: the course's machines, not the
    student's business); the GPU's model and clocks stay."""
    if document is None:
        return None
    shown = {key: value for key, value in document.items() if key != "seed"}
    if isinstance(shown.get("placement"), dict):
        shown["placement"] = {key: value for key, value in shown["placement"].items() if key not in ("host", "cpus")}
    return shown


def check_read(check: CheckVerdict) -> CheckVerdictRead:
    return CheckVerdictRead(name=check.name, passed=check.passed, skipped=check.skipped,
                            message=check.message, numbers=check.numbers)


def _error(grading: Grading | None) -> GradingError | None:
    if grading is None or not grading.error_kind:
        return None
    return GradingError(kind=grading.error_kind, message=grading.error_message)


def submission_summary(submission: Submission, rules: AssignmentRules) -> SubmissionSummary:
    """The submission's line: its current verdict, lateness and grade under today's rules."""
    grading = submission.current_grading
    return SubmissionSummary(
        id=submission.id, student_id=submission.student_id, assignment=submission.assignment,
        status=grading.status if grading else SubmissionStatus.QUEUED,
        headline_speedup=grading.headline_speedup if grading else None,
        created_at=submission.created_at,
        finished_at=grading.finished_at if grading else None,
        late=rules.submission_late(submission),
        disqualified=submission.disqualified_at is not None,
        score=score_read(rules.grade_of(submission)),
    )


def submission_read(
    submission: Submission, *, rules: AssignmentRules, staff_view: bool,
) -> SubmissionRead:
    """The submission and its current grading, with its owner's due date in force; staff
    get the staff-only fields."""
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
    summary = submission_summary(submission, rules)
    result = grading.result if grading is not None else None
    return SubmissionRead(
        **summary.model_dump(),
        student_name=submission.student.name,
        filename=submission.original_filename,
        source_sha256=submission.source_sha256,
        source_bytes=submission.source_bytes,
        due_at=rules.due_for(submission.student_id),
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
    worker claimed it and `limit_s`, the worker's limit (settings.grader_timeout_s), with the
    stage the grader reported last (grader/stages.py) and the seconds since it began."""
    grading = submission.current_grading
    if grading is None or grading.status not in ("queued", "running"):
        return None
    if grading.status == "queued":
        return GradingProgress(phase="queued", queue_position=repository.queue_position(session, grading=grading))
    elapsed = _seconds_since(grading.started_at, now)
    try:
        stage = GradingStage(grading.stage) if grading.stage else None
    except ValueError:  # a stage a newer grader wrote: shown as running, without it
        stage = None
    return GradingProgress(phase="running", elapsed_s=elapsed, limit_s=limit_s, stage=stage,
                           stage_label=stage.label if stage is not None else None,
                           stage_elapsed_s=_seconds_since(grading.stage_started_at, now) if stage else None)


def _seconds_since(moment: dt.datetime | None, now: dt.datetime) -> float | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return max(0.0, (now - moment).total_seconds())


def grading_read(grading: Grading, *, rules: AssignmentRules, staff_view: bool) -> GradingRead:
    """One grading of the history, graded as its submission would be if it counted; the
    seed and who requested it are staff-only."""
    return GradingRead(
        id=grading.id, submission_id=grading.submission_id, purpose=grading.purpose,
        is_current=grading.is_current, status=grading.status, created_at=grading.created_at,
        started_at=grading.started_at, finished_at=grading.finished_at,
        attempts=grading.attempts, grader_version=grading.grader_version,
        device=grading.device, headline_speedup=grading.headline_speedup,
        error=_error(grading), checks=[check_read(c) for c in grading.checks],
        score=score_read(rules.grade_of(grading.submission, grading)),
        regrade_batch_id=grading.regrade_batch_id, final_run_id=grading.final_run_id,
        replaces_grading_id=grading.replaces_grading_id,
        seed=grading.seed if staff_view else None,
        requested_by=grading.requested_by if staff_view else None,
        worker_id=grading.worker_id if staff_view else None,
    )


def grading_brief(grading: Grading | None, value: Grade | None) -> GradingBrief | None:
    """A grading in a regrade preview, with its grade (`value`)."""
    if grading is None:
        return None
    return GradingBrief(
        id=grading.id, status=grading.status, error_kind=grading.error_kind,
        error_message=grading.error_message, headline_speedup=grading.headline_speedup,
        grader_version=grading.grader_version,
        checks_passed=sum(1 for c in grading.checks if c.passed and not c.skipped),
        checks_failed=sum(1 for c in grading.checks if not c.passed and not c.skipped),
        checks_not_run=sum(1 for c in grading.checks if c.skipped),
        score=score_read(value),
        finished_at=grading.finished_at,
    )


def regrade_summary(batch: RegradeBatch) -> RegradeSummary:
    return RegradeSummary(
        id=batch.id, assignment=batch.assignment, state=batch.state, selection=batch.selection,
        created_at=batch.created_at, created_by=batch.created_by, decided_at=batch.decided_at,
        decided_by=batch.decided_by)


def _regrade_row(comparison: RegradeComparison) -> RegradeRow:
    submission = comparison.submission
    after = grading_brief(comparison.after, comparison.after_score)
    assert after is not None  # noqa: S101 - the new grading always exists
    return RegradeRow(
        submission_id=submission.id, student_id=submission.student_id,
        student_name=submission.student.name,
        disqualified=submission.disqualified_at is not None,
        before=grading_brief(comparison.before, comparison.before_score), after=after,
        verdict_changed=comparison.verdict_changed, score_delta=comparison.score_delta,
        applicable=comparison.applicable, applied=comparison.applied)


def regrade_read(preview: RegradePreview, *,
                 left_out_busy: int | None = None,
                 unchanged: list[int] | None = None) -> RegradeRead:
    return RegradeRead(
        **regrade_summary(preview.batch).model_dump(),
        total=len(preview.comparisons), pending=preview.pending, changed=preview.changed,
        left_out_busy=left_out_busy, unchanged=unchanged,
        rows=[_regrade_row(c) for c in preview.comparisons])


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
    final_run_graded: int = 0,
    final_run_total: int = 0,
) -> AssignmentRead:
    manifest = get_manifest(row.name)
    curve = late_curve(row)
    # A student's own due date in force decides for them (their quota carries it).
    due_at = quota.due_at if quota is not None else row.due_at
    is_past_due = is_late(now, due_at)
    try:  # the upload rule itself, with the slip days the student could spend
        check_upload_window(row, due_at=due_at, now=now,
                            slip_days_left=quota.slip_days_left if quota is not None else 0)
        is_open = True
    except (AssignmentNotOpen, AssignmentClosed):
        is_open = False
    return AssignmentRead(
        name=row.name, title=manifest.title, function=manifest.function,
        module_file=manifest.module_file, opens_at=row.opens_at, due_at=row.due_at,
        late_policy=row.late_policy, is_open=is_open, is_past_due=is_past_due,
        late_curve=None if curve is None else LateCurveRead(
            percent=curve.percent, unit=curve.unit, cap=curve.cap, after_cap=curve.after_cap),
        max_submissions=row.max_submissions, rate_limit_submissions=rate_limit[0],
        rate_limit_window_s=rate_limit[1], leaderboard_visible=row.leaderboard_visible,
        points=Points(
            correctness_points=policy.correctness_points,
            speed_points=[SpeedThreshold(min_speedup=t.min_speedup, points=t.points)
                          for t in policy.thresholds],
            max_points=policy.max_total,
            check_points=[CheckPointsRead(name=name, points=points)
                          for name, points in policy.check_points],
            check_points_overridden=bool(row.check_points), counting=row.counting),
        final_run=None if final_run is None else FinalRunBrief(
            id=final_run.id, created_at=final_run.created_at, finished=final_run_finished,
            graded=final_run_graded, total=final_run_total),
        you=quota,
        updated_at=row.updated_at,
        updated_by=row.updated_by if staff_view else None,
    )


def extension_read(extension: Extension, *, student_name: str,
                   due_at: dt.datetime | None) -> ExtensionRead:
    """An extension with the due date it puts in force (`due_at`)."""
    return ExtensionRead(assignment=extension.assignment, student_id=extension.student_id,
                         student_name=student_name, due_at=extension.due_at,
                         extra_days=extension.extra_days, due_in_force=due_at,
                         reason=extension.reason, granted_by=extension.granted_by,
                         granted_at=extension.granted_at)


def student_read(student: Student) -> StudentRead:
    return StudentRead(id=student.id, name=student.name, email=student.email,
                       external_id=student.external_id, created_at=student.created_at,
                       token_rotated_at=student.token_rotated_at)


def grading_finished(grading: Grading) -> bool:
    """True once the grading has a verdict (or gave up)."""
    return grading.status in TERMINAL_STATUSES
