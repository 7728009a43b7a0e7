"""Regrade batches: choosing submissions, their new gradings, applying or discarding."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, delete, exists, select, update
from sqlalchemy.orm import Session, aliased, selectinload

from submissions.models import (
    TERMINAL_STATUSES,
    Grading,
    GradingPurpose,
    RegradeBatch,
    RegradeState,
    Submission,
    SubmissionStatus,
)

__all__ = [
    "delete_queued_gradings",
    "get_regrade_batch",
    "insert_regrade_batch",
    "list_regrade_batches",
    "regrade_gradings",
    "select_submissions_for_regrade",
    "set_current_grading",
    "set_regrade_state",
]


def insert_regrade_batch(
    session: Session, *, assignment: str, selection: dict[str, Any], created_by: str,
    now: dt.datetime,
) -> RegradeBatch:
    """Insert an open batch; flushes to assign the id."""
    batch = RegradeBatch(assignment=assignment, state=RegradeState.OPEN, selection=selection,
                         created_at=now, created_by=created_by)
    session.add(batch)
    session.flush()
    return batch


def select_submissions_for_regrade(
    session: Session,
    *,
    assignment: str,
    student_id: int | None,
    status: str | None,
    grader_version: str | None,
    submission_ids: Sequence[int] | None,
    limit: int,
) -> tuple[list[Submission], int]:
    """Submissions of `assignment` whose current grading finished and matches the filters
    (`status` and `grader_version` of the current grading; None: any), at most `limit`, in
    id order; and how many matching ones were left out because a regrade of theirs in
    another open batch is still undecided."""
    in_open_batch = aliased(Grading)
    open_batch = exists().where(
        in_open_batch.submission_id == Submission.id,
        in_open_batch.purpose == GradingPurpose.REGRADE,
        in_open_batch.regrade_batch_id == RegradeBatch.id,
        RegradeBatch.state == RegradeState.OPEN,
    )
    statement = (
        select(Submission, open_batch.label("busy"))
        .options(selectinload(Submission.current_grading))
        .join(Grading, and_(Grading.submission_id == Submission.id, Grading.is_current))
        .where(Submission.assignment == assignment,
               Grading.status.in_([s.value for s in TERMINAL_STATUSES]))
        .order_by(Submission.id)
    )
    if student_id is not None:
        statement = statement.where(Submission.student_id == student_id)
    if status is not None:
        statement = statement.where(Grading.status == status)
    if grader_version is not None:
        statement = statement.where(Grading.grader_version == grader_version)
    if submission_ids is not None:
        statement = statement.where(Submission.id.in_(list(submission_ids)))
    chosen: list[Submission] = []
    busy = 0
    for submission, is_busy in session.execute(statement).all():
        if is_busy:
            busy += 1
        elif len(chosen) < limit:
            chosen.append(submission)
    return chosen, busy


def get_regrade_batch(session: Session, *, batch_id: int) -> RegradeBatch | None:
    """The batch, or None."""
    return session.get(RegradeBatch, batch_id)


def list_regrade_batches(
    session: Session, *, assignment: str | None, limit: int, offset: int
) -> Sequence[RegradeBatch]:
    """Batches, newest first."""
    statement = select(RegradeBatch).order_by(RegradeBatch.id.desc()).limit(limit).offset(offset)
    if assignment is not None:
        statement = statement.where(RegradeBatch.assignment == assignment)
    return session.scalars(statement).all()


def regrade_gradings(session: Session, *, batch_id: int) -> Sequence[Grading]:
    """The batch's gradings (oldest first), each with its checks, its submission, the
    submission's student and current grading (with checks) loaded."""
    return session.scalars(
        select(Grading)
        .where(Grading.regrade_batch_id == batch_id)
        .options(
            selectinload(Grading.checks),
            selectinload(Grading.submission).selectinload(Submission.student),
            selectinload(Grading.submission)
            .selectinload(Submission.current_grading),
            selectinload(Grading.replaces).selectinload(Grading.checks),
        )
        .order_by(Grading.id)
    ).all()


def set_current_grading(
    session: Session, *, submission_id: int, grading_id: int, replaces_grading_id: int
) -> bool:
    """Make `grading_id` the current grading of `submission_id` in place of
    `replaces_grading_id`. Returns False, changing nothing, when `replaces_grading_id` is
    no longer the current one (another batch was applied meanwhile).

    Two statements in the caller's transaction: the old current grading is unset first
    (conditionally, under its row lock), so the partial unique index (one current grading
    per submission) holds after each."""
    unset = session.execute(
        update(Grading)
        .where(Grading.id == replaces_grading_id, Grading.submission_id == submission_id,
               Grading.is_current)
        .values(is_current=False)
        .execution_options(synchronize_session="fetch")
    )
    if unset.rowcount != 1:
        return False
    session.execute(
        update(Grading)
        .where(Grading.id == grading_id, Grading.submission_id == submission_id)
        .values(is_current=True)
        .execution_options(synchronize_session="fetch")
    )
    return True


def delete_queued_gradings(session: Session, *, batch_id: int) -> int:
    """Delete the batch's gradings that never started (a discarded batch); running and
    finished ones stay in the history. Returns how many were deleted.

    Concurrency: the DELETE re-checks ``status = 'queued'`` under the row lock, so a grading
    a worker claims meanwhile is kept (the claim's UPDATE and this DELETE serialise)."""
    result = session.execute(
        delete(Grading)
        .where(Grading.regrade_batch_id == batch_id, Grading.status == SubmissionStatus.QUEUED)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount


def set_regrade_state(
    session: Session, *, batch_id: int, state: RegradeState, by: str, now: dt.datetime
) -> bool:
    """Move an open batch to `state`. Returns False (nothing written) if it is no longer
    open: two staff members deciding at once cannot both succeed."""
    result = session.execute(
        update(RegradeBatch)
        .where(RegradeBatch.id == batch_id, RegradeBatch.state == RegradeState.OPEN)
        .values(state=state, decided_at=now, decided_by=by)
        .execution_options(synchronize_session="fetch")
    )
    return result.rowcount == 1
