"""Submissions: insertion (with the upload's grading), reads, listings, the counts behind
the rate limit and the submission limit, disqualification."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

from sqlalchemy import and_, func, not_, select, update
from sqlalchemy.orm import Session, selectinload

from submissions.models import (
    INFRASTRUCTURE_ERROR,
    Grading,
    GradingPurpose,
    Submission,
    SubmissionStatus,
)
from submissions.repository.queue import PRIORITY_UPLOAD, insert_grading

__all__ = [
    "count_counted_submissions",
    "counted_submission_times",
    "get_grading",
    "get_submission",
    "insert_submission",
    "list_gradings",
    "list_submissions",
    "set_disqualification",
]


def _counted():  # noqa: ANN202 - a SQL expression over Submission joined to its current Grading
    """Submissions that count toward the limits: all except those whose current grading
    is an infrastructure error (our fault, not theirs)."""
    return not_(
        and_(
            Grading.status == SubmissionStatus.ERROR,
            func.coalesce(Grading.error_kind, "") == INFRASTRUCTURE_ERROR,
        )
    )


def _with_current_grading(statement):  # noqa: ANN001, ANN202
    return statement.join(
        Grading, and_(Grading.submission_id == Submission.id, Grading.is_current)
    )


def counted_submission_times(
    session: Session, *, student_id: int, assignment: str, since: dt.datetime
) -> list[dt.datetime]:
    """Upload times (ascending) of the student's submissions of `assignment` since `since`
    that count toward the rate limit. Call after `lock_student` in the same transaction."""
    rows = session.scalars(
        _with_current_grading(select(Submission.created_at))
        .where(
            Submission.student_id == student_id,
            Submission.assignment == assignment,
            Submission.created_at > since,
            _counted(),
        )
        .order_by(Submission.created_at)
    )
    return list(rows)


def count_counted_submissions(session: Session, *, student_id: int, assignment: str) -> int:
    """How many of the student's submissions of `assignment` count toward its maximum
    (infrastructure errors do not). Call after `lock_student` in the same transaction."""
    return session.scalar(
        _with_current_grading(select(func.count(Submission.id))).where(
            Submission.student_id == student_id,
            Submission.assignment == assignment,
            _counted(),
        )
    ) or 0


def insert_submission(
    session: Session,
    *,
    student_id: int,
    assignment: str,
    source_text: str,
    source_sha256: str,
    source_bytes: int,
    original_filename: str | None,
    now: dt.datetime,
    derive_seed: Callable[[int], int] | None = None,
) -> Submission:
    """Insert a submission and queue its grading (current from the start, students'
    priority); flushes so that both ids are assigned.

    `derive_seed(submission_id)` gives the grading seed of the submission (stored on it and
    on the grading); without it the seed stays None and the worker derives it.
    """
    submission = Submission(
        student_id=student_id,
        assignment=assignment,
        source_text=source_text,
        source_sha256=source_sha256,
        source_bytes=source_bytes,
        original_filename=original_filename,
        created_at=now,
    )
    session.add(submission)
    session.flush()
    if derive_seed is not None:
        submission.seed = derive_seed(submission.id)
    insert_grading(
        session, submission_id=submission.id, purpose=GradingPurpose.SUBMISSION,
        seed=submission.seed, is_current=True, priority=PRIORITY_UPLOAD, now=now,
    )
    return submission


def get_submission(session: Session, *, submission_id: int) -> Submission | None:
    """The submission with its student and its current grading (with check verdicts)
    loaded, or None."""
    return session.scalars(
        select(Submission)
        .where(Submission.id == submission_id)
        .options(
            selectinload(Submission.current_grading).selectinload(Grading.checks),
            selectinload(Submission.student),
        )
    ).first()


def list_submissions(
    session: Session,
    *,
    student_id: int | None,
    limit: int,
    offset: int,
    assignment: str | None = None,
    status: str | None = None,
) -> Sequence[Submission]:
    """Submissions, newest first, optionally of one student, one assignment, or whose
    current grading has `status`; with their current grading and student loaded."""
    statement = (
        select(Submission)
        .options(selectinload(Submission.current_grading), selectinload(Submission.student))
        .order_by(Submission.id.desc())
        .limit(limit)
        .offset(offset)
    )
    if student_id is not None:
        statement = statement.where(Submission.student_id == student_id)
    if assignment is not None:
        statement = statement.where(Submission.assignment == assignment)
    if status is not None:
        statement = _with_current_grading(statement).where(Grading.status == status)
    return session.scalars(statement).all()


def list_gradings(session: Session, *, submission_id: int) -> Sequence[Grading]:
    """Every grading of a submission, oldest first, with check verdicts loaded."""
    return session.scalars(
        select(Grading)
        .where(Grading.submission_id == submission_id)
        .options(selectinload(Grading.checks))
        .order_by(Grading.id)
    ).all()


def get_grading(session: Session, *, grading_id: int) -> Grading | None:
    """One grading with its check verdicts, or None."""
    return session.scalars(
        select(Grading).where(Grading.id == grading_id).options(selectinload(Grading.checks))
    ).first()


def set_disqualification(
    session: Session,
    *,
    submission_id: int,
    at: dt.datetime | None,
    by: str | None,
    reason: str | None,
) -> None:
    """Mark a submission disqualified (`at`, `by`, `reason`) or restore it (all None)."""
    session.execute(
        update(Submission)
        .where(Submission.id == submission_id)
        .values(disqualified_at=at, disqualified_by=by, disqualified_reason=reason)
        .execution_options(synchronize_session="fetch")
    )
